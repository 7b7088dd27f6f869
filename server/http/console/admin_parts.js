// The Admin tab's building blocks, shared by admin.js and admin_more.js: a titled card, a form that
// shows its failure under it and refreshes on success, and a confirmed Delete button.
import { api } from "./api.js";
import { act, confirmAction, h, press, refreshNow } from "./ui.js";

export function removeButton(label, question, path) {
  return h("button", { type: "button", class: "secondary", "aria-label": label, onclick: press(async () => {
    if (!(await confirmAction(question))) return;
    await api("DELETE", path);
    refreshNow();
  }) }, "Delete");
}

export function section(id, title, ...children) {
  return h("section", { class: "card", id, "aria-labelledby": `${id}-title` }, h("h3", { id: `${id}-title` }, title), ...children);
}

export function form(id, submit, ...fields) {
  const out = h("p", { class: "error", role: "alert" });
  return h("form", { class: "row", id, onsubmit: (ev) => { ev.preventDefault(); act(out, submit, refreshNow); } },
    ...fields, out);
}
