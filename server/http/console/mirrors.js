// Mirrors: the append-only logs that exchanges are mirrored into for the Spark bridge.
import { api, enc, get } from "./api.js";
import { act, field, fmtBytes, fmtNum, h, ListView, refreshNow } from "./ui.js";

const age = (ms) => (ms === null || ms === undefined ? "unbounded" : `${fmtNum(ms / 1000)} s`);

export function mirrorsView(main, _params, session) {
  const list = new ListView({
    id: "mirrors", empty: "No exchange is mirrored.", rowKey: (m) => `${m.vhost}|${m.exchange}`,
    columns: [
      { key: "vhost", label: "Virtual host" }, { key: "name", label: "Exchange" },
      { key: "first_offset", label: "First offset", num: true }, { key: "next_offset", label: "Next offset", num: true },
      { key: "bytes", label: "Size", num: true, render: (m) => fmtBytes(m.bytes) },
      { key: "segments", label: "Segments", num: true },
      { key: "max_age_ms", label: "Retention: age", render: (m) => age(m.max_age_ms) },
      { key: "max_bytes", label: "Retention: size", render: (m) => (m.max_bytes ? fmtBytes(m.max_bytes) : "unbounded") },
    ],
    load: async () => (await get("/mirrors")).filter((m) => !session.vhost || m.vhost === session.vhost)
      .map((m) => ({ ...m, name: m.exchange })),
  });
  const vhost = h("input", { id: "mirror-vhost", value: session.vhost || "/", required: true });
  const exchange = h("input", { id: "mirror-exchange", required: true });
  const maxAge = h("input", { id: "mirror-max-age", type: "number", min: "1", placeholder: "ms" });
  const maxBytes = h("input", { id: "mirror-max-bytes", type: "number", min: "1", placeholder: "bytes" });
  const out = h("p", { class: "error", role: "alert" });
  main.append(h("h2", {}, "Mirrors"),
    h("p", { class: "muted" }, "Exchanges mirrored into append-only logs that the Spark bridge reads and replays."),
    list.el, h("section", { class: "card", "aria-labelledby": "mirror-title" }, h("h3", { id: "mirror-title" }, "Mirror an exchange"),
      h("form", { class: "row", onsubmit: (ev) => {
        ev.preventDefault();
        act(out, async () => {
          const body = {};
          if (maxAge.value) body.max_age_ms = Number(maxAge.value);
          if (maxBytes.value) body.max_bytes = Number(maxBytes.value);
          await api("PUT", `/mirrors/${enc(vhost.value)}/${enc(exchange.value)}`, body);
          return `Exchange ${exchange.value} mirrored.`;
        }, refreshNow);
      } }, field("Virtual host", vhost), field("Exchange", exchange), field("Max age (ms)", maxAge),
      field("Max size (bytes)", maxBytes), h("div", {}, h("button", { type: "submit" }, "Mirror")), out)));
  return list;
}
