// Shovels: the dynamic shovels' status (/api/shovels) with their definitions (the "shovel" runtime
// parameters), a form to add one, a delete button on each; then the federation links' status.
import { api, enc, get } from "./api.js";
import { act, confirmAction, field, h, ListView, refreshNow, toast } from "./ui.js";

const side = (v, kind) => v[`${kind}-queue`] !== undefined ? `queue ${v[`${kind}-queue`]}`
  : v[`${kind}-exchange`] !== undefined ? `exchange ${v[`${kind}-exchange`]}` : "(as published)";
const uri = (u) => (Array.isArray(u) ? u[0] : u) || "";

export function shovelsView(main, _params, session) {
  const list = new ListView({
    id: "shovels", empty: "No shovels.", rowKey: (s) => `${s.vhost}|${s.name}`,
    columns: [
      { key: "vhost", label: "Virtual host" }, { key: "name", label: "Name" },
      { key: "state", label: "State", render: (s) => s.reason ? h("span", { title: s.reason }, `${s.state}: ${s.reason}`) : s.state },
      { key: "source", label: "Source", sortable: false, render: (s) => `${uri(s.value["src-uri"]).replace(/:[^:@/]*@/, "@")} ${side(s.value, "src")}` },
      { key: "destination", label: "Destination", sortable: false,
        render: (s) => `${uri(s.value["dest-uri"]).replace(/:[^:@/]*@/, "@")} ${side(s.value, "dest")}` },
      { key: "ack_mode", label: "Ack mode", render: (s) => s.value["ack-mode"] || "on-confirm" },
      { key: "forwarded", label: "Forwarded", num: true },
      { key: "remaining", label: "Remaining", render: (s) => s.remaining ?? "" },
      { key: "actions", label: "", sortable: false, render: (s) => h("button", { type: "button", class: "secondary",
        onclick: async () => {
          if (!(await confirmAction(`Delete shovel ${s.name}?`))) return;
          await api("DELETE", `/parameters/shovel/${enc(s.vhost)}/${enc(s.name)}`);
          toast(`Shovel ${s.name} deleted.`);
          refreshNow();
        } }, "Delete") },
    ],
    load: async () => {
      const [defs, status] = await Promise.all([get("/parameters/shovel"), get("/shovels")]);
      const byKey = new Map(status.map((s) => [`${s.vhost}|${s.name}`, s]));
      return defs.filter((d) => !session.vhost || d.vhost === session.vhost)
        .map((d) => ({ state: "starting", ...byKey.get(`${d.vhost}|${d.name}`), vhost: d.vhost, name: d.name, value: d.value }));
    },
  });
  const links = new ListView({
    id: "federation-links", empty: "No federation links.", rowKey: (l) => l.id,
    columns: [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Federated", render: (l) => `${l.type} ${l.name}` },
      { key: "upstream", label: "Upstream" }, { key: "uri", label: "URI" },
      { key: "upstream_name", label: "Upstream exchange or queue" },
      { key: "status", label: "State", render: (l) => (l.error ? `${l.status}: ${l.error}` : l.status) },
    ],
    load: async () => (await get("/federation-links")).filter((l) => !session.vhost || l.vhost === session.vhost)
      .map((l) => ({ ...l, name: l.exchange ?? l.queue, upstream_name: l.upstream_exchange ?? l.upstream_queue })),
  });
  main.append(h("h2", {}, "Shovels"),
    h("p", { class: "muted" }, "Dynamic shovels move messages from a queue or exchange to another, on this broker (amqp://) or another."),
    list.el, addShovelForm(session),
    h("h2", {}, "Federation links"),
    h("p", { class: "muted" }, "Exchanges and queues federated from upstreams (a policy with federation-upstream or federation-upstream-set)."),
    links.el);
  return { async refresh() { await Promise.all([list.refresh(), links.refresh()]); } };
}

function addShovelForm(session) {
  const input = (id, attrs = {}) => h("input", { id, ...attrs });
  const vhost = input("shovel-vhost", { value: session.vhost || "/", required: true });
  const name = input("shovel-name", { required: true });
  const srcUri = input("shovel-src-uri", { value: "amqp://", required: true });
  const srcKind = h("select", { id: "shovel-src-kind" }, h("option", { value: "queue" }, "Queue"), h("option", { value: "exchange" }, "Exchange"));
  const src = input("shovel-src", { required: true });
  const destUri = input("shovel-dest-uri", { value: "amqp://", required: true });
  const destKind = h("select", { id: "shovel-dest-kind" }, h("option", { value: "queue" }, "Queue"), h("option", { value: "exchange" }, "Exchange"));
  const dest = input("shovel-dest", { required: true });
  const ackMode = h("select", { id: "shovel-ack-mode" }, ["on-confirm", "on-publish", "no-ack"].map((m) => h("option", {}, m)));
  const deleteAfter = h("select", { id: "shovel-delete-after" }, h("option", { value: "never" }, "Never"),
    h("option", { value: "queue-length" }, "After the source queue's length"));
  const out = h("p", { class: "error", role: "alert" });
  return h("section", { class: "card", "aria-labelledby": "add-shovel" }, h("h3", { id: "add-shovel" }, "Add a shovel"),
    h("form", { class: "row", id: "add-shovel-form", onsubmit: (ev) => {
      ev.preventDefault();
      act(out, async () => {
        const value = { "src-uri": srcUri.value, [`src-${srcKind.value}`]: src.value, "dest-uri": destUri.value,
          [`dest-${destKind.value}`]: dest.value, "ack-mode": ackMode.value };
        if (deleteAfter.value !== "never") value["src-delete-after"] = deleteAfter.value;
        await api("PUT", `/parameters/shovel/${enc(vhost.value)}/${enc(name.value)}`, { value });
        return `Shovel ${name.value} added.`;
      }, refreshNow);
    } }, field("Virtual host", vhost), field("Name", name), field("Source URI", srcUri), field("Source type", srcKind),
    field("Source", src), field("Destination URI", destUri), field("Destination type", destKind), field("Destination", dest),
    field("Ack mode", ackMode), field("Delete after", deleteAfter), h("div", {}, h("button", { type: "submit" }, "Add shovel")), out));
}

// "Move messages" on a queue's page: a shovel from this queue to another that deletes itself once
// the queue's messages are moved, as RabbitMQ's UI does. The destination is filled in with the
// queue a first dead-lettered message came from (its x-death), the common case of a DLQ.
export function moveMessagesForm(vhost, name) {
  const dest = h("input", { id: "move-destination", required: true });
  const out = h("p", { class: "error", role: "alert" });
  const guess = h("button", { type: "button", class: "link", id: "move-from-x-death", onclick: () => act(out, async () => {
    const [m] = await api("POST", `/queues/${enc(vhost)}/${enc(name)}/get`,
      { count: 1, ackmode: "reject_requeue_true", encoding: "auto", truncate: 1 });
    const deaths = m && m.properties.headers && m.properties.headers["x-death"];
    if (!deaths || !deaths.length) throw new Error("The first message has no x-death header.");
    dest.value = deaths[0].queue;
    return "";
  }) }, "Use the origin queue of the first message (x-death)");
  return h("section", { class: "card", "aria-labelledby": "move-title" }, h("h3", { id: "move-title" }, "Move messages"),
    h("p", { class: "muted" }, "A shovel moves this queue's messages to another queue of this broker, then deletes itself."),
    h("form", { class: "row", id: "move-form", onsubmit: (ev) => {
      ev.preventDefault();
      act(out, async () => {
        const shovel = `Move from ${name}`;
        await api("PUT", `/parameters/shovel/${enc(vhost)}/${enc(shovel)}`, { value: {
          "src-uri": "amqp://", "src-queue": name, "dest-uri": "amqp://", "dest-queue": dest.value,
          "ack-mode": "on-confirm", "src-delete-after": "queue-length" } });
        return `Moving the messages of ${name} to ${dest.value} (shovel "${shovel}").`;
      }, refreshNow);
    } }, field("Destination queue", dest), h("div", {}, guess, h("button", { type: "submit" }, "Move messages")), out));
}
