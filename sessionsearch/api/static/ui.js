// sessionsearch Control UI: the palette (sessions by title, then messages, within the filters), history
// around a hit, index status. Plain JS modules, no build step.
// Untrusted text (snippets, labels, messages, error messages) only ever becomes DOM text nodes.
import { $, el, highlighted, isolated, queryTerms, setState, shownKey, snippetNode, when } from "./dom.js";
import { TOKEN_KEY, agentsKnown, api, fillAgents, remember, sessions, titleOf } from "./api.js";
import { drawChart, startStatus, stopStatus } from "./status.js";

// a session's label as written (isolated where shown), else its key with bidirectional controls made visible
const titleShown = (key) => (titleOf(key) === key ? shownKey(key) : titleOf(key));

const LIMIT = 25;            // the API's most hits per search
const SESSION_LIMIT = 8;     // sessions by title above the messages
const DEBOUNCE_MS = 220;     // typing pause before a prefix search
const RESEARCH_MS = 1000;    // while `indexing` is true, search again this often
const HISTORY_LIMIT = 30;    // messages per history read

/* ---------- the palette: sessions by title, then messages, within the filters ---------- */

const search = { seq: 0, timer: null, again: null, controller: null, mode: "prefix", active: -1 };

const IDLE = "Type a few words: sessions whose title matches come first, then messages; the last word matches "
  + "as a prefix while you type. Enter searches whole words.";

// how a hit was found, in the words of the mode choice
const MATCHED = { keyword: "words", semantic: "meaning" };

/** The filters as one `scope`, sent alike on the title search and on the message search: the server
 * selects the sessions (the browser never downloads a roster to filter). */
function currentScope() {
  const scope = { palette: true };
  if ($("agent").value) scope.agentIds = [$("agent").value];
  const kinds = [...document.querySelectorAll("#kinds input:checked")].map((box) => box.value);
  if (kinds.length) scope.kinds = kinds;
  const group = $("group").value.trim();
  if (group) scope.group = group;
  const label = $("label").value.trim();
  if (label) scope.label = label;
  if ($("active").value) scope.activeMinutes = Number($("active").value);
  return scope;
}

function searchBody(query, mode, scope) {
  const body = { query, match: mode, order: $("order").value, limit: LIMIT, scope };
  if ($("mode").value !== "keyword") body.mode = $("mode").value;  // a keyword search sends what it always sent
  return body;
}

// the title search: sessions.list with the same scope, the query as its `search` (last word a prefix)
function titleBody(query, scope) {
  return { scope: { ...scope, search: query }, limit: SESSION_LIMIT };
}

// newest-first is a keyword ordering (the API refuses it with meaning): the choice follows the mode
function modeChanged() {
  const keyword = $("mode").value === "keyword";
  const recent = $("order").querySelector("option[value=recent]");
  recent.disabled = !keyword;
  if (!keyword) $("order").value = "relevance";
}

function clearPalette() {
  for (const id of ["palette-sessions", "results"]) {
    const group = $(id);
    group.replaceChildren(group.firstElementChild);  // the group's title stays
    group.hidden = true;
  }
  setActive(-1);
  $("q").setAttribute("aria-expanded", "false");
}

function scheduleSearch() {
  clearTimeout(search.timer);
  setActive(-1);  // an edited query: Enter searches it rather than opening what was active
  const query = $("q").value.trim();
  if (!query) {
    cancelSearch();
    clearPalette();
    setState($("search-state"), "idle", IDLE);
    return;
  }
  search.timer = setTimeout(() => runSearch("prefix"), DEBOUNCE_MS);
}

// a newer search makes every older answer stale: its request is aborted, and `seq` drops an answer
// that was already on its way (one never overwrites the other)
function cancelSearch() {
  search.seq++;
  clearTimeout(search.again);
  if (search.controller) search.controller.abort();
  search.controller = null;
}

const aborted = (outcome) => outcome.status === "rejected" && outcome.reason.name === "AbortError";

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
  const scope = currentScope();
  const body = searchBody(query, mode, scope);
  const [titles, found] = await Promise.allSettled([
    api("/v1/sessions.list", titleBody(query, scope), { signal: controller.signal }),
    api("/v1/sessions.search", body, { signal: controller.signal })]);
  if (seq !== search.seq || aborted(titles) || aborted(found)) return;
  stateNode.removeAttribute("aria-busy");
  const rows = titles.status === "fulfilled" ? titles.value.sessions : [];
  remember(rows);
  if (found.status === "fulfilled") remember(found.value.sessions);
  const keep = activeKey();
  renderSessions(rows, queryTerms(query));
  if (found.status === "rejected") {
    renderResults([], [], false);
    setState(stateNode, "error", found.reason.message);
  } else {
    renderResults(found.value.results, queryTerms(query), mode === "prefix");
    describe(found.value, body, query, mode, rows.length);
    if (titles.status === "rejected") setState(stateNode, "error", titles.reason.message);
  }
  const options = paletteOptions();
  $("q").setAttribute("aria-expanded", options.length ? "true" : "false");
  setActive(options.findIndex((option) => option.dataset.key === keep));  // kept across a re-search
}

function describe(result, body, query, mode, titled) {
  const stateNode = $("search-state");
  const n = result.results.length;
  const byWords = !body.mode;
  const archived = result.archivedTranscriptsExcluded
    ? ` ${result.archivedTranscriptsExcluded} archived session(s) were left out.` : "";
  const bySessions = titled ? `${titled} session${titled === 1 ? "" : "s"} by title; ` : "";
  if (result.indexing) {
    setState(stateNode, "indexing", `Indexing in progress: ${n ? `${n} result${n === 1 ? "" : "s"} so far` : "no results yet"}; `
      + (byWords ? "some sessions are still being reconciled" : "some messages are still being indexed or embedded")
      + ", so this search runs again by itself." + archived);
    search.again = setTimeout(() => runSearch(mode, { again: true }), RESEARCH_MS);
  } else if (n === 0) {
    setState(stateNode, "empty", bySessions + ({ keyword: `No messages match “${query}”.`, semantic: `No messages come close in meaning to “${query}”.`,
                                               hybrid: `No messages match or come close in meaning to “${query}”.` }[body.mode || "keyword"])
      + (mode === "prefix" && byWords ? " Press Enter for an exact search." : "") + archived);
  } else if (result.truncated) {
    setState(stateNode, "truncated", `${bySessions}Showing the first ${n} results; more matched. Add words or set a filter to narrow the search.` + archived);
  } else {
    setState(stateNode, "results", `${bySessions}${n} result${n === 1 ? "" : "s"}${mode === "prefix" ? " (last word as a prefix; Enter for exact)" : ""}.` + archived);
  }
}

function kindBadge(key) {
  const s = sessions.get(key);
  return s && s.kind ? el("span", { class: "badge" }, s.kind) : null;
}

function renderSessions(rows, terms) {
  const group = $("palette-sessions");
  group.replaceChildren(group.firstElementChild, ...rows.map((row, i) => {
    const title = titleOf(row.sessionKey);
    const option = el("li", { class: "hit session-hit", role: "option", id: `palette-s-${i}`, "aria-selected": "false",
                              dataset: { key: `s ${row.sessionKey}` } },
      el("span", { class: "hit-head" },
        title === row.sessionKey ? isolated(shownKey(row.sessionKey), { class: "hit-title" })
          : el("bdi", { class: "hit-title" }, highlighted(title, terms, true)),
        kindBadge(row.sessionKey),
        row.group ? el("span", { class: "badge group-badge", title: "custom group" }, row.group) : null,
        title !== row.sessionKey ? isolated(shownKey(row.sessionKey), { class: "hit-key" }) : null,
        el("time", { class: "hit-time", datetime: new Date(row.updatedAt).toISOString() }, when(row.updatedAt))));
    option.addEventListener("click", () => openSession(row, option));
    return option;
  }));
  group.hidden = !rows.length;
}

function renderResults(hits, terms, prefixLast) {
  const list = $("results");
  list.replaceChildren(list.firstElementChild, ...hits.map((hit, i) => {
    const head = el("span", { class: "hit-head" },
      isolated(titleShown(hit.sessionKey), { class: "hit-title" }),
      kindBadge(hit.sessionKey),
      el("span", { class: `badge ${hit.role}` }, hit.role),
      hit.matchedBy ? el("span", { class: "badge matched", title: "how this message was found" },
                         `by ${hit.matchedBy.map((m) => MATCHED[m] || m).join(" + ")}`) : null,
      titleOf(hit.sessionKey) !== hit.sessionKey ? isolated(shownKey(hit.sessionKey), { class: "hit-key" }) : null,
      el("time", { class: "hit-time", datetime: new Date(hit.timestamp).toISOString() }, when(hit.timestamp)));
    // a hit found by meaning alone holds the query's words only by chance: nothing to mark
    const byWords = !hit.matchedBy || hit.matchedBy.includes("keyword");
    const option = el("li", { class: "hit", role: "option", id: `palette-m-${i}`, "aria-selected": "false",
                              dataset: { key: `m ${hit.sessionKey} ${hit.sessionId} ${hit.messageId}` } },
                      head, snippetNode(hit.snippet, byWords ? terms : [], prefixLast));
    option.addEventListener("click", () => openHistory(hit, option));
    return option;
  }));
  list.hidden = !hits.length;
}

/* keyboard: the focus stays in the box (a combobox); ↓/↑ move the active option across both
   groups (aria-activedescendant), Enter opens it, Escape lets it go, then clears the box */

const paletteOptions = () => [...document.querySelectorAll("#palette [role=option]")];

function activeKey() {
  const option = paletteOptions()[search.active];
  return option ? option.dataset.key : null;
}

function setActive(index) {
  const options = paletteOptions();
  search.active = index >= 0 && index < options.length ? index : -1;
  options.forEach((option, i) => option.setAttribute("aria-selected", i === search.active ? "true" : "false"));
  const option = options[search.active];
  if (option) {
    $("q").setAttribute("aria-activedescendant", option.id);
    option.scrollIntoView({ block: "nearest" });
  } else {
    $("q").removeAttribute("aria-activedescendant");
  }
}

function paletteKey(event) {
  const options = paletteOptions();
  if (event.key === "ArrowDown" && options.length) {
    event.preventDefault();
    setActive(Math.min(search.active + 1, options.length - 1));
  } else if (event.key === "ArrowUp" && options.length) {
    event.preventDefault();
    setActive(search.active - 1);  // above the first: back to the box alone
  } else if (event.key === "Enter" && search.active >= 0) {
    event.preventDefault();  // opens the option rather than submitting an exact search
    options[search.active].click();
  } else if (event.key === "Escape") {
    event.preventDefault();
    if (search.active >= 0) {
      setActive(-1);
    } else if ($("q").value) {
      $("q").value = "";
      scheduleSearch();
    }
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

/** A session chosen by title: its history from the newest messages. */
function openSession(row, from) {
  return openHistory({ sessionKey: row.sessionKey, sessionId: row.sessionId, messageId: null }, from);
}

/** A message chosen: the history around it, scrolled to it and marking it. */
async function openHistory(hit, from) {
  clearTimeout(search.again);
  Object.assign(reading, { hit, from, messages: [], marks: new Map(), hasOlder: false, hasNewer: false, sessionId: hit.sessionId });
  showView("history");
  $("history-title").replaceChildren(isolated(titleShown(hit.sessionKey)));
  $("history-meta").replaceChildren(isolated(shownKey(hit.sessionKey)), " · window ", isolated(hit.sessionId));
  $("history-window").hidden = true;
  $("history").replaceChildren();
  $("history-older").hidden = $("history-newer").hidden = true;
  setState($("history-state"), "loading", hit.messageId ? "Loading the conversation around this message…"
                                                          : "Loading the conversation…");
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
    } else {  // a session: its newest messages, at the end
      const last = $("history").lastElementChild;
      if (last) last.scrollIntoView({ block: "end" });
      $("history-back").focus({ preventScroll: true });
    }
  } catch (error) {
    if (reading.hit === hit) setState($("history-state"), "error", error.message);
  }
}

function readAround(messageId) {
  if (!messageId) return api("/v1/sessions.history", { sessionKey: reading.hit.sessionKey, limit: HISTORY_LIMIT });
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
  $("q").focus();
  // the option opened is the active one again (when the palette still shows it)
  if (reading.from && document.contains(reading.from)) setActive(paletteOptions().indexOf(reading.from));
}

/* ---------- wiring ---------- */

function start() {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(search.timer);
    // Enter in the box (or the button) searches whole words; Enter in a filter's field applies it
    runSearch($("filters").contains(document.activeElement) ? search.mode : "exact");
  });
  $("q").addEventListener("input", scheduleSearch);
  $("q").addEventListener("keydown", paletteKey);
  $("mode").addEventListener("change", modeChanged);
  for (const id of ["agent", "order", "mode", "active"]) $(id).addEventListener("change", () => runSearch(search.mode));
  $("kinds").addEventListener("change", () => runSearch(search.mode));
  for (const id of ["group", "label"]) {  // typed: searched after the same pause as the box
    $(id).addEventListener("input", () => {
      clearTimeout(search.timer);
      search.timer = setTimeout(() => runSearch(search.mode), DEBOUNCE_MS);
    });
  }
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
    .catch((error) => { if (!agentsKnown()) setState($("search-state"), "error", error.message); });
}

start();
