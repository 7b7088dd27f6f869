// Connections and channels: the lists, and a page for each (a connection's client properties,
// client-provided name, traffic charted and channels; a channel's state, rates and consumers); an
// administrator can close a connection.
import { api, enc, get } from "./api.js";
import { historyQuery, lineChart } from "./chart.js";
import { confirmAction, fmtBytes, fmtNum, fmtRate, h, kv, ListView, press, refreshNow, toast } from "./ui.js";

const connectionHref = (name) => `#/connection/${enc(name)}`;
const channelHref = (name) => `#/channel/${enc(name)}`;
const link = (href, text) => h("a", { href }, text);

export function connectionsView(main, _params, session) {
  const admin = session.user.tags.includes("administrator");
  const list = new ListView({
    id: "connections", empty: "No connections.",
    columns: [
      { key: "name", label: "Name", render: (r) => link(connectionHref(r.name), r.name) },
      { key: "user_provided_name", label: "Client-provided name", render: (r) => r.user_provided_name || "" },
      { key: "user", label: "User" }, { key: "vhost", label: "Virtual host" },
      { key: "channels", label: "Channels", num: true },
      { key: "client", label: "Client", sortPath: "client_properties.product", render: (r) => product(r) },
      // bytes per second from and to the client, as RabbitMQ's UI shows them (recv_oct / send_oct rates)
      { key: "from_client", label: "From client", num: true, sortPath: "recv_oct_details.rate", render: (r) => byteRate(r.recv_oct_details) },
      { key: "to_client", label: "To client", num: true, sortPath: "send_oct_details.rate", render: (r) => byteRate(r.send_oct_details) },
      ...(admin ? [{ key: "close", label: "", sortable: false, render: (r) => closeButton(r.name, refreshNow) }] : []),
    ],
    query: (qs) => get(`${session.vhost ? `/vhosts/${enc(session.vhost)}/connections` : "/connections"}?${qs}`),
  });
  main.append(h("h2", {}, "Connections"), list.el);
  return list;
}

function closeButton(name, after) {
  return h("button", { type: "button", class: "danger", "aria-label": `Close connection ${name}`, onclick: press(async () => {
    if (!(await confirmAction(`Close connection ${name}?`))) return;
    await api("DELETE", `/connections/${enc(name)}`);
    toast("Connection closed");
    await after();
  }) }, "Close");
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
      { key: "name", label: "Channel", render: (r) => link(channelHref(r.name), r.name) },
      { key: "user", label: "User" }, { key: "vhost", label: "Virtual host" },
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

// A connection's page: who it is (client properties, the name the client gave), its traffic
// charted, its channels; an administrator can close it.
export function connectionView(main, [name], session) {
  const path = `/connections/${enc(name)}`;
  const info = h("div", { id: "connection-info" });
  const chart = h("div");
  let channelRows = [];
  const channels = channelList("connection-channels", async () => channelRows);
  const admin = session.user.tags.includes("administrator");
  main.append(h("a", { href: "#/connections", class: "back" }, "← Connections"),
    h("h2", {}, `Connection ${name}`), h("div", { class: "grid" }, info, chart),
    h("section", { class: "card", "aria-labelledby": "conn-channels-title" },
      h("h3", { id: "conn-channels-title" }, "Channels"), channels.el),
    ...(admin ? [h("section", { class: "card" }, h("h3", {}, "Close this connection"),
      closeButton(name, async () => { location.hash = "#/connections"; }))] : []));
  return {
    async refresh() {
      const c = await get(`${path}?${historyQuery()}`);
      channelRows = await get(`${path}/channels`);
      info.replaceChildren(h("section", { class: "card" }, kv([
        ["Client-provided name", c.user_provided_name || ""], ["User", c.user], ["Virtual host", c.vhost],
        ["Client", product(c)], ["From", `${c.peer_host}:${c.peer_port}`], ["To", `${c.host}:${c.port}`],
        ["Protocol", c.protocol], ["TLS", String(c.ssl)], ["Authentication", c.auth_mechanism],
        ["Channels", fmtNum(c.channels)], ["Channel max", fmtNum(c.channel_max)], ["Frame max", fmtNum(c.frame_max)],
        ["Heartbeat", `${c.timeout} s`], ["Connected at", new Date(c.connected_at).toISOString()]]),
      h("h4", {}, "Client properties"), h("pre", { id: "client-properties" }, JSON.stringify(c.client_properties || {}, null, 2))));
      chart.replaceChildren(lineChart(c, ["recv_oct", "send_oct"], ["From client", "To client"],
        { title: "Data rates", unit: " B/s" }));
      await channels.refresh();
    },
  };
}

function channelList(id, load) {
  return new ListView({
    id, empty: "No channels.", rowKey: (r) => r.name,
    columns: [
      { key: "name", label: "Channel", render: (r) => link(channelHref(r.name), r.name) },
      { key: "mode", label: "Mode", render: (r) => [r.confirm && "confirm", r.transactional && "tx"].filter(Boolean).join(" ") },
      { key: "consumer_count", label: "Consumers", num: true }, { key: "prefetch_count", label: "Prefetch", num: true },
      { key: "messages_unacknowledged", label: "Unacked", num: true },
      { key: "publish", label: "Publish", num: true, sortValue: (r) => r.message_stats?.publish_details?.rate || 0,
        render: (r) => msgRate(r, "publish") },
    ],
    load,
  });
}

// A channel's page: its state, message rates charted, its consumers.
export function channelView(main, [name]) {
  const info = h("div", { id: "channel-info" });
  const chart = h("div");
  let consumerRows = [];
  const consumers = new ListView({
    id: "channel-consumers", empty: "No consumers.", rowKey: (c) => c.consumer_tag,
    columns: [{ key: "consumer_tag", label: "Consumer tag" },
      { key: "queue", label: "Queue", render: (c) => c.queue?.name ?? "" },
      { key: "ack_required", label: "Ack required", render: (c) => String(c.ack_required) },
      { key: "prefetch_count", label: "Prefetch", num: true }],
    load: async () => consumerRows,
  });
  main.append(h("a", { href: "#/channels", class: "back" }, "← Channels"), h("h2", {}, `Channel ${name}`),
    h("div", { class: "grid" }, info, chart),
    h("section", { class: "card", "aria-labelledby": "ch-consumers-title" },
      h("h3", { id: "ch-consumers-title" }, "Consumers"), consumers.el));
  return {
    async refresh() {
      const c = await get(`/channels/${enc(name)}?${historyQuery()}`);
      consumerRows = c.consumer_details || [];
      info.replaceChildren(h("section", { class: "card" }, kv([
        ["Connection", link(connectionHref(c.connection_details.name), c.connection_details.name)],
        ["User", c.user], ["Virtual host", c.vhost], ["State", c.state],
        ["Mode", [c.confirm && "confirm", c.transactional && "tx"].filter(Boolean).join(" ") || "plain"],
        ["Prefetch", fmtNum(c.prefetch_count)], ["Global prefetch", fmtNum(c.global_prefetch_count)],
        ["Unacked", fmtNum(c.messages_unacknowledged)], ["Unconfirmed", fmtNum(c.messages_unconfirmed)],
        ["Uncommitted", fmtNum(c.messages_uncommitted)]])));
      chart.replaceChildren(lineChart(c.message_stats || {}, ["publish", "deliver_get", "ack"],
        ["Publish", "Deliver / get", "Ack"], { title: "Message rates" }));
      await consumers.refresh();
    },
  };
}
