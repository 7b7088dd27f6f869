// Hand-drawn SVG line charts of samples taken at each refresh (the API gives the current rate;
// the console keeps the last few minutes of them).
import { h } from "./ui.js";

const KEEP = 120; // samples per series

export class History {
  constructor(keys) { this.keys = keys; this.samples = []; }
  add(values) {
    this.samples.push({ t: Date.now(), values });
    if (this.samples.length > KEEP) this.samples.shift();
  }
}

export function lineChart(history, labels, { title, unit = "/s" } = {}) {
  const W = 600, H = 180, L = 44, R = 8, T = 8, B = 22;
  const s = history.samples;
  const max = Math.max(1, ...s.flatMap((x) => history.keys.map((k) => x.values[k] || 0)));
  const top = niceCeil(max);
  const t0 = s.length ? s[0].t : 0, t1 = s.length ? s[s.length - 1].t : 1;
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const svg = h("svg:svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `${title}: ${history.keys.map((k, i) => `${labels[i]} ${fmt(last(s, k))}${unit}`).join(", ")}` });
  for (const frac of [0, 0.5, 1]) {
    const yy = y(top * frac);
    svg.append(h("svg:line", { class: "axis", x1: L, x2: W - R, y1: yy, y2: yy }),
      h("svg:text", { x: L - 6, y: yy + 4, "text-anchor": "end" }, fmt(top * frac)));
  }
  svg.append(h("svg:text", { x: W - R, y: H - 6, "text-anchor": "end" },
    s.length > 1 ? `last ${Math.round((t1 - t0) / 1000)} s` : "collecting samples…"));
  history.keys.forEach((k, i) => {
    if (s.length < 2) return;
    const pts = s.map((p) => `${x(p.t).toFixed(1)},${y(p.values[k] || 0).toFixed(1)}`).join(" ");
    svg.append(h("svg:polyline", { class: `s${i}`, points: pts, "data-series": k }));
  });
  const legend = h("ul", { class: "legend" }, history.keys.map((k, i) =>
    h("li", { "data-series": k }, h("span", { class: `s${i}`, "aria-hidden": "true" }),
      `${labels[i]}: `, h("strong", { class: "rate-value" }, `${fmt(last(s, k))}${unit}`))));
  return h("figure", { class: "card" }, h("figcaption", {}, h("h3", {}, title)), svg, legend);
}

function last(s, k) { return s.length ? s[s.length - 1].values[k] || 0 : 0; }
function fmt(v) { return v >= 100 ? Math.round(v).toString() : Number(v).toFixed(v >= 1 || v === 0 ? 1 : 2); }
function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((n) => n >= v);
}
