// DOM helpers (text nodes only, never HTML) and the highlighting of query words in snippets.

export const $ = (id) => document.getElementById(id);

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Bidirectional controls: embeddings and overrides (U+202A-202E), isolates (U+2066-2069), LRM, RLM
// and ALM. A session key is an identifier, so each shows as a visible escape there
// (`agent:main:\u202egnp.exe` must not read as `agent:main:exe.png`); labels, snippets and
// messages keep them, inside <bdi> or an isolating block, so they never reorder the text around them.
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu;

export function shownKey(key) {
  return key.replace(BIDI_CONTROLS, (c) => `<U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}>`);
}

export function isolated(text, attrs) {
  return el("bdi", attrs, text);
}

export function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  return node;
}

export function setState(node, state, text) {
  node.dataset.state = state;
  node.textContent = text;
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
export const timeFormat = new Intl.DateTimeFormat(undefined, { timeStyle: "short" });

export function when(ms) {
  const date = new Date(ms);
  if (Number.isNaN(date.getTime())) return "";
  return date.toDateString() === new Date().toDateString() ? `today ${timeFormat.format(date)}` : dateFormat.format(date);
}
const CJK = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]/u;
const WORD = /[\p{L}\p{N}_]/u;

export function fold(text) {
  // per character, so that a folded position maps back to the original text
  let folded = "";
  const index = [];
  for (let i = 0; i < text.length;) {
    const ch = String.fromCodePoint(text.codePointAt(i));
    const f = ch.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase();
    folded += f;
    for (let k = 0; k < f.length; k++) index.push(i);
    i += ch.length;
  }
  index.push(text.length);
  return { folded, index };
}

export function queryTerms(query) {
  return query.split(/\s+/).map((w) => fold(w).folded).flatMap((w) => w.split(/[^\p{L}\p{N}_]+/u)).filter(Boolean);
}

export function ranges(text, terms, prefixLast) {
  const { folded, index } = fold(text);
  const found = [];
  terms.forEach((term, n) => {
    const prefix = prefixLast && n === terms.length - 1;
    for (let at = folded.indexOf(term); at >= 0; at = folded.indexOf(term, at + 1)) {
      const end = at + term.length;
      const cjk = CJK.test(term);
      const startOk = cjk || at === 0 || !WORD.test(folded[at - 1]);
      const endOk = cjk || prefix || end >= folded.length || !WORD.test(folded[end]);
      if (!startOk || !endOk) continue;
      let stop = end;
      if (prefix && !cjk) while (stop < folded.length && WORD.test(folded[stop])) stop++;
      found.push([index[at], index[stop]]);
    }
  });
  found.sort((a, b) => a[0] - b[0]);
  const merged = [];
  for (const r of found) {
    const last = merged[merged.length - 1];
    if (last && r[0] <= last[1]) last[1] = Math.max(last[1], r[1]);
    else merged.push([...r]);
  }
  return merged;
}

export function highlighted(text, terms, prefixLast) {
  const out = document.createDocumentFragment();
  let at = 0;
  for (const [start, end] of ranges(text, terms, prefixLast)) {
    if (start > at) out.append(document.createTextNode(text.slice(at, start)));
    out.append(el("mark", {}, text.slice(start, end)));
    at = end;
  }
  if (at < text.length) out.append(document.createTextNode(text.slice(at)));
  return out;
}

export function snippetNode(snippet, terms, prefixLast) {
  const p = el("bdi", { class: "snippet" });  // inside a button: phrasing content only; isolated
  let body = snippet;
  let lead = "";
  let tail = "";
  if (body.startsWith("… ")) { lead = "… "; body = body.slice(2); }
  if (body.endsWith(" …")) { tail = " …"; body = body.slice(0, -2); }
  else if (body.endsWith("…")) { tail = "…"; body = body.slice(0, -1); }
  if (lead) p.append(el("span", { class: "cut" }, lead));
  p.append(highlighted(body, terms, prefixLast));
  if (tail) p.append(el("span", { class: "cut" }, tail));
  return p;
}
