// Overview: totals, message rates and queued messages charted from the broker's history, alarms,
// listeners, node.
import { get } from "./api.js";
import { historyQuery, lineChart } from "./chart.js";
import { fmtBytes, fmtNum, h, kv, totals } from "./ui.js";

function fmtUptime(ms) {
  const s = Math.floor(ms / 1000), d = Math.floor(s / 86400), hrs = Math.floor((s % 86400) / 3600);
  return d ? `${d} d ${hrs} h` : hrs ? `${hrs} h ${Math.floor((s % 3600) / 60)} min` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

export function overviewView(main) {
  const box = h("div");
  main.append(h("h2", {}, "Overview"), box);
  return {
    async refresh() {
      const o = await get(`/overview?${historyQuery()}`);
      // the node's own figures need the monitoring tag: without it the card shows the overview's
      const node = await get(`/nodes/${encodeURIComponent(o.node)}`).catch(() => ({}));
      const qt = o.queue_totals || {}, ot = o.object_totals || {}, ms = o.message_stats || {};
      // a cluster's nodes (role, in-sync, lag): the leader answers for all of them
      const nodes = (await get("/nodes").catch(() => [])).filter((n) => n.cluster_role);
      const alarms = o.alarms || [];
      const listeners = o.listeners || [];
      box.replaceChildren(
        h("section", { "aria-label": "Totals", class: "card" }, totals([
          ["Messages", qt.messages, "total-messages"], ["Ready", qt.messages_ready, "total-ready"],
          ["Unacked", qt.messages_unacknowledged, "total-unacked"], ["Connections", ot.connections, "total-connections"],
          ["Channels", ot.channels, "total-channels"], ["Exchanges", ot.exchanges, "total-exchanges"],
          ["Queues", ot.queues, "total-queues"], ["Consumers", ot.consumers, "total-consumers"]])),
        h("div", { class: "grid" },
          lineChart(ms, ["publish", "deliver_get", "ack"], ["Publish", "Deliver / get", "Ack"], { title: "Message rates" }),
          lineChart(qt, ["messages_ready", "messages_unacknowledged"], ["Ready", "Unacked"],
            { title: "Queued messages", unit: "", rates: false })),
        h("div", { class: "grid" },
          h("section", { class: "card", id: "alarms", "aria-label": "Alarms" }, h("h3", {}, "Alarms"),
            alarms.length ? alarms.map((a) => h("span", { class: "pill bad" }, `${a} alarm`))
              : h("span", { class: "pill ok" }, "none: publishers are not blocked")),
          h("section", { class: "card", "aria-label": "Node" }, h("h3", {}, "Node"), kv([
            ["Name", o.node], ["Cluster", o.cluster_name ?? ""], ["Version", `${o.product_name} ${o.product_version}`],
            ["Uptime", node.uptime === undefined ? "" : fmtUptime(node.uptime)],
            ["Memory", node.mem_limit ? `${fmtBytes(node.mem_used)} of ${fmtBytes(node.mem_limit)} (alarm level)`
              : fmtBytes(o.mem_rss)],
            ["Disk free", node.disk_free_limit ? `${fmtBytes(o.disk_free)} (alarm below ${fmtBytes(node.disk_free_limit)})`
              : fmtBytes(o.disk_free)],
            ["File descriptors", node.fd_total ? `${fmtNum(node.fd_used)} of ${fmtNum(node.fd_total)}` : ""]])),
          h("section", { class: "card", id: "listeners", "aria-label": "Listeners" }, h("h3", {}, "Listeners"),
            listeners.length ? h("table", {}, h("thead", {}, h("tr", {}, ["Protocol", "Interface", "Port"]
              .map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, listeners.map((l) =>
              h("tr", {}, h("td", {}, l.protocol), h("td", {}, l.ip_address), h("td", { class: "num" }, String(l.port))))))
              : h("p", { class: "muted" }, "Not reported by this broker version."))),
        nodes.length ? clusterCard(nodes) : "");
    },
  };
}

function clusterCard(nodes) {
  return h("section", { class: "card", id: "cluster-nodes", "aria-label": "Cluster nodes" }, h("h3", {}, "Cluster nodes"),
    h("table", {}, h("thead", {}, h("tr", {}, ["Node", "Role", "Running", "In sync", "Lag (batches)", "Lag"]
      .map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, nodes.map((n) => h("tr", {},
      h("td", {}, n.name), h("td", {}, n.cluster_role),
      h("td", {}, h("span", { class: `pill ${n.running ? "ok" : "bad"}` }, n.running ? "yes" : "no")),
      h("td", {}, h("span", { class: `pill ${n.in_sync ? "ok" : "bad"}` }, n.in_sync ? "yes" : "no")),
      h("td", { class: "num" }, fmtNum(n.replication_lag || 0)),
      h("td", { class: "num" }, fmtBytes(n.replication_lag_bytes || 0)))))));
}
