// Super streams and stream consumer groups: each super stream with its partitions, and each group
// with, per partition, its active member, its committed offset and its lag (/api/stream-groups).
import { get } from "./api.js";
import { h, ListView } from "./ui.js";

const inVhost = (session) => (x) => !session.vhost || x.vhost === session.vhost;

export function streamsView(main, _params, session) {
  const supers = new ListView({
    id: "super-streams", empty: "No super stream.", rowKey: (s) => `${s.vhost}|${s.name}`,
    columns: [
      { key: "vhost", label: "Virtual host" }, { key: "name", label: "Super stream" },
      { key: "partition_count", label: "Partitions", num: true },
      { key: "messages", label: "Messages", num: true },
      { key: "groups", label: "Groups", render: (s) => s.groups.map((g) => g.name).join(", ") },
      { key: "consistent", label: "State", render: (s) => (s.consistent ? "consistent" : s.problems.join("; ")) },
    ],
    load: async () => (await get("/super-streams")).filter(inVhost(session)).map((s) => ({
      ...s, messages: s.partitions.reduce((n, p) => n + (p.messages || 0), 0) })),
  });
  // one row per group and partition: the unit a rebalance moves
  const groups = new ListView({
    id: "stream-groups", empty: "No consumer group.", rowKey: (r) => `${r.vhost}|${r.stream}|${r.group}|${r.partition_stream}`,
    columns: [
      { key: "vhost", label: "Virtual host" }, { key: "name", label: "Group" },
      { key: "partition_stream", label: "Partition" },
      { key: "active", label: "Active member", render: (r) => h("span", { title: r.channel }, r.active) },
      { key: "waiting", label: "Waiting", num: true },
      { key: "committed_offset", label: "Committed offset", num: true },
      { key: "lag", label: "Lag", num: true },
    ],
    load: async () => (await get("/stream-groups")).filter(inVhost(session)).flatMap((g) => g.partitions.map((p) => ({
      vhost: g.vhost, name: g.name, group: g.name, stream: g.stream, partition_stream: p.stream,
      active: p.active_consumer ? p.active_consumer.consumer_tag : "none",
      channel: p.active_consumer ? `channel ${p.active_consumer.channel_details.name}` : null,
      waiting: p.waiting, committed_offset: p.committed_offset ?? "none", lag: p.lag }))),
  });
  main.append(h("h2", {}, "Super streams"), supers.el, h("h2", {}, "Consumer groups"),
    h("p", { class: "muted" }, "Per partition: the member reading it, the group's last acked offset, and the messages after it."),
    groups.el);
  return { refresh: () => Promise.all([supers.refresh(), groups.refresh()]) };
}
