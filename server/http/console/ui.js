// Small DOM helpers, formatters, the confirmation dialog and the list component.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElementNS(tag.startsWith("svg:") ? "http://www.w3.org/2000/svg"
    : "http://www.w3.org/1999/xhtml", tag.replace("svg:", ""));
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function fmtNum(n) {
  if (n === undefined || n === null || n === "") return "";
  return typeof n === "number" ? n.toLocaleString("en-US", { maximumFractionDigits: 2 }) : String(n);
}

export function fmtBytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export const fmtRate = (r) => (r === undefined || r === null ? "" : `${Number(r).toFixed(1)}/s`);

export function rate(stats, key) {
  const d = stats && stats[`${key}_details`];
  return d ? d.rate : 0;
}

export function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

export function totals(pairs) {
  return h("dl", { class: "totals" }, pairs.map(([k, v, id]) =>
    h("div", { id }, h("dt", {}, k), h("dd", {}, fmtNum(v)))));
}

export function toast(text, { error = false } = {}) {
  const el = h("div", { class: error ? "toast error" : "toast", role: error ? "alert" : "status" }, text);
  document.body.append(el);
  setTimeout(() => el.remove(), error ? 8000 : 4000);
}

// A button's action: whatever fails in it (the API's refusal, a lost connection) is shown, never
// swallowed as an unhandled rejection.
export function press(fn) {
  return async (ev) => {
    try {
      await fn(ev);
    } catch (err) {
      toast(`Failed: ${err.message || String(err)}`, { error: true });
    }
  };
}

export function confirmAction(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
    document.getElementById("confirm-ok").focus();
  });
}

// A labelled form control: [label, input] with matching ids.
let seq = 0;
export function field(label, control) {
  const id = control.id || `f${++seq}`;
  control.id = id;
  return h("div", {}, h("label", { for: id }, label), control);
}

// Run an API action from a form: errors shown next to it, success reported and the view refreshed.
// Refresh the current view now (after a change a view made). The views sit under app.js, which
// imports them and owns the refresh loop, so app.js installs the loop's step here.
let refresher = async () => {};
export function onRefresh(fn) { refresher = fn; }
export function refreshNow() { return refresher(); }

export async function act(out, fn, done) {
  out.textContent = "";
  try {
    const msg = await fn();
    if (msg) toast(msg);
    if (done) await done();
  } catch (err) {
    out.textContent = err.message || String(err);
  }
}

// A list: filter (plain text or regex), sortable columns, pages. Either `load()` gives every row and
// the list pages them here, or `query(params)` asks the API for one page (page, page_size, name,
// use_regex, sort, sort_reverse: RabbitMQ's list parameters), so 10k queues are never all fetched.
// Sorting, filtering and paging keep their state across refreshes.
export class ListView {
  constructor({ id, columns, load, query, empty = "Nothing here yet.", pageSize = 20, rowKey }) {
    Object.assign(this, { id, columns, load, query, empty, pageSize, rowKey });
    this.page = 1; this.filter = ""; this.regex = false; this.sort = columns[0].key; this.reverse = false;
    this.el = h("section", { class: "list", id, "aria-label": id });
    const changed = () => { this.page = 1; this.changed(); };
    this.filterInput = h("input", { type: "search", id: `${id}-filter`, placeholder: "name", oninput: () => {
      this.filter = this.filterInput.value; changed(); } });
    this.regexBox = h("input", { type: "checkbox", id: `${id}-regex`, onchange: () => {
      this.regex = this.regexBox.checked; changed(); } });
    this.sizeSelect = h("select", { id: `${id}-size`, onchange: () => {
      this.pageSize = Number(this.sizeSelect.value); changed(); } },
      [20, 50, 100, 500].map((n) => h("option", { value: n, selected: n === pageSize }, n)));
    this.pager = h("div", { class: "pager" });
    this.table = h("div", { class: "table-wrap" });
    this.el.append(h("div", { class: "controls" },
      h("label", { for: `${id}-filter` }, "Filter"), this.filterInput,
      h("label", {}, this.regexBox, " regex"),
      h("label", { for: `${id}-size` }, "Per page"), this.sizeSelect, this.pager), this.table);
    this.rows = [];
    this.counts = { shown: 0, total: 0, pages: 1 };
    this.asked = 0;
  }

  // a control changed: a server-paged list asks again, a local one re-renders what it has
  changed() {
    if (this.query) this.refresh().catch((err) => { this.table.textContent = err.message; });
    else this.render();
  }

  async refresh() {
    if (!this.query) {
      this.rows = await this.load();
      return this.render();
    }
    const col = this.columns.find((c) => c.key === this.sort) || this.columns[0];
    const params = new URLSearchParams({ page: this.page, page_size: this.pageSize,
      sort: col.sortPath || col.key, sort_reverse: this.reverse });
    if (this.filter) { params.set("name", this.filter); params.set("use_regex", this.regex); }
    const asked = ++this.asked; // answers can arrive out of order: only the latest request's is shown
    let res;
    try {
      res = await this.query(params.toString());
      if (asked !== this.asked) return undefined;
    } catch (err) {
      if (asked !== this.asked) return undefined;
      if (err.status !== 400 || this.page === 1) throw err;
      this.page = 1; // the list shrank under the page shown: back to the first
      return this.refresh();
    }
    this.rows = res.items;
    this.counts = { shown: res.filtered_count, total: res.total_count, pages: Math.max(1, res.page_count) };
    return this.render();
  }

  visible() {
    let rows = this.rows;
    if (this.filter) {
      let test;
      try {
        const re = this.regex ? new RegExp(this.filter, "i") : null;
        test = re ? (n) => re.test(n) : (n) => n.toLowerCase().includes(this.filter.toLowerCase());
      } catch { test = () => false; }
      rows = rows.filter((r) => test(String(r.name ?? "")));
    }
    const col = this.columns.find((c) => c.key === this.sort) || this.columns[0];
    const val = col.sortValue || ((r) => r[col.key]);
    rows = [...rows].sort((a, b) => {
      const x = val(a), y = val(b);
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x ?? "").localeCompare(String(y ?? ""));
      return this.reverse ? -c : c;
    });
    return rows;
  }

  render() {
    let shown, pages, count;
    if (this.query) {
      shown = this.rows;
      pages = this.counts.pages;
      count = `${this.counts.shown} of ${this.counts.total}`;
    } else {
      const rows = this.visible();
      pages = Math.max(1, Math.ceil(rows.length / this.pageSize));
      this.page = Math.min(this.page, pages);
      shown = rows.slice((this.page - 1) * this.pageSize, this.page * this.pageSize);
      count = `${rows.length} of ${this.rows.length}`;
    }
    const head = h("tr", {}, this.columns.map((c) => h("th", {
      scope: "col", class: c.num ? "num" : null,
      "aria-sort": c.key === this.sort ? (this.reverse ? "descending" : "ascending") : null },
      c.sortable === false ? c.label : h("button", { type: "button", onclick: () => {
        if (this.sort === c.key) this.reverse = !this.reverse; else { this.sort = c.key; this.reverse = false; }
        this.changed(); } }, c.label))));
    const body = shown.length ? shown.map((r) => h("tr", { "data-key": this.rowKey ? this.rowKey(r) : r.name },
      this.columns.map((c) => h("td", { class: c.num ? "num" : null, "data-col": c.key },
        c.render ? c.render(r) : fmtNum(r[c.key])))))
      : [h("tr", {}, h("td", { colspan: this.columns.length, class: "muted" }, this.empty))];
    this.table.replaceChildren(h("table", {}, h("thead", {}, head), h("tbody", {}, body)));
    const go = (p) => () => { this.page = p; this.changed(); };
    this.pager.replaceChildren(
      h("button", { type: "button", class: "secondary", disabled: this.page <= 1, onclick: go(this.page - 1),
        "aria-label": "Previous page" }, "‹"),
      h("span", { "aria-live": "polite" }, `page ${this.page} of ${pages} (${count})`),
      h("button", { type: "button", class: "secondary", disabled: this.page >= pages, onclick: go(this.page + 1),
        "aria-label": "Next page" }, "›"));
  }
}
