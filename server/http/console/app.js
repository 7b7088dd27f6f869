// Entry point: login, tabs (hash routes), the refresh loop and the virtual host filter.
import { ApiError, LOGIN_FAILED, get, loggedIn, logout, setCredentials } from "./api.js";
import { adminView } from "./admin.js";
import { channelView, channelsView, connectionView, connectionsView } from "./connections.js";
import { exchangeView, exchangesView } from "./exchanges.js";
import { mirrorsView } from "./mirrors.js";
import { overviewView } from "./overview.js";
import { queueView, queuesView } from "./queues.js";
import { streamsView } from "./streams.js";
import { shovelsView } from "./shovels.js";
import { onRefresh } from "./ui.js";

const ROUTES = {
  overview: overviewView, connections: connectionsView, channels: channelsView, exchanges: exchangesView,
  queues: queuesView, streams: streamsView, admin: adminView, mirrors: mirrorsView, shovels: shovelsView,
  exchange: exchangeView, queue: queueView, connection: connectionView, channel: channelView,
};
const TAB_OF = { exchange: "exchanges", queue: "queues", connection: "connections", channel: "channels" };
const $ = (id) => document.getElementById(id);

export const session = { user: null, vhost: sessionStorage.getItem("headrace.vhost") || "" };

let current = null;
let timer = null;
let generation = 0;

function banner(text, bad = false) {
  $("banner").textContent = text;
  $("banner").classList.toggle("bad", bad);
}

async function showLogin(message = "") {
  clearTimeout(timer);
  current = null;
  $("shell").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("login-user").focus();
}

async function start() {
  try {
    session.user = await get("/whoami");
  } catch (err) {
    logout();
    return showLogin(err.message);
  }
  try {
    const vhosts = await get("/vhosts");
    $("vhost-filter").replaceChildren(new Option("All", ""),
      ...vhosts.map((v) => new Option(v.name, v.name, false, v.name === session.vhost)));
  } catch { /* a user without vhost access still sees the rest */ }
  try {
    const o = await get("/overview");
    $("foot").textContent = `${o.product_name} ${o.product_version} · node ${o.node}`;
  } catch { /* shown on the overview tab */ }
  // shown last: a login is complete (and the first route taken) once the user's name is up
  $("login").hidden = true;
  $("shell").hidden = false;
  $("whoami").textContent = `${session.user.name} (${session.user.tags.join(", ") || "no tags"})`;
  route();
}

async function route() {
  if (!session.user) return;
  const [name = "overview", ...params] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const make = ROUTES[name] || overviewView;
  const tab = TAB_OF[name] || (ROUTES[name] ? name : "overview");
  for (const a of document.querySelectorAll("#tabs a")) {
    if (a.dataset.tab === tab) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const gen = ++generation;
  const main = $("main");
  main.replaceChildren();
  banner("");
  current = make(main, params, session);
  document.title = `headrace · ${tab}`;
  await tick(gen);
}

async function tick(gen) {
  clearTimeout(timer);
  if (gen !== generation || !current) return;
  try {
    await current.refresh();
    if (gen === generation) banner("");
  } catch (err) {
    if (gen === generation && !(err instanceof ApiError && err.message === LOGIN_FAILED)) banner(err.message, true);
  }
  $("main").dataset.refreshed = String(Date.now());
  const every = Number($("refresh").value);
  if (every > 0 && gen === generation) timer = setTimeout(() => tick(gen), every);
}

onRefresh(() => tick(generation)); // what the views' refreshNow (ui.js) runs

window.addEventListener("hashchange", route);
window.addEventListener("headrace:unauthorised", () => { logout(); showLogin("Your session has ended: log in again"); });
window.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    setCredentials($("login-user").value, $("login-password").value);
    $("login-password").value = "";
    start();
  });
  $("logout").addEventListener("click", () => { logout(); session.user = null; showLogin(); });
  $("refresh").addEventListener("change", () => tick(generation));
  $("vhost-filter").addEventListener("change", () => {
    session.vhost = $("vhost-filter").value;
    sessionStorage.setItem("headrace.vhost", session.vhost);
    route();
  });
  if (loggedIn()) start(); else showLogin();
});
