// Connections and channels (read-only lists; an administrator can close a connection), with their
// traffic and message rates.
import { api, enc, get } from "./api.js";
import { confirmAction, fmtBytes, fmtNum, fmtRate, h, ListView, press, refreshNow, toast } from "./ui.js";

export function connectionsView(main, _params, session) {
  const admin = session.user.tags.includes("administrator");
  const list = new ListView({
    id: "connections", empty: "No connections.",
    columns: [
      { key: "name", label: "Name" }, { key: "user", label: "User" }, { key: "vhost", label: "Virtual host" },
      { key: "channels", label: "Channels", num: true },
      { key: "client", label: "Client", sortPath: "client_properties.product", render: (r) => product(r) },
      // bytes per second from and to the client, as RabbitMQ's UI shows them (recv_oct / send_oct rates)
      { key: "from_client", label: "From client", num: true, sortPath: "recv_oct_details.rate", render: (r) => byteRate(r.recv_oct_details) },
      { key: "to_client", label: "To client", num: true, sortPath: "send_oct_details.rate", render: (r) => byteRate(r.send_oct_details) },
      ...(admin ? [{ key: "close", label: "", sortable: false, render: (r) => h("button", {
        type: "button", class: "danger", "aria-label": `Close connection ${r.name}`, onclick: press(async () => {
          if (!(await confirmAction(`Close connection ${r.name}?`))) return;
          await api("DELETE", `/connections/${enc(r.name)}`);
          toast("Connection closed");
          refreshNow();
        }) }, "Close") }] : []),
    ],
    query: (qs) => get(`${session.vhost ? `/vhosts/${enc(session.vhost)}/connections` : "/connections"}?${qs}`),
  });
  main.append(h("h2", {}, "Connections"), list.el);
  return list;
}

const byteRate = (d) => (d ? `${fmtBytes(d.rate)}/s` : "");
const msgRate = (r, key) => fmtRate(r.message_stats?.[`${key}_details`]?.rate);

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
      { key: "publish", label: "Publish", num: true, sortPath: "message_stats.publish_details.rate", render: (r) => msgRate(r, "publish") },
      { key: "deliver_get", label: "Deliver / get", num: true, sortPath: "message_stats.deliver_get_details.rate",
        render: (r) => msgRate(r, "deliver_get") },
      { key: "ack", label: "Ack", num: true, sortPath: "message_stats.ack_details.rate", render: (r) => msgRate(r, "ack") },
    ],
    query: (qs) => get(`${session.vhost ? `/vhosts/${enc(session.vhost)}/channels` : "/channels"}?${qs}`),
  });
  main.append(h("h2", {}, "Channels"), list.el);
  return list;
}
