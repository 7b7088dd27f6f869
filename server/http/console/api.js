// The management API client: every piece of data the console shows comes through here.
// Credentials live only in sessionStorage (gone when the tab closes), as RabbitMQ's UI keeps them.
const KEY = "headrace.auth";

export const enc = (s) => encodeURIComponent(s);

export function loggedIn() { return sessionStorage.getItem(KEY) !== null; }

export function setCredentials(user, password) {
  sessionStorage.setItem(KEY, btoa(unescape(encodeURIComponent(`${user}:${password}`))));
}

export function logout() { sessionStorage.removeItem(KEY); }

export const LOGIN_FAILED = "Login failed";

export class ApiError extends Error {
  constructor(status, reason) { super(reason); this.status = status; }
}

export async function api(method, path, body) {
  // x-requested-with: a 401 then comes without a challenge, so the browser shows no password prompt
  const headers = { authorization: `Basic ${sessionStorage.getItem(KEY) || ""}`, "x-requested-with": "XMLHttpRequest" };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(`/api${path}`, init);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!res.ok) {
    // a refused action is 401 too (as in RabbitMQ): only a failed login ends the session
    if (res.status === 401 && data && data.reason === LOGIN_FAILED) window.dispatchEvent(new Event("headrace:unauthorised"));
    throw new ApiError(res.status, (data && data.reason) || res.statusText);
  }
  return data;
}

export const get = (path) => api("GET", path);
