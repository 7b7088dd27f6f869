// Connections and channels (read-only lists; an administrator can close a connection).
import { api, enc, get } from "./api.js";
import { confirmAction, fmtNum, h, ListView, refreshNow, toast } from "./ui.js";

export function connectionsView(main, _params, session) {
  const admin = session.user.tags.includes("administrator");
  const list = new ListView({
    id: "connections", empty: "No connections.",
    columns: [
      { key: "name", label: "Name" }, { key: "user", label: "User" }, { key: "vhost", label: "Virtual host" },
      { key: "channels", label: "Channels", num: true },
      { key: "client", label: "Client", sortPath: "client_properties.product", render: (r) => product(r) },
      ...(admin ? [{ key: "close", label: "", sortable: false, render: (r) => h("button", {
        type: "button", class: "danger", "aria-label": `Close connection ${r.name}`, onclick: async () => {
          if (!(await confirmAction(`Close connection ${r.name}?`))) return;
          await api("DELETE", `/connections/${enc(r.name)}`);
          toast("Connection closed");
          refreshNow();
        } }, "Close") }] : []),
    ],
    query: (qs) => get(`${session.vhost ? `/vhosts/${enc(session.vhost)}/connections` : "/connections"}?${qs}`),
  });
  main.append(h("h2", {}, "Connections"), list.el);
  return list;
}

function product(r) {
  const p = r.client_properties || {};
  return [p.product, p.version].filter(Boolean).join(" ");
}

export function channelsView(main, _params, session) {
  const list = new ListView({
    id: "channels", empty: "No channels.",
    columns: [
      { key: "name", label: "Channel" }, { key: "user", label: "User" }, { key: "vhost", label: "Virtual host" },
      { key: "mode", label: "Mode", render: (r) => [r.confirm && "confirm", r.transactional && "tx"].filter(Boolean).join(" ") },
      { key: "consumer_count", label: "Consumers", num: true },
      { key: "prefetch_count", label: "Prefetch", num: true },
      { key: "messages_unacknowledged", label: "Unacked", num: true, render: (r) => fmtNum(r.messages_unacknowledged) },
    ],
    query: (qs) => get(`${session.vhost ? `/vhosts/${enc(session.vhost)}/channels` : "/channels"}?${qs}`),
  });
  main.append(h("h2", {}, "Channels"), list.el);
  return list;
}
