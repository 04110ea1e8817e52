// sessionsearch Control UI: search, history around a hit, index status. Plain JS modules, no build step.
// Untrusted text (snippets, labels, messages, error messages) only ever becomes DOM text nodes.
import { $, el, isolated, queryTerms, setState, shownKey, snippetNode, when } from "./dom.js";
import { TOKEN_KEY, agentsKnown, api, fillAgents, learnSessions, loadSessions, sessions, titleOf } from "./api.js";
import { drawChart, startStatus, stopStatus } from "./status.js";

// a session's label as written (isolated where shown), else its key with bidirectional controls made visible
const titleShown = (key) => (titleOf(key) === key ? shownKey(key) : titleOf(key));

const LIMIT = 25;            // the API's most hits per search
const DEBOUNCE_MS = 220;     // typing pause before a prefix search
const RESEARCH_MS = 1000;    // while `indexing` is true, search again this often
const HISTORY_LIMIT = 30;    // messages per history read

/* ---------- search ---------- */

const search = { seq: 0, timer: null, again: null, controller: null, mode: "prefix" };

// how a hit was found, in the words of the mode choice
const MATCHED = { keyword: "words", semantic: "meaning" };

function searchBody(query, mode) {
  const body = { query, match: mode, order: $("order").value, limit: LIMIT };
  if ($("agent").value) body.agentId = $("agent").value;
  if ($("mode").value !== "keyword") body.mode = $("mode").value;  // a keyword search sends what it always sent
  return body;
}

// newest-first is a keyword ordering (the API refuses it with meaning): the choice follows the mode
function modeChanged() {
  const keyword = $("mode").value === "keyword";
  const recent = $("order").querySelector("option[value=recent]");
  recent.disabled = !keyword;
  if (!keyword) $("order").value = "relevance";
}

function scheduleSearch() {
  clearTimeout(search.timer);
  const query = $("q").value.trim();
  if (!query) {
    cancelSearch();
    $("results").replaceChildren();
    setState($("search-state"), "idle", "Type a few words; the last one matches as a prefix while you type. Enter searches whole words.");
    return;
  }
  search.timer = setTimeout(() => runSearch("prefix"), DEBOUNCE_MS);
}

function cancelSearch() {
  search.seq++;
  clearTimeout(search.again);
  if (search.controller) search.controller.abort();
  search.controller = null;
}

async function runSearch(mode, { again = false } = {}) {
  const query = $("q").value.trim();
  if (!query) return;
  cancelSearch();
  const seq = search.seq;
  search.mode = mode;
  const controller = new AbortController();
  search.controller = controller;
  const stateNode = $("search-state");
  if (!again) stateNode.setAttribute("aria-busy", "true");
  const body = searchBody(query, mode);
  let result;
  try {
    result = await api("/v1/sessions.search", body, { signal: controller.signal });
    await learnSessions(result.results.map((hit) => hit.sessionKey));
  } catch (error) {
    if (seq !== search.seq || error.name === "AbortError") return;
    stateNode.removeAttribute("aria-busy");
    $("results").replaceChildren();
    setState(stateNode, "error", error.message);
    return;
  }
  if (seq !== search.seq) return;
  stateNode.removeAttribute("aria-busy");
  renderResults(result.results, queryTerms(query), mode === "prefix");
  const n = result.results.length;
  const byWords = !body.mode;
  const archived = result.archivedTranscriptsExcluded
    ? ` ${result.archivedTranscriptsExcluded} archived session(s) were left out.` : "";
  if (result.indexing) {
    setState(stateNode, "indexing", `Indexing in progress: ${n ? `${n} result${n === 1 ? "" : "s"} so far` : "no results yet"}; `
      + (byWords ? "some sessions are still being reconciled" : "some messages are still being indexed or embedded")
      + ", so this search runs again by itself." + archived);
    search.again = setTimeout(() => runSearch(mode, { again: true }), RESEARCH_MS);
  } else if (n === 0) {
    setState(stateNode, "empty", ({ keyword: `No messages match “${query}”.`, semantic: `No messages come close in meaning to “${query}”.`,
                                  hybrid: `No messages match or come close in meaning to “${query}”.` }[body.mode || "keyword"])
      + (mode === "prefix" && byWords ? " Press Enter for an exact search." : "") + archived);
  } else if (result.truncated) {
    setState(stateNode, "truncated", `Showing the first ${n} results; more matched. Add words or pick an agent to narrow the search.` + archived);
  } else {
    setState(stateNode, "results", `${n} result${n === 1 ? "" : "s"}${mode === "prefix" ? " (last word as a prefix; Enter for exact)" : ""}.` + archived);
  }
}

function renderResults(hits, terms, prefixLast) {
  const list = $("results");
  const focused = [...list.querySelectorAll(".hit")].indexOf(document.activeElement);  // kept across a re-search
  list.replaceChildren(...hits.map((hit, i) => {
    const s = sessions.get(hit.sessionKey);
    const kind = s && s.kind;
    const head = el("span", { class: "hit-head" },
      isolated(titleShown(hit.sessionKey), { class: "hit-title" }),
      kind ? el("span", { class: "badge" }, kind) : null,
      el("span", { class: `badge ${hit.role}` }, hit.role),
      hit.matchedBy ? el("span", { class: "badge matched", title: "how this message was found" },
                         `by ${hit.matchedBy.map((m) => MATCHED[m] || m).join(" + ")}`) : null,
      titleOf(hit.sessionKey) !== hit.sessionKey ? isolated(shownKey(hit.sessionKey), { class: "hit-key" }) : null,
      el("time", { class: "hit-time", datetime: new Date(hit.timestamp).toISOString() }, when(hit.timestamp)));
    // a hit found by meaning alone holds the query's words only by chance: nothing to mark
    const byWords = !hit.matchedBy || hit.matchedBy.includes("keyword");
    const button = el("button", { type: "button", class: "hit", dataset: { index: i } }, head,
                      snippetNode(hit.snippet, byWords ? terms : [], prefixLast));
    button.addEventListener("click", () => openHistory(hit, button));
    return el("li", {}, button);
  }));
  if (focused >= 0) (list.querySelectorAll(".hit")[focused] || $("q")).focus();
}

function moveAmongHits(event) {
  const hits = [...document.querySelectorAll("#results .hit")];
  if (!hits.length) return;
  const at = hits.indexOf(document.activeElement);
  if (event.key === "ArrowDown") {
    event.preventDefault();
    hits[Math.min(at + 1, hits.length - 1)].focus();
  } else if (event.key === "ArrowUp") {
    event.preventDefault();
    if (at <= 0) $("q").focus(); else hits[at - 1].focus();
  }
}

/* ---------- history around a hit ---------- */

const reading = { hit: null, from: null, messages: [], marks: new Map(), hasOlder: false, hasNewer: false, sessionId: null };

function contentText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return content === null || content === undefined ? "" : JSON.stringify(content);
  return content.map((block) => {
    if (typeof block === "string") return block;
    if (block && typeof block.text === "string" && block.type !== "thinking") return block.text;
    if (block && block.type === "image") return "[image]";
    if (block && block.type === "toolCall") return `[tool call${block.name ? `: ${block.name}` : ""}]`;
    return "";
  }).filter(Boolean).join("\n");
}

function showView(name) {
  $("view-search").hidden = name !== "search";
  $("view-history").hidden = name !== "history";
  $("view-status").hidden = name !== "status";
  const tab = name === "status" ? "status" : "search";
  for (const id of ["search", "status"]) {
    if (id === tab) $(`tab-${id}`).setAttribute("aria-current", "page");
    else $(`tab-${id}`).removeAttribute("aria-current");
  }
  if (name === "status") startStatus(); else stopStatus();
}

async function openHistory(hit, from) {
  clearTimeout(search.again);
  Object.assign(reading, { hit, from, messages: [], marks: new Map(), hasOlder: false, hasNewer: false, sessionId: hit.sessionId });
  showView("history");
  $("history-title").replaceChildren(isolated(titleShown(hit.sessionKey)));
  $("history-meta").replaceChildren(isolated(shownKey(hit.sessionKey)), " · window ", isolated(hit.sessionId));
  $("history-window").hidden = true;
  $("history").replaceChildren();
  $("history-older").hidden = $("history-newer").hidden = true;
  setState($("history-state"), "loading", "Loading the conversation around this message…");
  try {
    const page = await readAround(hit.messageId);
    if (reading.hit !== hit) return;  // another hit was opened meanwhile
    merge(page, "both");
    setState($("history-state"), "ok", "");
    renderHistory();
    const anchor = document.querySelector("#history .anchor");
    if (anchor) {
      anchor.scrollIntoView({ block: "center" });
      anchor.focus({ preventScroll: true });
    }
  } catch (error) {
    if (reading.hit === hit) setState($("history-state"), "error", error.message);
  }
}

function readAround(messageId) {
  return api("/v1/sessions.history", { sessionKey: reading.hit.sessionKey, sessionId: reading.sessionId,
                                       messageId, limit: HISTORY_LIMIT });
}

function merge(page, side) {
  const known = new Set(reading.messages.map((m) => m.messageId));
  const fresh = page.messages.filter((m) => !known.has(m.messageId));
  if (side === "older") reading.messages = [...fresh, ...reading.messages];
  else if (side === "newer") reading.messages = [...reading.messages, ...fresh];
  else reading.messages = page.messages.slice();
  if (side !== "newer") reading.hasOlder = page.hasOlder;
  if (side !== "older") reading.hasNewer = page.hasNewer;
  reading.sessionId = page.sessionId || reading.sessionId;
  for (const mark of page.resets || []) {
    const had = reading.marks.get(mark.resetId);
    reading.marks.set(mark.resetId, {
      resetId: mark.resetId,
      afterMessageId: mark.afterMessageId || (had && had.afterMessageId) || null,
      beforeMessageId: mark.beforeMessageId || (had && had.beforeMessageId) || null,
    });
  }
}

function resetNode(mark) {
  const text = mark.beforeMessageId === null && !reading.hasNewer
    ? "Session reset here; later turns belong to the next view of this session"
    : "Session reset here";
  return el("li", { class: "reset", role: "separator", "aria-label": text }, text);
}

function renderHistory() {
  const { hit } = reading;
  const current = sessions.get(hit.sessionKey);
  const notice = $("history-window");
  if (current && current.sessionId && reading.sessionId && current.sessionId !== reading.sessionId) {
    notice.hidden = false;
    notice.textContent = `This is an earlier window (${reading.sessionId}): the session was rotated, `
      + `and its current window is ${current.sessionId}.`;
  } else {
    notice.hidden = true;
  }
  const marks = [...reading.marks.values()];
  const items = [];
  for (const m of reading.messages) {
    for (const mark of marks) if (mark.afterMessageId === null && mark.beforeMessageId === m.messageId) items.push(resetNode(mark));
    const anchor = m.messageId === hit.messageId;
    items.push(el("li", { class: `msg ${m.role}${anchor ? " anchor" : ""}`, tabindex: anchor ? "-1" : null,
                          "aria-current": anchor ? "true" : null },
      el("div", { class: "msg-head" }, el("span", { class: `badge ${m.role}` }, m.role),
         el("time", { datetime: new Date(m.timestamp).toISOString() }, when(m.timestamp)),
         anchor ? el("span", {}, "· the hit") : null),
      el("div", { class: "msg-body" }, contentText(m.content))));
    for (const mark of marks) if (mark.afterMessageId === m.messageId) items.push(resetNode(mark));
  }
  $("history").replaceChildren(...items);
  $("history-older").hidden = !reading.hasOlder;
  $("history-newer").hidden = !reading.hasNewer;
}

async function page(side) {
  const edge = side === "older" ? reading.messages[0] : reading.messages[reading.messages.length - 1];
  if (!edge) return;
  const button = $(side === "older" ? "history-older" : "history-newer");
  button.disabled = true;
  try {
    const got = await readAround(edge.messageId);
    if (!reading.messages.includes(edge)) return;  // another hit was opened meanwhile
    const at = got.messages.findIndex((m) => m.messageId === edge.messageId);
    const part = side === "older" ? got.messages.slice(0, Math.max(at, 0)) : got.messages.slice(at + 1);
    merge({ ...got, messages: part }, side);
    setState($("history-state"), "ok", "");
    renderHistory();
    const focusTarget = side === "older" ? $("history-older") : $("history-newer");
    (focusTarget.hidden ? $("history-back") : focusTarget).focus();
  } catch (error) {
    setState($("history-state"), "error", error.message);
  } finally {
    button.disabled = false;
  }
}

function backToResults() {
  showView("search");
  if ($("search-state").dataset.state === "indexing") runSearch(search.mode, { again: true });
  if (reading.from && document.contains(reading.from)) reading.from.focus();
  else $("q").focus();
}

/* ---------- wiring ---------- */

function start() {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(search.timer);
    runSearch("exact");
  });
  $("q").addEventListener("input", scheduleSearch);
  $("q").addEventListener("keydown", moveAmongHits);
  $("results").addEventListener("keydown", (event) => {
    moveAmongHits(event);
    if (event.key === "Escape") $("q").focus();
  });
  $("mode").addEventListener("change", modeChanged);
  for (const id of ["agent", "order", "mode"]) $(id).addEventListener("change", () => runSearch(search.mode));
  modeChanged();  // a reload may keep a form's choices
  $("tab-search").addEventListener("click", () => { showView("search"); $("q").focus(); });
  $("tab-status").addEventListener("click", () => showView("status"));
  $("history-back").addEventListener("click", backToResults);
  $("history-older").addEventListener("click", () => page("older"));
  $("history-newer").addEventListener("click", () => page("newer"));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("view-history").hidden && !$("token-dialog").open) backToResults();
  });
  $("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
  $("forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("forget-token").hidden = true;
  });
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) stopStatus(); else if (!$("view-status").hidden) startStatus();
  });
  window.addEventListener("resize", () => { if (!$("view-status").hidden) drawChart(); });
  showView(location.hash === "#status" ? "status" : "search");
  api("/v1/index.status", {}).then((data) => fillAgents(data.agents.map((a) => a.agentId)))
    .then(loadSessions)
    .catch((error) => { if (!agentsKnown()) setState($("search-state"), "error", error.message); });
}

start();
