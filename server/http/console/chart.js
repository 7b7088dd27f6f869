// Hand-drawn SVG line charts of the history the broker keeps: each view asks for it with the
// range's query (RabbitMQ's `*_age` / `*_incr`), and the answer's `*_details.samples` (newest
// first) are drawn at once, the same on every visit and after every tab change.
import { h, refreshNow } from "./ui.js";

// RabbitMQ UI's ranges: [label, age s, increment s]
const RANGES = [["Last minute", 60, 5], ["Last ten minutes", 600, 5], ["Last hour", 3600, 60],
  ["Last eight hours", 28800, 600], ["Last day", 86400, 1800]];
const KEY = "headrace.chart-range";

function chosen() {
  const age = Number(localStorage.getItem(KEY));
  return RANGES.find((r) => r[1] === age) || RANGES[1];
}

// The query string asking for the chosen range of every kind of history.
export function historyQuery() {
  const [, age, incr] = chosen();
  return ["lengths", "msg_rates", "data_rates"].map((p) => `${p}_age=${age}&${p}_incr=${incr}`).join("&");
}

function rangeSelect() {
  const select = h("select", { class: "chart-range", "aria-label": "Chart range", onchange: () => {
    localStorage.setItem(KEY, select.value);
    refreshNow();
  } }, RANGES.map(([label, age]) => h("option", { value: age, selected: age === chosen()[1] }, label)));
  return select;
}

// Points oldest first from `stats[key + "_details"].samples`: the values themselves, or (rates)
// the change between each sample and the one before it, per second, as RabbitMQ's UI draws them.
function points(stats, key, rates) {
  const s = ((stats || {})[`${key}_details`] || {}).samples || [];
  const out = [];
  for (let j = s.length - (rates ? 2 : 1); j >= 0; j--) {
    const v = rates ? ((s[j].sample - s[j + 1].sample) * 1000) / (s[j].timestamp - s[j + 1].timestamp) : s[j].sample;
    out.push({ t: s[j].timestamp, v: Math.max(0, v) || 0 });
  }
  return out;
}

// A chart of `keys` of `stats` (an object holding `<key>` and `<key>_details`): rates per second
// (the legend shows each `rate`) or, with `rates: false`, the values (the legend the current one).
export function lineChart(stats, keys, labels, { title, unit = "/s", rates = true } = {}) {
  const W = 600, H = 180, L = 44, R = 8, T = 8, B = 22;
  const series = keys.map((k) => points(stats, k, rates));
  const all = series.flat();
  const current = (k) => (rates ? ((stats || {})[`${k}_details`] || {}).rate || 0 : (stats || {})[k] || 0);
  const top = niceCeil(Math.max(1, ...all.map((p) => p.v)));
  const t0 = Math.min(...all.map((p) => p.t)), t1 = Math.max(...all.map((p) => p.t));
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const svg = h("svg:svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `${title}: ${keys.map((k, i) => `${labels[i]} ${fmt(current(k))}${unit}`).join(", ")}` });
  for (const frac of [0, 0.5, 1]) {
    const yy = y(top * frac);
    svg.append(h("svg:line", { class: "axis", x1: L, x2: W - R, y1: yy, y2: yy }),
      h("svg:text", { x: L - 6, y: yy + 4, "text-anchor": "end" }, fmt(top * frac)));
  }
  svg.append(h("svg:text", { x: W - R, y: H - 6, "text-anchor": "end", class: "chart-span" },
    all.length > 1 ? `last ${span(t1 - t0)}` : "no history yet"));
  keys.forEach((k, i) => {
    if (series[i].length < 2) return;
    const pts = series[i].map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" ");
    svg.append(h("svg:polyline", { class: `s${i}`, points: pts, "data-series": k, "data-points": series[i].length }));
  });
  const legend = h("ul", { class: "legend" }, keys.map((k, i) =>
    h("li", { "data-series": k }, h("span", { class: `s${i}`, "aria-hidden": "true" }),
      `${labels[i]}: `, h("strong", { class: "rate-value" }, `${fmt(current(k))}${unit}`))));
  return h("figure", { class: "card" }, h("figcaption", {}, h("h3", {}, title), rangeSelect()), svg, legend);
}

function span(ms) {
  const s = Math.round(ms / 1000);
  return s >= 3600 ? `${Math.round(s / 360) / 10} h` : s >= 120 ? `${Math.round(s / 60)} min` : `${s} s`;
}
function fmt(v) { return v >= 100 ? Math.round(v).toString() : Number(v).toFixed(v >= 1 || v === 0 ? 1 : 2); }
function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((n) => n >= v);
}
