// The status view: backlog and completeness per agent, queue depth, reconcile rate, how much of the
// meaning index is embedded, and a chart of the backlog, refreshed live while the view is shown.
import { $, el, setState, svg, timeFormat } from "./dom.js";
import { api, fillAgents } from "./api.js";

const STATUS_MS = 2000;      // refresh period
const CHART_SAMPLES = 61;    // two minutes of samples

const monitor = { timer: null, samples: [] };

export function startStatus() {
  if (monitor.timer) return;
  refreshStatus();
  monitor.timer = setInterval(refreshStatus, STATUS_MS);
}

export function stopStatus() {
  clearInterval(monitor.timer);
  monitor.timer = null;
}

async function refreshStatus() {
  let data;
  try {
    data = await api("/ui/status.json", null, { method: "GET" });
  } catch (error) {
    setState($("status-state"), "error", error.message);
    return;
  }
  setState($("status-state"), "ok", "");
  const agents = data.agents;
  fillAgents(agents.map((a) => a.agentId));
  const backlog = agents.reduce((n, a) => n + a.backlog, 0);
  const messages = agents.reduce((n, a) => n + a.messages, 0);
  const indexed = agents.reduce((n, a) => n + a.indexedMessages, 0);
  const embedded = agents.reduce((n, a) => n + a.embeddedMessages, 0);
  const toEmbed = agents.reduce((n, a) => n + a.embeddingBacklog, 0);
  monitor.samples.push({ time: data.time, backlog, reconciled: data.reconciledWindows });
  if (monitor.samples.length > CHART_SAMPLES) monitor.samples.shift();

  $("st-backlog").textContent = backlog.toLocaleString();
  const depth = data.queue.depth;
  if (!data.queue.up) {
    $("st-queue").textContent = "down";
    $("st-queue-unit").textContent = "the queue did not answer";
  } else {
    $("st-queue").textContent = ((depth.ready || 0) + (depth.delayed || 0)).toLocaleString();
    $("st-queue-unit").textContent = `${depth.ready || 0} ready · ${depth.delayed || 0} retrying`
      + (data.mode === "embedded" ? " (in-process)" : "");
  }
  const rate = reconcileRate(data.mode);
  $("st-rate").textContent = rate === null ? "–" : rate.value.toFixed(rate.value < 10 ? 1 : 0);
  $("st-rate-unit").textContent = rate === null ? "windows / s" : rate.unit;
  $("st-complete").textContent = percent(indexed, messages);
  $("st-embedded").textContent = percent(embedded, embedded + toEmbed);
  $("st-embedded-unit").textContent = toEmbed
    ? `${toEmbed.toLocaleString()} message${toEmbed === 1 ? "" : "s"} waiting to be embedded`
    : "of messages searchable by meaning";
  $("st-updated").textContent = `· updated ${timeFormat.format(new Date(data.time))}`;
  $("agents-body").replaceChildren(...agents.map((a) => {
    const bar = el("span", { class: "bar" }, el("span"));
    bar.firstChild.style.width = `${Math.round(a.completeness * 100)}%`;
    return el("tr", {},
      el("th", { scope: "row" }, a.agentId), el("td", {}, a.backlog.toLocaleString()),
      el("td", {}, `${a.indexedWindows.toLocaleString()} / ${a.windows.toLocaleString()}`),
      el("td", {}, `${a.indexedMessages.toLocaleString()} / ${a.messages.toLocaleString()}`),
      el("td", {}, bar, `${(Math.floor(a.completeness * 1000) / 10).toFixed(1)}%`),
      el("td", { title: `${a.embeddingBacklog.toLocaleString()} waiting` },
         `${a.embeddedMessages.toLocaleString()} / ${(a.embeddedMessages + a.embeddingBacklog).toLocaleString()}`));
  }));
  drawChart();
}

// rounded down, so that 100.0% means every one
const percent = (done, total) => (total ? `${(Math.floor((done / total) * 1000) / 10).toFixed(1)}%` : "100%");

export function reconcileRate(mode) {
  // over the last ten seconds of samples; with workers elsewhere (Redis), the backlog's drain
  const s = monitor.samples;
  if (s.length < 2) return null;
  const now = s[s.length - 1];
  const then = s.find((x) => now.time - x.time <= 10000) || s[0];
  const seconds = (now.time - then.time) / 1000;
  if (seconds <= 0) return null;
  if (mode === "embedded") return { value: Math.max(0, now.reconciled - then.reconciled) / seconds, unit: "windows / s reconciled" };
  return { value: Math.max(0, then.backlog - now.backlog) / seconds, unit: "windows / s (backlog drain)" };
}

export function drawChart() {
  const box = $("chart");
  const width = Math.max(box.clientWidth, 200);
  const height = 160;
  const pad = { left: 36, right: 8, top: 10, bottom: 18 };
  const s = monitor.samples;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
                             "aria-label": `Backlog over the last ${s.length} samples, now ${s.length ? s[s.length - 1].backlog : 0}` });
  const max = Math.max(1, ...s.map((x) => x.backlog));
  const end = s.length ? s[s.length - 1].time : 0;
  // the samples so far (at least 20 s), up to two minutes
  const span = Math.max(20000, Math.min((CHART_SAMPLES - 1) * STATUS_MS, s.length ? end - s[0].time : 0));
  const x = (t) => pad.left + (width - pad.left - pad.right) * (1 - (end - t) / span);
  const y = (v) => pad.top + (height - pad.top - pad.bottom) * (1 - v / max);
  chart.append(svg("line", { class: "chart-axis", x1: pad.left, x2: width - pad.right, y1: y(0), y2: y(0) }));
  chart.append(svg("line", { class: "chart-axis", x1: pad.left, x2: width - pad.right, y1: y(max), y2: y(max) }));
  const label = (text, attrs) => { const t = svg("text", { class: "chart-text", ...attrs }); t.textContent = text; chart.append(t); };
  label(String(max), { x: pad.left - 6, y: y(max) + 4, "text-anchor": "end" });
  label("0", { x: pad.left - 6, y: y(0) + 4, "text-anchor": "end" });
  label("now", { x: width - pad.right, y: height - 4, "text-anchor": "end" });
  label(span >= 60000 ? `${Math.round(span / 60000)} min ago` : `${Math.round(span / 1000)} s ago`, { x: pad.left, y: height - 4 });
  if (s.length) {
    // steps: a sample holds until the next one (the backlog between samples is not known)
    const at = (t, v) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`;
    const points = s.flatMap((p, i) => (i ? [at(p.time, s[i - 1].backlog), at(p.time, p.backlog)] : [at(p.time, p.backlog)]));
    if (s.length === 1) points.unshift(`${(x(end) - 2).toFixed(1)},${y(s[0].backlog).toFixed(1)}`);
    const first = points[0].split(",")[0];
    const last = points[points.length - 1].split(",")[0];
    chart.append(svg("polygon", { class: "chart-area", points: `${first},${y(0)} ${points.join(" ")} ${last},${y(0)}` }));
    chart.append(svg("polyline", { class: "chart-line", points: points.join(" ") }));
  }
  box.replaceChildren(chart);
}
