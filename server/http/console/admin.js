// Admin: users, virtual hosts, permissions, policies, virtual host and user limits (administrators only),
// and admin_more.js's operator policies, topic permissions, feature flags and definitions.
import { api, ApiError, enc, get } from "./api.js";
import { definitionsSection, featureFlagsSection, operatorPoliciesSection, topicPermissionsSection } from "./admin_more.js";
import { form, removeButton, section } from "./admin_parts.js";
import { act, confirmAction, field, h, ListView, press, refreshNow } from "./ui.js";

// A list whose endpoint may not exist on this broker: shown as "not available" instead of failing.
async function optional(path) {
  try { return await get(path); } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

export function adminView(main, _params, session) {
  if (!session.user.tags.includes("administrator")) {
    main.append(h("h2", {}, "Admin"), h("p", { class: "muted" }, "The Admin tab needs the administrator tag."));
    return { refresh: async () => {} };
  }
  const users = new ListView({ id: "users", columns: [
    { key: "name", label: "Name" }, { key: "tags", label: "Tags", render: (u) => (Array.isArray(u.tags) ? u.tags : [u.tags]).join(", ") },
    { key: "delete", label: "", sortable: false, render: (u) => removeButton(`Delete user ${u.name}`, `Delete user ${u.name}?`, `/users/${enc(u.name)}`) }],
  load: () => get("/users") });
  const vhosts = new ListView({ id: "vhosts", columns: [
    { key: "name", label: "Name" }, { key: "messages", label: "Messages", num: true },
    { key: "delete", label: "", sortable: false, render: (v) => removeButton(`Delete virtual host ${v.name}`,
      `Delete virtual host ${v.name} and everything in it?`, `/vhosts/${enc(v.name)}`) }],
  load: () => get("/vhosts") });
  const perms = new ListView({ id: "permissions", rowKey: (p) => `${p.user}|${p.vhost}`, columns: [
    { key: "user", label: "User" }, { key: "vhost", label: "Virtual host" }, { key: "configure", label: "Configure" },
    { key: "write", label: "Write" }, { key: "read", label: "Read" },
    { key: "delete", label: "", sortable: false, render: (p) => removeButton(`Clear permissions of ${p.user} in ${p.vhost}`,
      `Clear the permissions of ${p.user} in ${p.vhost}?`, `/permissions/${enc(p.vhost)}/${enc(p.user)}`) }],
  load: async () => (await get("/permissions")).map((p) => ({ ...p, name: p.user })) });
  let policiesMissing = false;
  const policies = new ListView({ id: "policies", rowKey: (p) => `${p.vhost}|${p.name}`, columns: [
    { key: "vhost", label: "Virtual host" }, { key: "name", label: "Name" }, { key: "pattern", label: "Pattern" },
    { key: "apply-to", label: "Apply to" }, { key: "priority", label: "Priority", num: true },
    { key: "definition", label: "Definition", sortable: false, render: (p) => JSON.stringify(p.definition) },
    { key: "delete", label: "", sortable: false, render: (p) => removeButton(`Delete policy ${p.name}`,
      `Delete policy ${p.name}?`, `/policies/${enc(p.vhost)}/${enc(p.name)}`) }],
  empty: "No policies.", load: async () => {
    const rows = await optional("/policies");
    policiesMissing = rows === null;
    return rows || [];
  } });
  const limits = new ListView({ id: "limits", rowKey: (l) => l.vhost, columns: [
    { key: "vhost", label: "Virtual host" }, { key: "value", label: "Limits", sortable: false, render: (l) => JSON.stringify(l.value) }],
  empty: "No virtual host limits.", load: async () => ((await optional("/vhost-limits")) || []).map((l) => ({ ...l, name: l.vhost })) });
  // user limits: one row per user and limit, each cleared on its own (DELETE /api/user-limits/{user}/{name})
  const userLimits = new ListView({ id: "user-limits", rowKey: (l) => `${l.user}|${l.limit}`, columns: [
    { key: "user", label: "User" }, { key: "limit", label: "Limit" }, { key: "value", label: "Value", num: true },
    { key: "delete", label: "", sortable: false, render: (l) => removeButton(`Clear limit ${l.limit} of ${l.user}`,
      `Clear the ${l.limit} limit of ${l.user}?`, `/user-limits/${enc(l.user)}/${enc(l.limit)}`) }],
  empty: "No user limits.", load: async () => ((await optional("/user-limits")) || []).flatMap((l) =>
    Object.entries(l.value).map(([limit, value]) => ({ user: l.user, limit, value, name: `${l.user} ${limit}` }))) });

  const input = (id, attrs = {}) => h("input", { id, ...attrs });
  const userName = input("user-name", { required: true, autocomplete: "off" });
  const userPassword = input("user-password", { type: "password", autocomplete: "new-password" });
  const userTags = input("user-tags", { placeholder: "administrator, monitoring, management, policymaker" });
  const vhostName = input("vhost-name", { required: true });
  const permUser = input("perm-user", { required: true });
  const permVhost = input("perm-vhost", { value: "/", required: true });
  const permC = input("perm-configure", { value: ".*" }), permW = input("perm-write", { value: ".*" }), permR = input("perm-read", { value: ".*" });
  const polVhost = input("policy-vhost", { value: "/", required: true });
  const polName = input("policy-name", { required: true });
  const polPattern = input("policy-pattern", { required: true, value: ".*" });
  const polApply = h("select", { id: "policy-apply-to" }, ["all", "queues", "exchanges"].map((t) => h("option", { value: t }, t)));
  const polPriority = input("policy-priority", { type: "number", value: "0" });
  const polDefinition = input("policy-definition", { required: true, placeholder: '{"max-length": 1000}' });
  const limVhost = input("limit-vhost", { value: "/", required: true });
  const limName = h("select", { id: "limit-name" }, ["max-connections", "max-queues"].map((n) => h("option", { value: n }, n)));
  const limValue = input("limit-value", { type: "number", required: true, value: "-1" });
  const ulimUser = input("user-limit-user", { required: true, autocomplete: "off" });
  const ulimName = h("select", { id: "user-limit-name" }, ["max-connections", "max-channels"].map((n) => h("option", { value: n }, n)));
  const ulimValue = input("user-limit-value", { type: "number", required: true, min: "-1", value: "-1" });
  const policyNote = h("p", { class: "muted", id: "policies-note" });
  const topicPerms = topicPermissionsSection(), operatorPolicies = operatorPoliciesSection();
  const flags = featureFlagsSection(), definitions = definitionsSection();

  main.append(h("h2", {}, "Admin"),
    section("users-section", "Users", users.el, form("add-user-form", async () => {
      await api("PUT", `/users/${enc(userName.value)}`, { password: userPassword.value,
        tags: userTags.value.split(",").map((t) => t.trim()).filter(Boolean).join(",") });
      return `User ${userName.value} saved.`;
    }, field("Username", userName), field("Password", userPassword), field("Tags", userTags),
    h("div", {}, h("button", { type: "submit" }, "Add / update user")))),
    section("vhosts-section", "Virtual hosts", vhosts.el, form("add-vhost-form", async () => {
      await api("PUT", `/vhosts/${enc(vhostName.value)}`);
      return `Virtual host ${vhostName.value} added.`;
    }, field("Name", vhostName), h("div", {}, h("button", { type: "submit" }, "Add virtual host")))),
    section("permissions-section", "Permissions", perms.el, form("set-permission-form", async () => {
      await api("PUT", `/permissions/${enc(permVhost.value)}/${enc(permUser.value)}`,
        { configure: permC.value, write: permW.value, read: permR.value });
      return `Permissions of ${permUser.value} set.`;
    }, field("User", permUser), field("Virtual host", permVhost), field("Configure regexp", permC),
    field("Write regexp", permW), field("Read regexp", permR), h("div", {}, h("button", { type: "submit" }, "Set permission")))),
    topicPerms.el,
    section("policies-section", "Policies", policyNote, policies.el, form("add-policy-form", async () => {
      let definition;
      try { definition = JSON.parse(polDefinition.value); } catch { throw new Error("Definition must be a JSON object"); }
      await api("PUT", `/policies/${enc(polVhost.value)}/${enc(polName.value)}`, { pattern: polPattern.value,
        "apply-to": polApply.value, priority: Number(polPriority.value), definition });
      return `Policy ${polName.value} saved.`;
    }, field("Virtual host", polVhost), field("Name", polName), field("Pattern", polPattern), field("Apply to", polApply),
    field("Priority", polPriority), field("Definition (JSON)", polDefinition),
    h("div", {}, h("button", { type: "submit" }, "Add / update policy")))),
    operatorPolicies.el,
    section("limits-section", "Virtual host limits", limits.el, form("set-limit-form", async () => {
      await api("PUT", `/vhost-limits/${enc(limVhost.value)}/${enc(limName.value)}`, { value: Number(limValue.value) });
      return `Limit ${limName.value} set.`;
    }, field("Virtual host", limVhost), field("Limit", limName), field("Value (-1: none)", limValue),
    h("div", {}, h("button", { type: "submit" }, "Set limit")))),
    section("user-limits-section", "User limits", userLimits.el, form("set-user-limit-form", async () => {
      await api("PUT", `/user-limits/${enc(ulimUser.value)}/${enc(ulimName.value)}`, { value: Number(ulimValue.value) });
      return `Limit ${ulimName.value} of ${ulimUser.value} set.`;
    }, field("User", ulimUser), field("Limit", ulimName), field("Value (-1: none)", ulimValue),
    h("div", {}, h("button", { type: "submit" }, "Set user limit")))),
    flags.el, definitions.el);
  return {
    async refresh() {
      await Promise.all([users.refresh(), vhosts.refresh(), perms.refresh(), policies.refresh(), limits.refresh(),
        userLimits.refresh(), topicPerms.refresh(), operatorPolicies.refresh(), flags.refresh(), definitions.refresh()]);
      policyNote.textContent = policiesMissing ? "This broker has no policies endpoint." : "";
    },
  };
}
