// The Admin tab's sections for what RabbitMQ's UI keeps on its Admin pages and overview beyond users,
// vhosts, permissions and policies: operator policies, topic permissions, feature flags, and the
// definitions document's export and import. Each is { el, refresh } for admin.js to place.
import { api, enc, get } from "./api.js";
import { form, removeButton, section } from "./admin_parts.js";
import { act, confirmAction, field, h, ListView, press, refreshNow, toast } from "./ui.js";

const input = (id, attrs = {}) => h("input", { id, ...attrs });
const submitButton = (text) => h("div", {}, h("button", { type: "submit" }, text));

// Operator policies: set by administrators over the users' policies; RabbitMQ merges the two and
// keeps the stricter value of each key (only the numeric limits are allowed here).
export function operatorPoliciesSection() {
  const list = new ListView({ id: "operator-policies", rowKey: (p) => `${p.vhost}|${p.name}`, columns: [
    { key: "vhost", label: "Virtual host" }, { key: "name", label: "Name" }, { key: "pattern", label: "Pattern" },
    { key: "apply-to", label: "Apply to" }, { key: "priority", label: "Priority", num: true },
    { key: "definition", label: "Definition", sortable: false, render: (p) => JSON.stringify(p.definition) },
    { key: "delete", label: "", sortable: false, render: (p) => removeButton(`Delete operator policy ${p.name}`,
      `Delete operator policy ${p.name}?`, `/operator-policies/${enc(p.vhost)}/${enc(p.name)}`) }],
  empty: "No operator policies.", load: () => get("/operator-policies") });
  const vhost = input("op-policy-vhost", { value: "/", required: true });
  const name = input("op-policy-name", { required: true });
  const pattern = input("op-policy-pattern", { required: true, value: ".*" });
  const applyTo = h("select", { id: "op-policy-apply-to" }, ["queues", "all", "exchanges"].map((t) => h("option", { value: t }, t)));
  const priority = input("op-policy-priority", { type: "number", value: "0" });
  const definition = input("op-policy-definition", { required: true, placeholder: '{"max-length": 1000}' });
  const el = section("operator-policies-section", "Operator policies",
    h("p", { class: "muted" }, "Limits applied over the users' policies: expires, message-ttl, max-length, "
      + "max-length-bytes, max-in-memory-length, max-in-memory-bytes, delivery-limit (the lower value wins)."),
    list.el, form("add-operator-policy-form", async () => {
      let def;
      try { def = JSON.parse(definition.value); } catch { throw new Error("Definition must be a JSON object"); }
      await api("PUT", `/operator-policies/${enc(vhost.value)}/${enc(name.value)}`, { pattern: pattern.value,
        "apply-to": applyTo.value, priority: Number(priority.value), definition: def });
      return `Operator policy ${name.value} saved.`;
    }, field("Virtual host", vhost), field("Name", name), field("Pattern", pattern), field("Apply to", applyTo),
    field("Priority", priority), field("Definition (JSON)", definition), submitButton("Add / update operator policy")));
  return { el, refresh: () => list.refresh() };
}

// Topic permissions: per user, vhost and topic exchange, regexps the routing key must match to
// publish (write) or to bind (read).
export function topicPermissionsSection() {
  const list = new ListView({ id: "topic-permissions", rowKey: (p) => `${p.user}|${p.vhost}|${p.exchange}`, columns: [
    { key: "user", label: "User" }, { key: "vhost", label: "Virtual host" }, { key: "exchange", label: "Exchange" },
    { key: "write", label: "Write" }, { key: "read", label: "Read" },
    { key: "delete", label: "", sortable: false, render: (p) => removeButton(
      `Clear topic permissions of ${p.user} on ${p.exchange} in ${p.vhost}`,
      `Clear the topic permissions of ${p.user} on ${p.exchange} in ${p.vhost}?`,
      `/topic-permissions/${enc(p.vhost)}/${enc(p.user)}?exchange=${enc(p.exchange)}`) }],
  empty: "No topic permissions.", load: async () => (await get("/topic-permissions")).map((p) => ({ ...p, name: p.user })) });
  const user = input("topic-perm-user", { required: true, autocomplete: "off" });
  const vhost = input("topic-perm-vhost", { value: "/", required: true });
  const exchange = input("topic-perm-exchange", { value: "amq.topic", required: true });
  const write = input("topic-perm-write", { value: ".*" }), read = input("topic-perm-read", { value: ".*" });
  const el = section("topic-permissions-section", "Topic permissions", list.el,
    form("set-topic-permission-form", async () => {
      await api("PUT", `/topic-permissions/${enc(vhost.value)}/${enc(user.value)}`,
        { exchange: exchange.value, write: write.value, read: read.value });
      return `Topic permissions of ${user.value} on ${exchange.value} set.`;
    }, field("User", user), field("Virtual host", vhost), field("Exchange", exchange), field("Write regexp", write),
    field("Read regexp", read), submitButton("Set topic permission")));
  return { el, refresh: () => list.refresh() };
}

// Feature flags: what this broker version supports, each with its state; one not yet enabled can
// be enabled here (as RabbitMQ's UI offers), which cannot be undone.
export function featureFlagsSection() {
  const list = new ListView({ id: "feature-flags", pageSize: 50, columns: [
    { key: "name", label: "Name" },
    { key: "state", label: "State", render: (f) => (f.state === "enabled" ? h("span", { class: "pill ok" }, "enabled")
      : h("button", { type: "button", class: "secondary", "aria-label": `Enable ${f.name}`, onclick: press(async () => {
        if (!(await confirmAction(`Enable feature flag ${f.name}? It cannot be disabled again.`))) return;
        await api("PUT", `/feature-flags/${enc(f.name)}/enable`, {});
        refreshNow();
      }) }, "Enable")) },
    { key: "stability", label: "Stability" }, { key: "min_version", label: "Since" },
    { key: "desc", label: "Description", sortable: false, render: (f) => f.desc }],
  empty: "No feature flags.", load: () => get("/feature-flags") });
  return { el: section("feature-flags-section", "Feature flags", list.el), refresh: () => list.refresh() };
}

// The definitions document (users, vhosts, permissions, policies, queues, exchanges, bindings,
// parameters) of the broker or of one vhost: saved as a file, or read from one and applied.
export function definitionsSection() {
  const scope = () => h("select", {}, h("option", { value: "" }, "All virtual hosts"));
  const exportScope = scope(), importScope = scope();
  exportScope.id = "definitions-export-vhost";
  importScope.id = "definitions-import-vhost";
  const file = input("definitions-file", { type: "file", accept: ".json,application/json", required: true });
  const path = (select) => (select.value ? `/definitions/${enc(select.value)}` : "/definitions");
  const exported = h("p", { class: "muted", id: "definitions-exported", role: "status" });
  const exportForm = form("export-definitions-form", async () => {
    const doc = await get(path(exportScope));
    const stamp = new Date().toISOString().slice(0, 19).replace(/[:T]/g, "-");
    const name = `headrace_${exportScope.value ? `${exportScope.value.replace(/[^\w.-]/g, "_")}_` : ""}${stamp}.json`;
    const url = URL.createObjectURL(new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" }));
    const link = h("a", { href: url, download: name });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    const count = (k) => (doc[k] || []).length;
    exported.textContent = `Saved ${name}: ${count("queues")} queues, ${count("exchanges")} exchanges, `
      + `${count("bindings")} bindings, ${count("policies")} policies`
      + (exportScope.value ? "." : `, ${count("users")} users, ${count("vhosts")} virtual hosts.`);
    return `Definitions exported to ${name}.`;
  }, field("Virtual host", exportScope), submitButton("Export definitions"));
  const importForm = form("import-definitions-form", async () => {
    const chosen = file.files[0];
    if (!chosen) throw new Error("Choose a definitions file first");
    let doc;
    try { doc = JSON.parse(await chosen.text()); } catch { throw new Error(`${chosen.name} is not a JSON document`); }
    await api("POST", path(importScope), doc);
    file.value = "";
    return `Definitions imported from ${chosen.name}.`;
  }, field("Definitions file", file), field("Into virtual host", importScope), submitButton("Import definitions"));
  const el = section("definitions-section", "Definitions", exportForm, exported, importForm);
  return {
    el,
    async refresh() {
      const names = (await get("/vhosts")).map((v) => v.name);
      for (const select of [exportScope, importScope]) {
        const had = [...select.options].slice(1).map((o) => o.value);
        if (had.join("\n") === names.join("\n")) continue;
        const keep = select.value;
        select.replaceChildren(select.options[0], ...names.map((n) => h("option", { value: n, selected: n === keep }, n)));
      }
    },
  };
}
