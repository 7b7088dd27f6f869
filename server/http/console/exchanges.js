// Exchanges: the list with a form to add one, and each exchange's page (rates, bindings, publish, delete).
import { api, enc, get } from "./api.js";
import { historyQuery, lineChart } from "./chart.js";
import { bindingsSection, deleteButton, publishForm } from "./forms.js";
import { act, field, h, kv, ListView, refreshNow, toast } from "./ui.js";

export const exchangeHref = (vhost, name) => `#/exchange/${enc(vhost)}/${enc(name || "amq.default")}`;

export function exchangesView(main, _params, session) {
  const list = new ListView({
    id: "exchanges", rowKey: (r) => `${r.vhost}|${r.name}`,
    columns: [
      { key: "vhost", label: "Virtual host" },
      { key: "name", label: "Name", render: (r) => h("a", { href: exchangeHref(r.vhost, r.name) }, r.name || "(AMQP default)") },
      { key: "type", label: "Type" },
      { key: "features", label: "Features", sortable: false, render: (r) => [
        r.durable && h("span", { class: "pill", title: "durable" }, "D"),
        r.auto_delete && h("span", { class: "pill", title: "auto-delete" }, "AD"),
        r.internal && h("span", { class: "pill", title: "internal" }, "I"),
        r.mirrored && h("span", { class: "pill", title: "mirrored to a log" }, "mirror")] },
    ],
    query: (qs) => get(`${session.vhost ? `/exchanges/${enc(session.vhost)}` : "/exchanges"}?${qs}`),
  });
  main.append(h("h2", {}, "Exchanges"), list.el, addExchangeForm(session));
  return list;
}

function addExchangeForm(session) {
  const vhost = h("input", { id: "exchange-vhost", value: session.vhost || "/", required: true });
  const name = h("input", { id: "exchange-name", required: true });
  const type = h("select", { id: "exchange-type" },
    ["direct", "fanout", "topic", "headers", "x-delayed-message", "x-consistent-hash"].map((t) => h("option", {}, t)));
  const durable = h("select", { id: "exchange-durable" }, h("option", { value: "true" }, "Durable"),
    h("option", { value: "false" }, "Transient"));
  const out = h("p", { class: "error", role: "alert" });
  return h("section", { class: "card", "aria-labelledby": "add-exchange" }, h("h3", { id: "add-exchange" }, "Add an exchange"),
    h("form", { class: "row", onsubmit: (ev) => {
      ev.preventDefault();
      act(out, async () => {
        await api("PUT", `/exchanges/${enc(vhost.value)}/${enc(name.value)}`,
          { type: type.value, durable: durable.value === "true", auto_delete: false, internal: false, arguments: {} });
        return `Exchange ${name.value} added.`;
      }, refreshNow);
    } }, field("Virtual host", vhost), field("Name", name), field("Type", type), field("Durability", durable),
    h("div", {}, h("button", { type: "submit" }, "Add exchange")), out));
}

export function exchangeView(main, [vhost, name]) {
  const info = h("div");
  const chart = h("div");
  const schedule = h("div");
  const bindings = bindingsSection(vhost, { source: name === "amq.default" ? "" : name });
  main.append(h("a", { href: "#/exchanges", class: "back" }, "← Exchanges"),
    h("h2", {}, `Exchange ${name}`, h("span", { class: "muted" }, ` in ${vhost}`)), h("div", { class: "grid" }, info, chart), schedule);
  if (name !== "amq.default") main.append(bindings.el);
  main.append(publishForm(vhost, name));
  if (name !== "amq.default" && !name.startsWith("amq.")) {
    main.append(h("section", { class: "card" }, h("h3", {}, "Delete this exchange"),
      deleteButton("Delete exchange", `exchange ${name}`, `/exchanges/${enc(vhost)}/${enc(name)}`, () => {
        toast(`Exchange ${name} deleted.`);
        location.hash = "#/exchanges";
      })));
  }
  return {
    async refresh() {
      const x = name === "amq.default"
        ? (await get(`/exchanges/${enc(vhost)}?${historyQuery()}`)).find((e) => e.name === "")
        : await get(`/exchanges/${enc(vhost)}/${enc(name)}?${historyQuery()}`);
      const ms = x.message_stats || {};
      info.replaceChildren(h("section", { class: "card" }, kv([
        ["Type", x.type], ["Durable", String(x.durable)], ["Auto delete", String(x.auto_delete)],
        ["Internal", String(x.internal)], ["Arguments", JSON.stringify(x.arguments || {})],
        ["Mirrored", String(Boolean(x.mirrored))]])));
      chart.replaceChildren(lineChart(ms, ["publish_in", "publish_out"], ["Publish in", "Publish out"],
        { title: "Message rates" }));
      schedule.replaceChildren(x.type === "x-delayed-message"
        ? scheduleCard(await get(`/exchanges/${enc(vhost)}/${enc(name)}/schedule`)) : "");
      if (name !== "amq.default") await bindings.refresh();
    },
  };
}

const span = (s) => (s === null ? "later" : s < 3600 ? `≤ ${s / 60} min` : s < 86400 ? `≤ ${s / 3600} h` : `≤ ${s / 86400} d`);

// A delayed exchange's held messages by due time: a bar per bin of GET .../schedule.
function scheduleCard(sched) {
  const top = Math.max(1, ...sched.histogram.map((b) => b.count));
  return h("section", { class: "card", id: "schedule", "aria-labelledby": "schedule-title" },
    h("h3", { id: "schedule-title" }, `Scheduled messages: ${sched.messages_delayed}`),
    h("table", { class: "schedule" }, h("thead", {}, h("tr", {}, h("th", {}, "Due"), h("th", {}, "Messages"), h("th", {}, ""))),
      h("tbody", {}, sched.histogram.map((b) => h("tr", { "data-due": String(b.due_within_seconds) },
        h("td", {}, span(b.due_within_seconds)), h("td", { class: "num" }, String(b.count)),
        h("td", {}, h("div", { class: "bar", style: `width:${Math.round((100 * b.count) / top)}%` })))))),
    h("p", { class: "muted" }, `Counted by the minute of their due time.`));
}
