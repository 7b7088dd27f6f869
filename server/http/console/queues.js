// Queues and streams: the list with a form to add one, and each queue's page (rates, consumers,
// bindings, publish, get messages, purge, delete).
import { api, enc, get } from "./api.js";
import { historyQuery, lineChart } from "./chart.js";
import { bindingsSection, deleteButton, publishForm } from "./forms.js";
import { moveMessagesForm } from "./shovels.js";
import { act, confirmAction, field, fmtBytes, fmtNum, fmtRate, h, kv, ListView, press, rate, refreshNow, toast, totals } from "./ui.js";

export const queueHref = (vhost, name) => `#/queue/${enc(vhost)}/${enc(name)}`;

export function queuesView(main, _params, session) {
  const list = new ListView({
    id: "queues", rowKey: (r) => `${r.vhost}|${r.name}`,
    columns: [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name", render: (r) => h("a", { href: queueHref(r.vhost, r.name) }, r.name) },
      { key: "type", label: "Type" },
      { key: "features", label: "Features", sortable: false, render: (r) => [
        r.durable && h("span", { class: "pill", title: "durable" }, "D"),
        r.auto_delete && h("span", { class: "pill", title: "auto-delete" }, "AD"),
        r.exclusive && h("span", { class: "pill", title: "exclusive" }, "Excl"),
        r.policy && h("span", { class: "pill", title: "policy" }, r.policy)] },
      { key: "state", label: "State" },
      { key: "messages_ready", label: "Ready", num: true },
      { key: "messages_unacknowledged", label: "Unacked", num: true },
      { key: "messages", label: "Total", num: true },
      { key: "consumers", label: "Consumers", num: true },
      { key: "publish_rate", label: "Incoming", num: true, sortPath: "message_stats.publish_details.rate",
        render: (r) => fmtRate(rate(r.message_stats, "publish")) },
      { key: "deliver_rate", label: "Deliver / get", num: true, sortPath: "message_stats.deliver_get_details.rate",
        render: (r) => fmtRate(rate(r.message_stats, "deliver_get")) },
    ],
    query: (qs) => get(`${session.vhost ? `/queues/${enc(session.vhost)}` : "/queues"}?${qs}`),
  });
  main.append(h("h2", {}, "Queues and Streams"), list.el, addQueueForm(session));
  return list;
}

function addQueueForm(session) {
  const vhost = h("input", { id: "queue-vhost", value: session.vhost || "/", required: true });
  const name = h("input", { id: "queue-name", required: true });
  const type = h("select", { id: "queue-type" }, ["classic", "quorum", "stream"].map((t) => h("option", {}, t)));
  const durable = h("select", { id: "queue-durable" }, h("option", { value: "true" }, "Durable"),
    h("option", { value: "false" }, "Transient"));
  const args = h("input", { id: "queue-arguments", placeholder: '{"x-max-length": 1000}' });
  const out = h("p", { class: "error", role: "alert" });
  return h("section", { class: "card", "aria-labelledby": "add-queue" }, h("h3", { id: "add-queue" }, "Add a queue"),
    h("form", { class: "row", id: "add-queue-form", onsubmit: (ev) => {
      ev.preventDefault();
      act(out, async () => {
        let extra = {};
        if (args.value.trim()) {
          try { extra = JSON.parse(args.value); } catch { throw new Error("Arguments must be a JSON object"); }
        }
        const argumentsObj = type.value === "classic" ? extra : { "x-queue-type": type.value, ...extra };
        await api("PUT", `/queues/${enc(vhost.value)}/${enc(name.value)}`,
          { durable: durable.value === "true", auto_delete: false, arguments: argumentsObj });
        return `Queue ${name.value} added.`;
      }, refreshNow);
    } }, field("Virtual host", vhost), field("Name", name), field("Type", type), field("Durability", durable),
    field("Arguments (JSON)", args), h("div", {}, h("button", { type: "submit" }, "Add queue")), out));
}

export function queueView(main, [vhost, name], session) {
  const path = `/queues/${enc(vhost)}/${enc(name)}`;
  const info = h("div");
  const chart = h("div");
  const consumers = new ListView({
    id: "consumers", empty: "No consumers.", rowKey: (c) => c.consumer_tag,
    columns: [{ key: "consumer_tag", label: "Consumer tag" }, { key: "channel", label: "Channel", render: (c) =>
      typeof c.channel_details === "object" ? c.channel_details.name : c.channel },
    { key: "ack_required", label: "Ack required", render: (c) => String(c.ack_required) },
    { key: "prefetch_count", label: "Prefetch", num: true }, { key: "exclusive", label: "Exclusive", render: (c) => String(c.exclusive) },
    { key: "priority", label: "Priority", num: true }],
    load: async () => consumerRows,
  });
  let consumerRows = [];
  const bindings = bindingsSection(vhost, { destination: name });
  const reader = session.user.tags.some((t) => t === "administrator" || t === "management");
  // a stream has no get and no purge (RabbitMQ refuses both): shown once its type is known
  const purge = h("button", { type: "button", class: "secondary", id: "purge-button", hidden: true,
    onclick: press(async () => {
      if (!(await confirmAction(`Purge all ready messages of queue ${name}?`))) return;
      await api("DELETE", `${path}/contents`);
      toast(`Queue ${name} purged.`);
      refreshNow();
    }) }, "Purge messages");
  const getSection = reader ? getMessagesForm(vhost, name) : h("section", { class: "card", id: "get-messages-denied" },
    h("h3", {}, "Get messages"), h("p", { class: "muted" }, "Reading message contents needs the management or administrator tag."));
  getSection.hidden = true;
  main.append(h("a", { href: "#/queues", class: "back" }, "← Queues"),
    h("h2", {}, `Queue ${name}`, h("span", { class: "muted" }, ` in ${vhost}`)), h("div", { class: "grid" }, info, chart),
    h("section", { class: "card", "aria-labelledby": "consumers-title" }, h("h3", { id: "consumers-title" }, "Consumers"), consumers.el),
    bindings.el, publishForm(vhost, "", name),
    getSection,
    reader && moveMessagesForm(vhost, name),
    h("section", { class: "card", "aria-labelledby": "danger-title" }, h("h3", { id: "danger-title" }, "Purge or delete"),
      h("div", { class: "controls" },
        purge,
        deleteButton("Delete queue", `queue ${name}`, path, () => { toast(`Queue ${name} deleted.`); location.hash = "#/queues"; }))));
  return {
    async refresh() {
      const q = await get(`${path}?${historyQuery()}`);
      consumerRows = q.consumer_details || [];
      const stream = q.type === "stream";
      purge.hidden = stream;
      getSection.hidden = stream;
      const ms = q.message_stats || {};
      info.replaceChildren(h("section", { class: "card", id: "queue-totals", "aria-label": "Queued messages" }, totals([
        ["Total", q.messages, "queue-messages"], ["Ready", q.messages_ready, "queue-ready"],
        ["Unacked", q.messages_unacknowledged, "queue-unacked"], ["Consumers", q.consumers, "queue-consumers"]]),
      kv([["Type", q.type], ["State", q.state], ["Durable", String(q.durable)], ["Auto delete", String(q.auto_delete)],
        ["Exclusive", String(q.exclusive)], ["Arguments", JSON.stringify(q.arguments || {})],
        ["Policy", q.policy || ""],
        ["Effective policy definition", Object.keys(q.effective_policy_definition || {}).length
          ? JSON.stringify(q.effective_policy_definition) : ""],
        ["Ready bytes", fmtBytes(q.message_bytes_ready)],
        ["Memory", fmtBytes(q.memory)], ["Published", fmtNum(ms.publish ?? 0)], ["Delivered / got", fmtNum(ms.deliver_get ?? 0)],
        ["Idle since", q.idle_since || "(in use)"]])));
      chart.replaceChildren(lineChart(ms, ["publish", "deliver_get", "ack"], ["Publish", "Deliver / get", "Ack"],
        { title: "Message rates" }), lineChart(q, ["messages_ready", "messages_unacknowledged"], ["Ready", "Unacked"],
        { title: "Queued messages", unit: "", rates: false }));
      await Promise.all([consumers.refresh(), bindings.refresh()]);
    },
  };
}

function getMessagesForm(vhost, name) {
  const ackmode = h("select", { id: "get-ackmode" },
    h("option", { value: "ack_requeue_true" }, "Nack message requeue true"),
    h("option", { value: "ack_requeue_false" }, "Automatic ack"),
    h("option", { value: "reject_requeue_true" }, "Reject requeue true"),
    h("option", { value: "reject_requeue_false" }, "Reject requeue false"));
  const encoding = h("select", { id: "get-encoding" }, h("option", { value: "auto" }, "Automatic string/base64"),
    h("option", { value: "base64" }, "base64"));
  const count = h("input", { id: "get-count", type: "number", min: "1", max: "10000", value: "1" });
  const results = h("div", { id: "get-results", "aria-live": "polite" });
  const out = h("p", { class: "error", role: "alert" });
  const form = h("form", { class: "row", id: "get-form", onsubmit: (ev) => {
    ev.preventDefault();
    act(out, async () => {
      if (ackmode.value.endsWith("requeue_false")
          && !(await confirmAction("These messages will be removed from the queue. Continue?"))) return "";
      const msgs = await api("POST", `/queues/${enc(vhost)}/${enc(name)}/get`,
        { count: Number(count.value), ackmode: ackmode.value, encoding: encoding.value, truncate: 50000 });
      results.replaceChildren(...(msgs.length ? msgs.map((m, i) => h("article", { class: "message" },
        h("h4", {}, `Message ${i + 1}`), kv([["Exchange", m.exchange || "(AMQP default)"],
          ["Routing key", m.routing_key], ["Redelivered", String(m.redelivered)],
          ["Properties", JSON.stringify(m.properties)], ["Payload", `${m.payload_bytes} bytes, encoding ${m.payload_encoding}`]]),
        h("pre", { class: "payload" }, m.payload))) : [h("p", { class: "muted" }, "Queue is empty.")]));
      return "";
    }, refreshNow);
  } }, field("Ack mode", ackmode), field("Encoding", encoding), field("Messages", count),
  h("div", {}, h("button", { type: "submit" }, "Get messages")), out);
  return h("section", { class: "card", "aria-labelledby": "get-title" }, h("h3", { id: "get-title" }, "Get messages"), form, results);
}
