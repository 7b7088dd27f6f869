// Pieces shared by the exchange and queue pages: publishing a message, bindings, deleting.
import { api, enc, get } from "./api.js";
import { act, confirmAction, field, h, ListView, press, refreshNow } from "./ui.js";

export function publishForm(vhost, exchange, routingKey = "") {
  const key = h("input", { name: "routing_key", value: routingKey, id: "publish-routing-key" });
  const mode = h("select", { id: "publish-delivery-mode" },
    h("option", { value: "1" }, "1 - non-persistent"), h("option", { value: "2", selected: true }, "2 - persistent"));
  const headers = h("input", { id: "publish-headers", placeholder: '{"x-key": "value"}' });
  const props = h("input", { id: "publish-properties", placeholder: '{"content_type": "text/plain"}' });
  const payload = h("textarea", { id: "publish-payload", name: "payload" });
  const encoding = h("select", { id: "publish-encoding" },
    h("option", { value: "string" }, "string"), h("option", { value: "base64" }, "base64"));
  const out = h("p", { class: "error", role: "alert" });
  const form = h("form", { class: "stack", id: "publish-form", onsubmit: (ev) => {
    ev.preventDefault();
    act(out, async () => {
      const properties = { delivery_mode: Number(mode.value), ...parseJson(props.value, "Properties") };
      if (headers.value.trim()) properties.headers = parseJson(headers.value, "Headers");
      const r = await api("POST", `/exchanges/${enc(vhost)}/${enc(exchange || "amq.default")}/publish`,
        { routing_key: key.value, payload: payload.value, payload_encoding: encoding.value, properties });
      return r.routed ? "Message published." : "Message published, but not routed to any queue.";
    }, refreshNow);
  } },
  field("Routing key", key), field("Delivery mode", mode), field("Headers (JSON)", headers),
  field("Properties (JSON)", props), field("Payload", payload), field("Payload encoding", encoding),
  h("div", {}, h("button", { type: "submit" }, "Publish message")), out);
  return h("section", { class: "card", "aria-labelledby": "publish-title" },
    h("h3", { id: "publish-title" }, "Publish message"), form);
}

function parseJson(text, what) {
  if (!text.trim()) return {};
  try { return JSON.parse(text); } catch { throw new Error(`${what} must be a JSON object`); }
}

// Bindings of one exchange (as source) or one queue (as destination), with a form to add one.
export function bindingsSection(vhost, { source, destination }) {
  const list = new ListView({
    id: "bindings", empty: "No bindings.", rowKey: (b) => `${b.source}|${b.destination}|${b.routing_key}`,
    columns: [
      { key: "source", label: "From", render: (b) => b.source || "(default exchange)" },
      { key: "destination", label: "To", render: (b) => `${b.destination} (${b.destination_type})` },
      { key: "routing_key", label: "Routing key" },
      { key: "arguments", label: "Arguments", sortable: false, render: (b) => JSON.stringify(b.arguments || {}) },
      { key: "unbind", label: "", sortable: false, render: (b) => b.source ? h("button", {
        type: "button", class: "secondary", "aria-label": `Unbind ${b.routing_key}`, onclick: press(async () => {
          if (!(await confirmAction(`Remove the binding ${b.source} → ${b.destination} (${b.routing_key})?`))) return;
          const kind = b.destination_type === "queue" ? "q" : "e";
          await api("DELETE", `/bindings/${enc(vhost)}/e/${enc(b.source)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`);
          refreshNow();
        }) }, "Unbind") : "" },
    ],
    load: async () => (source !== undefined
      ? [...await get(`/exchanges/${enc(vhost)}/${enc(source)}/bindings/source`),
        ...await get(`/exchanges/${enc(vhost)}/${enc(source)}/bindings/destination`)]
      : get(`/queues/${enc(vhost)}/${enc(destination)}/bindings`)),
  });
  const other = h("input", { id: "bind-other", required: true });
  const kind = h("select", { id: "bind-kind" }, h("option", { value: "q" }, "queue"), h("option", { value: "e" }, "exchange"));
  const key = h("input", { id: "bind-key" });
  const args = h("input", { id: "bind-args", placeholder: '{"x-match": "any"}' });
  const out = h("p", { class: "error", role: "alert" });
  const form = h("form", { class: "row", onsubmit: (ev) => {
    ev.preventDefault();
    act(out, async () => {
      const path = source !== undefined
        ? `/bindings/${enc(vhost)}/e/${enc(source)}/${kind.value}/${enc(other.value)}`
        : `/bindings/${enc(vhost)}/e/${enc(other.value)}/q/${enc(destination)}`;
      await api("POST", path, { routing_key: key.value, arguments: parseJson(args.value, "Arguments") });
      return "Binding added.";
    }, refreshNow);
  } },
  source !== undefined ? [field("To", other), field("Destination type", kind)] : field("From exchange", other),
  field("Routing key", key), field("Arguments (JSON)", args), h("div", {}, h("button", { type: "submit" }, "Bind")), out);
  const el = h("section", { class: "card", "aria-labelledby": "bindings-title" },
    h("h3", { id: "bindings-title" }, "Bindings"), list.el, form);
  return { el, refresh: () => list.refresh() };
}

export function deleteButton(label, what, path, after) {
  return h("button", { type: "button", class: "danger", id: "delete-button", onclick: press(async () => {
    if (!(await confirmAction(`Delete ${what}? This cannot be undone.`))) return;
    await api("DELETE", path);
    after();
  }) }, label);
}
