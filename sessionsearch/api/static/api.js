// The API: fetch with the bearer token, asked for once per tab (kept in sessionStorage, never in a
// URL), and the sessions and agents the views label hits with.
import { $, el } from "./dom.js";

export const TOKEN_KEY = "sessionsearch.token";

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let tokenPrompt = null;  // one prompt at a time, shared by every call that met a 401

export function askToken(refused) {
  if (tokenPrompt) return tokenPrompt;
  const dialog = $("token-dialog");
  const input = $("token");
  const note = $("token-error");
  note.hidden = !refused;
  note.textContent = refused ? "That token was refused; check it and try again." : "";
  input.value = "";
  tokenPrompt = new Promise((resolve, reject) => {
    const form = $("token-form");
    const done = () => {
      form.removeEventListener("submit", submitted);
      dialog.removeEventListener("cancel", cancelled);
      tokenPrompt = null;
    };
    const submitted = (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      $("forget-token").hidden = false;
      dialog.close();
      done();
      resolve();
    };
    const cancelled = () => {
      done();
      reject(new ApiError(401, "UNAUTHORIZED", "This server needs its API token; search again to enter it."));
    };
    form.addEventListener("submit", submitted);
    dialog.addEventListener("cancel", cancelled);
  });
  dialog.showModal();
  input.focus();
  return tokenPrompt;
}

export async function api(path, body, { method = "POST", signal } = {}) {
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = { Accept: "application/json" };
    if (method === "POST") headers["Content-Type"] = "application/json";
    if (token) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(path, { method, headers, signal, cache: "no-store", credentials: "omit",
                                     body: method === "POST" ? JSON.stringify(body || {}) : undefined });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new ApiError(0, "NETWORK", "Could not reach the server. Is sessionsearch still running?");
    }
    if (response.status === 401) {
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      await askToken(Boolean(token));
      continue;
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!response.ok) {
      const error = data && data.error;
      throw new ApiError(response.status, (error && error.code) || "HTTP",
                         (error && error.message) || `The server answered ${response.status}.`);
    }
    return data;
  }
}

/* ---------- sessions and agents, for labels, kinds and the agent filter ---------- */

// sessionKey -> its sessions.list row, as the answers brought them: a scoped search carries the rows
// of the sessions its hits come from, a title search its own. The page never downloads a roster.
export const sessions = new Map();
let agentsLoaded = false;

/** Whether the agent filter has been filled once. */
export function agentsKnown() {
  return agentsLoaded;
}

/** Keep the rows an answer carried; offer the custom groups they name in the group filter. */
export function remember(rows) {
  const groups = $("groups");
  const known = new Set([...groups.options].map((o) => o.value));
  for (const row of rows || []) {
    sessions.set(row.sessionKey, row);
    if (row.group && !known.has(row.group)) {
      known.add(row.group);
      groups.append(el("option", { value: row.group }));
    }
  }
}

export function fillAgents(agentIds) {
  const select = $("agent");
  const chosen = select.value;
  const known = new Set([...select.options].map((o) => o.value));
  for (const id of agentIds) if (!known.has(id)) select.append(el("option", { value: id }, id));
  select.value = chosen;
  agentsLoaded = true;
}

export function titleOf(key) {
  const s = sessions.get(key);
  return (s && (s.label || s.displayName)) || key;
}
