// Queen console: a one-page app on the broker's JSON routes (see console.go).
// Every value from the broker is put in the page with textContent, never as HTML.
"use strict";

const main = document.getElementById("main");
const errorBox = document.getElementById("error");
const statusBox = document.getElementById("status");
const tokenForm = document.getElementById("token-form");
const tokenInput = document.getElementById("token");
const whoBox = document.getElementById("who");
const TOKEN_KEY = "queenToken";
const POLL_MS = 1500;
let timer = null;       // the current page's polling timer
let generation = 0;     // bumped on each route change and on sign-out: stale answers are dropped
let identity = null;    // GET /api/v1/auth/whoami's reply for the stored token; null: signed out

// el builds an element: el("td", {class: "num"}, "text", child...).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function showError(msg) {
  errorBox.textContent = msg;
  errorBox.hidden = !msg;
}

// ApiError is a broker's error reply (SPEC.md §10) or a network failure.
class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || ("HTTP " + status));
    this.status = status;
    this.code = body && body.code;
  }
}

// api calls a JSON route with the stored token (a JWT or the admin token)
// as "Authorization: Bearer <token>". A 401 signs the tab out: the broker's
// message shows above the sign-in (signOut), and the ApiError is thrown.
async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, { error: "the broker does not answer (" + e.message + ")" });
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: text.slice(0, 200) }; }
  if (resp.status === 401) {
    const err = new ApiError(401, data);
    signOut(err.message);
    throw err;
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

// ---- sign-in: who the broker says the stored token is (GET
// /api/v1/auth/whoami), and what its role allows

// The access levels (SPEC.md §14), lowest first; the broker's whoami names
// the caller's in its "role".
const LEVELS = ["read-only", "read-write", "admin"];

// What each level allows (README, Access control), for the access page.
const LEVEL_ALLOWS = {
  "read-only": "status and resource reads: the overview, queues, a queue's partitions, consumer groups and recent messages (peek), the cluster",
  "read-write": "push, pop, ack, lease extension, transactions, configure, seek (through the SDKs and the CLI: the console has no such controls)",
  "admin": "the DLQ (list and replay), the dedup inspector, the dedup cache switch, deletes of queues and consumer groups, configures that delete data",
};

// reaches reports whether the signed-in caller's role reaches level.
function reaches(level) {
  return !!identity && LEVELS.indexOf(identity.role) >= LEVELS.indexOf(level);
}

// whoName names the signed-in caller in messages.
function whoName() {
  if (!identity) return "nobody";
  if (identity.access === "jwt") return identity.sub ? "sub \"" + identity.sub + "\"" : "this token (no sub)";
  return identity.access === "open" ? "anyone (open broker)" : "the admin token";
}

// lacks is "" when the caller may use what needs level, else the reason it
// may not (shown beside the disabled control and as its title).
function lacks(level, what) {
  if (reaches(level)) return "";
  return what + " needs the " + level + " role; " + whoName() + " has " + (identity ? identity.role : "none") + ".";
}

// lock disables controls for reason (nothing when reason is "") and returns
// a paragraph saying it, or null. Each control carries data-needs=level.
function lock(reason, level, ...controls) {
  if (!reason) return null;
  for (const c of controls) {
    c.disabled = true;
    c.title = reason;
    c.dataset.needs = level;
  }
  return el("p", { class: "locked-reason", "data-needs": level }, reason);
}

// showWho fills the header's badge (sub, role, expiry) and marks the nav
// links of pages whose controls the role may not use.
function showWho() {
  whoBox.hidden = !identity;
  if (!identity) return;
  const sub = document.getElementById("who-sub"), role = document.getElementById("who-role"), exp = document.getElementById("who-exp");
  sub.textContent = identity.access === "jwt" ? (identity.sub || "(no sub)") : identity.access === "open" ? "open broker" : "admin token";
  role.textContent = identity.role;
  role.dataset.role = identity.role;
  exp.textContent = identity.expiresAt ? "expires " + fmtIn(identity.expiresAt) : "";
  exp.title = identity.expiresAt ? fmtTime(identity.expiresAt) : "";
  document.getElementById("sign-out").hidden = identity.access === "open";
  for (const a of document.querySelectorAll("header nav a[data-needs]")) {
    const why = lacks(a.dataset.needs, a.textContent);
    a.classList.toggle("locked", !!why);
    a.title = why;
  }
}

// signIn asks the broker who the stored token is: true once signed in;
// false on a 401 (signOut has shown the broker's message and the sign-in)
// or another failure (shown, and asked again in 3 s).
async function signIn() {
  try {
    const w = await api("GET", "/api/v1/auth/whoami");
    if (!w || !LEVELS.includes(w.role)) throw new ApiError(0, { error: "the broker's whoami names no known role: " + JSON.stringify(w) });
    identity = w;
  } catch (e) {
    if (e.status !== 401) {
      showError(e.message);
      setTimeout(() => { if (!identity && tokenForm.hidden) start(); }, 3000);
    }
    return false;
  }
  tokenForm.hidden = true;
  showWho();
  return true;
}

// signOut forgets the token and shows the sign-in, with msg (the broker's
// 401 message, or "" when asked for) in the error box. Pages still waiting
// for answers drop them (generation).
function signOut(msg) {
  sessionStorage.removeItem(TOKEN_KEY);
  identity = null;
  if (timer) { clearInterval(timer); timer = null; }
  onStats = null;
  generation++;
  showWho();
  statusBox.textContent = "";
  tokenForm.hidden = false;
  main.replaceChildren(el("h2", null, "Sign in"),
    el("p", { class: "muted", id: "signed-out" }, "This broker needs a token: paste a JWT (JWT_ENABLED) or its admin token (QUEEN_ADMIN_TOKEN) above."));
  showError(msg);
  tokenInput.focus();
}

// start signs in with the stored token (with none the broker answers 401
// when it needs one) and shows the address's page.
async function start() {
  if (await signIn()) route();
}

tokenForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = tokenInput.value.trim().replace(/^bearer\s+/i, "");
  if (!token) { showError("paste a token first: a JWT or the admin token"); return; }
  sessionStorage.setItem(TOKEN_KEY, token);
  tokenInput.value = "";
  showError("");
  await start();
});

document.getElementById("sign-out").addEventListener("click", () => signOut(""));

// ---- formatting

function fmtRate(v) { return v >= 100 ? Math.round(v).toLocaleString("en") : (Math.round(v * 10) / 10).toLocaleString("en"); }
function fmtBytes(n) {
  if (!n) return "0 B";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function fmtTime(s) { if (!s) return "—"; const d = new Date(s); return isNaN(d) ? String(s) : d.toISOString().replace("T", " ").replace("Z", " UTC"); }
function fmtAgo(s, now) { if (!s) return "—"; const d = (new Date(s) - (now ? new Date(now) : new Date())) / 1000; return (d >= 0 ? "in " : "") + Math.abs(d).toFixed(1) + " s" + (d < 0 ? " ago" : ""); }
// fmtIn is how far a time is from now in whole units: "in 1 h 5 min",
// "in 42 s", "3 min ago".
function fmtIn(s) {
  let d = Math.round((new Date(s) - new Date()) / 1000);
  const past = d < 0;
  d = Math.abs(d);
  const h = Math.floor(d / 3600), m = Math.floor((d % 3600) / 60);
  const txt = h ? h + " h" + (m ? " " + m + " min" : "") : m ? m + " min" : d + " s";
  return past ? txt + " ago" : "in " + txt;
}
function truncate(s, n) { s = String(s); return s.length > n ? s.slice(0, n) + "…" : s; }
function payloadText(d) { if (d === undefined || d === null) return "null"; return truncate(typeof d === "string" ? d : JSON.stringify(d), 200); }
function durationText(sec) { if (sec === undefined || sec === null) return "—"; if (sec === 0) return "0 (off)"; if (sec % 3600 === 0) return sec / 3600 + " h"; if (sec % 60 === 0) return sec / 60 + " min"; return sec + " s"; }

function table(headers, rows, id) {
  const t = el("table", { id });
  t.append(el("thead", null, el("tr", null, ...headers.map((h) => el("th", null, h)))));
  const tb = el("tbody");
  for (const r of rows) tb.append(r);
  t.append(tb);
  return t;
}
function kv(pairs, id) {
  const d = el("dl", { class: "kv", id });
  for (const [k, v] of pairs) d.append(el("dt", null, k), v instanceof Node ? el("dd", null, v) : el("dd", null, v === undefined || v === null ? "—" : String(v)));
  return d;
}

// ---- the timeline: GET /api/v1/stats polled every POLL_MS on every page,
// its replies kept for the last 10 minutes (the overview draws them)

const TIMELINE_MS = 10 * 60 * 1000;
// The ring's hard bound, beside its age: timers can fire in a burst after
// the tab was in the background.
const TIMELINE_MAX = Math.ceil(TIMELINE_MS / POLL_MS) + 20;
const timeline = [];   // oldest first: {t: this tab's clock (ms), s: the stats reply, or null for a failed poll (a gap)}
let onStats = null;    // the overview's redraw while it is shown: onStats(reply or null, error)
let statsBusy = false; // a poll is under way (a slow broker: no pile-up)

async function pollStats() {
  if (statsBusy || !identity) return;
  statsBusy = true;
  let s = null, err = null;
  try {
    s = await api("GET", "/api/v1/stats");
  } catch (e) {
    err = e;
  } finally {
    statsBusy = false;
  }
  if (!identity) return; // signed out meanwhile
  showWho(); // the expiry's countdown
  const t = Date.now();
  timeline.push({ t, s });
  while (timeline.length > TIMELINE_MAX || timeline[0].t < t - TIMELINE_MS) timeline.shift();
  if (onStats) onStats(s, err);
}

// A rate of the reply, null on the broker's first sample (no window yet).
const rateOf = (k) => (s) => (s.windowSeconds > 0 && typeof s[k] === "number" ? s[k] : null);
const valueOf = (k) => (s) => (typeof s[k] === "number" ? s[k] : null);
function fmtMs(v) { return v >= 100 ? Math.round(v) + " ms" : (Math.round(v * 100) / 100) + " ms"; }

// The timeline's charts: each series' value of a stats reply (null: none),
// fmt its values' text (axis: on the value axis, when not fmt), unit what
// the value axis counts in round numbers of, dash a series' dashes (so a
// line on top of another shows both).
// End-to-end latency is not among the broker's metrics (queen loadtest
// --report charts it); the bytes per stored message come from its storage
// gauges, read every 10 s, over the last minute.
const TIMELINE_CHARTS = [
  { id: "tl-rates", title: "Messages/s", fmt: fmtRate, series: [
    { key: "stored", name: "stored/s", color: "#2563eb", v: rateOf("queuedPerSecond") },
    { key: "acked", name: "acked/s", color: "#16a34a", v: rateOf("ackedPerSecond") },
    { key: "popped", name: "popped/s", color: "#9333ea", dash: "5 4", v: rateOf("popPerSecond") }] },
  { id: "tl-latency", title: "Push commit latency", fmt: fmtMs, series: [
    { key: "p50", name: "p50", color: "#0891b2", v: valueOf("commitP50Ms") },
    { key: "p99", name: "p99", color: "#d97706", v: valueOf("commitP99Ms") }] },
  { id: "tl-rss", title: "Broker RSS", fmt: fmtBytes, axis: (v) => fmtBytes(v).replace(".0 ", " "), unit: 1 << 20, series: [
    { key: "rss", name: "RSS", color: "#4b5563", v: valueOf("rssBytes") }] },
  { id: "tl-storage", title: "Bytes per stored message", fmt: fmtPerMessage, series: [
    { key: "wal", name: "WAL", color: "#b45309", v: valueOf("walBytesPerMessage") },
    { key: "db", name: "database", color: "#0f766e", dash: "5 4", v: valueOf("databaseBytesPerMessage") }] },
];

function fmtPerMessage(v) { return Math.round(v) + " B"; }

// niceCeil is the smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6
// or 8 × 10^k) at or above v; 1 for v <= 0.
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * e >= v * (1 - 1e-9)) return m * e;
  return 10 * e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// timeChart draws spec's series over the timeline as an SVG width pixels
// wide: time across (now at the right; the last 10 minutes, or since the
// first sample when that is sooner, at least a minute), values up from 0. A
// missing value or a failed poll breaks the line.
function timeChart(spec, width, now) {
  const W = Math.max(240, Math.round(width)), H = 150, L = 62, R = 10, T = 8, B = 20;
  const first = timeline.length ? timeline[0].t : now;
  const t0 = Math.max(now - TIMELINE_MS, Math.min(first, now - 60 * 1000));
  let max = 0;
  for (const p of timeline) {
    if (!p.s) continue;
    for (const sr of spec.series) { const v = sr.v(p.s); if (v !== null && isFinite(v)) max = Math.max(max, v); }
  }
  const unit = spec.unit || 1; // the axis is in round numbers of this (MiB)
  const top = niceCeil(max / unit) * unit;
  const x = (t) => L + ((t - t0) / Math.max(1, now - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": spec.title });
  for (const v of [0, top / 2, top]) {
    svg.append(svgEl("line", { x1: L, y1: y(v), x2: W - R, y2: y(v), stroke: "#e3e6eb", "stroke-dasharray": v ? "3 3" : "" }),
      svgEl("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": "11", fill: "#6b7280" }, v ? (spec.axis || spec.fmt)(v) : "0"));
  }
  // Time ticks: a step giving at most six of them, labelled back from now.
  const span = (now - t0) / 1000;
  const step = [10, 15, 30, 60, 120, 300].find((st) => span / st <= 6) || 600;
  for (let a = 0; a <= span + 0.001; a += step) {
    const tx = x(now - a * 1000);
    svg.append(svgEl("line", { x1: tx, y1: H - B, x2: tx, y2: H - B + 4, stroke: "#9ca3af" }),
      svgEl("text", { x: tx, y: H - 4, "text-anchor": a ? "middle" : "end", "font-size": "11", fill: "#6b7280" },
        a === 0 ? "now" : "−" + (a >= 60 ? a / 60 + " min" : a + " s")));
  }
  for (const sr of spec.series) {
    let seg = [];
    const flush = () => {
      if (seg.length === 1) svg.append(svgEl("circle", { cx: seg[0][0], cy: seg[0][1], r: 2.5, fill: sr.color, "data-series": sr.key }));
      else if (seg.length > 1) svg.append(svgEl("polyline", { points: seg.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "),
        fill: "none", stroke: sr.color, "stroke-width": "2", "stroke-linejoin": "round", "stroke-dasharray": sr.dash || "none", "data-series": sr.key }));
      seg = [];
    };
    for (const p of timeline) {
      const v = p.s ? sr.v(p.s) : null;
      if (v === null || !isFinite(v) || p.t < t0) { flush(); continue; }
      seg.push([x(p.t), y(v)]);
    }
    flush();
  }
  return svg;
}

// timelineFigure is one chart's box: its title, a legend with each series'
// latest value, and the drawing (drawTimeline fills both).
function timelineFigure(spec) {
  const keys = spec.series.map((sr) => {
    const sw = el("i");
    sw.style.background = sr.color;
    return el("span", { class: "tl-key", "data-series": sr.key }, sw, sr.name + " ", el("b", null, "—"));
  });
  return el("div", { class: "chart tl-chart", id: spec.id, "data-points": "0" },
    el("div", { class: "tl-head" }, el("span", { class: "tl-title" }, spec.title), el("span", { class: "legend" }, ...keys)),
    el("div", { class: "tl-plot" }));
}

// drawTimeline redraws the timeline's charts on the overview. Each chart
// carries data-points (the samples with a reply), each legend entry
// data-points (that series' values) and data-value (its latest, "" when
// the latest sample has none).
function drawTimeline() {
  const now = Date.now();
  const answered = timeline.filter((p) => p.s);
  const latest = answered.length ? timeline[timeline.length - 1].s : null;
  for (const spec of TIMELINE_CHARTS) {
    const fig = document.getElementById(spec.id);
    if (!fig) continue;
    fig.dataset.points = String(answered.length);
    for (const sr of spec.series) {
      const key = fig.querySelector(`.tl-key[data-series="${sr.key}"]`);
      const v = latest ? sr.v(latest) : null;
      key.dataset.points = String(answered.filter((p) => sr.v(p.s) !== null).length);
      key.dataset.value = v === null ? "" : String(v);
      key.querySelector("b").textContent = v === null ? "—" : spec.fmt(v);
    }
    const plot = fig.querySelector(".tl-plot");
    plot.replaceChildren(timeChart(spec, plot.clientWidth, now));
  }
}

// ---- overview

const HISTORY_N = 60; // the verdict chart's samples (90 s)

function chart(points) {
  const W = 800, H = 220, P = 30;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1, ...points.flatMap((p) => [p.queued, p.duplicate, p.failed]));
  const x = (i) => P + (i / Math.max(1, HISTORY_N - 1)) * (W - P - 5);
  const y = (v) => H - 20 - (v / max) * (H - 35);
  const line = (attrs) => { const l = document.createElementNS(ns, "line"); for (const k in attrs) l.setAttribute(k, attrs[k]); return l; };
  const text = (tx, ty, s) => { const t = document.createElementNS(ns, "text"); t.setAttribute("x", tx); t.setAttribute("y", ty); t.setAttribute("font-size", "11"); t.setAttribute("fill", "#6b7280"); t.textContent = s; return t; };
  svg.append(line({ x1: P, y1: y(0), x2: W - 5, y2: y(0), stroke: "#e3e6eb" }), line({ x1: P, y1: y(max), x2: W - 5, y2: y(max), stroke: "#e3e6eb", "stroke-dasharray": "4 4" }));
  svg.append(text(2, y(max) + 4, fmtRate(max)), text(2, y(0) + 4, "0"), text(W - 120, H - 4, "last " + Math.round(HISTORY_N * POLL_MS / 1000) + " s, items/s"));
  const off = HISTORY_N - points.length;
  for (const [key, color] of [["queued", "#2563eb"], ["duplicate", "#d97706"], ["failed", "#dc2626"]]) {
    if (!points.length) break;
    const p = document.createElementNS(ns, "polyline");
    p.setAttribute("points", points.map((pt, i) => x(off + i).toFixed(1) + "," + y(pt[key]).toFixed(1)).join(" "));
    p.setAttribute("fill", "none");
    p.setAttribute("stroke", color);
    p.setAttribute("stroke-width", "2");
    p.setAttribute("data-series", key);
    svg.append(p);
  }
  return svg;
}

// rateHistory is the verdict chart's points: the timeline's last HISTORY_N
// answered samples.
function rateHistory() {
  return timeline.filter((p) => p.s).slice(-HISTORY_N).map((p) => ({ queued: p.s.queuedPerSecond, duplicate: p.s.duplicatePerSecond, failed: p.s.failedPerSecond }));
}

function card(id, cls, label) {
  return el("div", { class: "card " + cls }, el("div", { class: "label" }, label), el("div", { class: "value", id }, "—"));
}

function pageOverview(gen) {
  main.replaceChildren(
    el("h2", null, "Overview"),
    el("div", { class: "cards" },
      card("rate-queued", "queued", "queued items/s"),
      card("rate-duplicate", "dup", "duplicate items/s"),
      card("rate-failed", "failed", "failed items/s"),
      card("rate-pop", "", "popped msgs/s"),
      card("rate-acked", "", "acked msgs/s"),
      card("p99", "", "commit p99"),
      card("rss", "", "broker RSS"),
      card("cache", "", "dedup cache")),
    el("div", { class: "chart" },
      el("div", { class: "legend" },
        el("span", null, el("i", { class: "sw-queued" }), "queued"),
        el("span", null, el("i", { class: "sw-dup" }), "duplicate"),
        el("span", null, el("i", { class: "sw-failed" }), "failed")),
      el("div", { id: "chart" })),
    el("p", { class: "muted", id: "totals" }),
    el("h3", null, "Timeline"),
    el("p", { class: "muted" }, "This broker over the last 10 minutes, sampled every " + POLL_MS / 1000 +
      " s while the console is open on any page: push items it answered queued (stored/s), acks answered acked, messages popped; " +
      "push commit latency (bucket upper bounds of queen_push_commit_seconds); its resident memory; what the database's WAL and size " +
      "grew by per message it stored over the last minute (read every 10 s; in a cluster, every broker's writes). A failed poll is a gap. " +
      "End-to-end latency is not in the broker's metrics (queen loadtest --report charts it)."),
    el("div", { class: "timeline", id: "timeline" }, ...TIMELINE_CHARTS.map(timelineFigure)));
  document.querySelector(".sw-queued").style.background = "var(--queued)";
  document.querySelector(".sw-dup").style.background = "var(--dup)";
  document.querySelector(".sw-failed").style.background = "var(--failed)";
  document.getElementById("chart").append(chart(rateHistory()));
  drawTimeline();
  onStats = (s, err) => {
    if (gen !== generation) return;
    drawTimeline();
    if (!s) {
      showError(err.message);
      return;
    }
    showError("");
    const set = (id, v) => { const e = document.getElementById(id); if (e) e.textContent = v; };
    set("rate-queued", fmtRate(s.queuedPerSecond));
    set("rate-duplicate", fmtRate(s.duplicatePerSecond));
    set("rate-failed", fmtRate(s.failedPerSecond));
    set("rate-pop", fmtRate(s.popPerSecond));
    set("rate-acked", fmtRate(s.ackedPerSecond));
    set("p99", s.commitP99Ms === null ? "—" : s.commitP99Ms.toFixed(1) + " ms");
    set("rss", fmtBytes(s.rssBytes));
    set("cache", fmtBytes(s.cacheBytes));
    set("totals", `since start: ${s.queued.toLocaleString("en")} queued, ${s.duplicate.toLocaleString("en")} duplicate, ${s.failed.toLocaleString("en")} failed · mailbox ${s.mailboxDepth} items · rates over ${s.windowSeconds.toFixed(1)} s`);
    const c = document.getElementById("chart");
    if (c) c.replaceChildren(chart(rateHistory()));
    statusBox.textContent = "updated " + new Date().toLocaleTimeString();
  };
  pollStats();
}

// ---- queues

function rateText(r) { return r === undefined || r === null ? "—" : (Math.round(r * 1000) / 10).toLocaleString("en") + " %"; }

async function pageQueues(gen) {
  main.replaceChildren(el("h2", null, "Queues"), el("p", { class: "muted" }, "loading…"));
  const data = await api("GET", "/api/v1/resources/queues");
  if (gen !== generation) return;
  const rows = (data.queues || []).map((q) => el("tr", { "data-queue": q.name },
    el("td", null, el("a", { href: "#/queues/" + encodeURIComponent(q.name) }, q.name)),
    el("td", null, [q.namespace, q.task].filter(Boolean).join(" / ") || "—"),
    el("td", { class: "num" }, q.partitions), el("td", { class: "num" }, q.messages), el("td", { class: "num" }, q.depth),
    el("td", { class: "num duplicate-rate", "data-rate": q.duplicateRate === null || q.duplicateRate === undefined ? "" : q.duplicateRate,
      title: `since this broker started: ${q.queuedSinceStart || 0} queued, ${q.duplicateSinceStart || 0} duplicate` }, rateText(q.duplicateRate)),
    el("td", null, durationText(q.options && q.options.dedupWindowSeconds)),
    el("td", null, durationText(q.options && q.options.retentionSeconds)),
    el("td", { class: "num" }, q.options ? q.options.retryLimit : "—"),
    el("td", null, durationText(q.options && q.options.leaseTime)),
    el("td", null, fmtTime(q.createdAt))));
  main.replaceChildren(el("h2", null, "Queues"),
    rows.length ? table(["queue", "namespace / task", "partitions", "messages", "depth", "duplicate rate", "dedup window", "retention", "retryLimit", "leaseTime", "created"], rows, "queues-table")
      : el("p", { class: "muted", id: "queues-empty" }, "No queues yet: push to create one."),
    el("p", { class: "muted" }, "depth: messages above the queue-mode group's cursors · duplicate rate: duplicate / (queued + duplicate) push items since this broker started (pushes that entered through it)"));
}

const RECENT_N = 20;

// pageQueue shows one queue: its options, partitions, consumer groups with
// cursor and lag per partition (GET /api/v1/queues/{queue}), the recent
// messages of one partition (the read-only peek, GET
// /api/v1/queues/{queue}/messages: nothing is leased or acked) and its dead
// letters. The live part is polled every 2 s.
async function pageQueue(gen, name, params) {
  main.replaceChildren(el("h2", null, "Queue " + name), el("p", { class: "muted" }, "loading…"));
  const path = "/api/v1/queues/" + encodeURIComponent(name);
  const [q, d0] = await Promise.all([api("GET", "/api/v1/resources/queues/" + encodeURIComponent(name)), api("GET", path)]);
  if (gen !== generation) return;
  const opts = Object.entries(q.options || {}).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : v]);
  const live = el("div", { id: "queue-live" });
  const dlqBox = el("div", { id: "queue-dlq" });
  main.replaceChildren(el("h2", null, "Queue " + q.name),
    kv([["namespace", q.namespace || "—"], ["task", q.task || "—"], ["partitions", q.partitions], ["messages", q.messages], ["created", fmtTime(q.createdAt)]], "queue-info"),
    el("h3", null, "Options"), kv(opts, "queue-options"),
    live,
    el("h3", null, "Dead letters"), dlqBox);
  const render = async (d) => {
    const parts = d.partitions || [];
    let sel = params.get("partition");
    if (!sel && parts.length) sel = parts.reduce((a, b) => (b.lastOffset > a.lastOffset ? b : a)).name;
    const link = (p) => "#/queues/" + encodeURIComponent(q.name) + "?partition=" + encodeURIComponent(p);
    const partRows = parts.map((p) => el("tr", { "data-partition": p.name, class: p.name === sel ? "selected" : null },
      el("td", null, el("a", { href: link(p.name) }, p.name)), el("td", { class: "num" }, p.lastOffset + 1), el("td", { class: "num" }, p.lastOffset),
      el("td", null, fmtTime(p.createdAt))));
    const groups = d.consumerGroups || [];
    const groupRows = [];
    for (const g of groups) {
      for (const c of g.cursors || []) {
        groupRows.push(el("tr", { "data-group": g.consumerGroup, "data-partition": c.partition, "data-lag": c.lag },
          el("td", null, g.consumerGroup), el("td", null, el("a", { href: link(c.partition) }, c.partition)),
          el("td", { class: "num" }, c.cursor), el("td", { class: "num" }, c.lastOffset), el("td", { class: "num lag" }, c.lag),
          el("td", null, c.leaseExpiresAt ? "leased until " + fmtTime(c.leaseExpiresAt) : "—")));
      }
    }
    let msgs = null, peekErr = null;
    if (sel) {
      const p = parts.find((x) => x.name === sel);
      const after = p ? Math.max(p.lastOffset - RECENT_N, -1) : -1;
      try {
        msgs = await api("GET", path + "/messages?" + new URLSearchParams({ partition: sel, after: String(after), limit: String(RECENT_N) }));
      } catch (e) {
        peekErr = e;
      }
    }
    if (gen !== generation) return;
    const msgRows = ((msgs && msgs.messages) || []).slice().reverse().map((m) => el("tr", { "data-offset": m.offset },
      el("td", { class: "num" }, m.offset), el("td", null, fmtTime(m.createdAt)), el("td", null, m.id), el("td", null, truncate(m.transactionId, 80)),
      el("td", null, m.traceId ? truncate(m.traceId, 40) : "—"), el("td", { class: "producer" }, m.producerSub ? truncate(m.producerSub, 40) : "—"),
      el("td", { class: "payload" }, payloadText(m.data))));
    live.replaceChildren(...[
      el("h3", null, "Partitions" + (d.truncated ? ` (first ${parts.length} of ${d.partitionCount})` : "")),
      partRows.length ? table(["partition", "messages", "last offset", "created"], partRows, "partitions-table") : el("p", { class: "muted", id: "partitions-empty" }, "No partitions yet."),
      el("h3", null, "Consumer groups"),
      groups.length ? el("p", { class: "muted", id: "groups-summary" }, groups.map((g) => `${g.consumerGroup}: lag ${g.lag}`).join(" · ")) : null,
      groupRows.length ? table(["group", "partition", "cursor", "last offset", "lag", "lease"], groupRows, "groups-table")
        : el("p", { class: "muted", id: "groups-empty" }, "No consumer group has popped this queue yet."),
      el("h3", null, sel ? `Recent messages in partition ${sel} (newest first; a read-only peek, nothing is leased or acked)` : "Recent messages"),
      peekErr ? el("p", { class: "muted", id: "messages-error" }, "Nothing to show: " + peekErr.message)
        : msgRows.length ? table(["offset", "created", "message id", "transactionId", "traceId", "producer", "payload"], msgRows, "messages-table")
          : el("p", { class: "muted", id: "messages-empty" }, "No stored messages.")].filter(Boolean));
    if (peekErr) showError(peekErr.message);
  };
  await render(d0);
  if (gen !== generation) return;
  const noDLQ = lacks("admin", "Listing dead letters (GET /api/v1/dlq)");
  if (noDLQ) {
    dlqBox.replaceChildren(lock(noDLQ, "admin"));
  } else {
    const dl = await api("GET", "/api/v1/dlq?limit=20&queue=" + encodeURIComponent(q.name));
    if (gen !== generation) return;
    dlqBox.replaceChildren(dlqTable(dl.messages || [], false), el("p", { class: "muted" }, "See the DLQ page to replay."));
  }
  timer = setInterval(async () => {
    try {
      const d = await api("GET", path);
      if (gen !== generation) return;
      await render(d);
      statusBox.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      if (gen === generation) showError(e.message);
    }
  }, 2000);
}

// ---- dedup inspector

function pageDedup(gen, params) {
  const f = el("form", { class: "inline", id: "dedup-form" },
    el("label", null, "queue", el("input", { name: "queue", id: "dedup-queue", required: "" })),
    el("label", null, "partition", el("input", { name: "partition", id: "dedup-partition", value: "Default" })),
    el("label", null, "transactionId", el("input", { name: "transactionId", id: "dedup-txn", size: "40" })),
    el("button", { type: "submit", id: "dedup-go" }, "Inspect"));
  const out = el("div", { id: "dedup-result" });
  const locked = lock(lacks("admin", "The dedup inspector (GET /api/v1/dedup)"), "admin", f.querySelector("#dedup-go"));
  main.replaceChildren(el("h2", null, "Dedup inspector"),
    el("p", { class: "muted" }, "Is this transactionId inside its partition's window, what did it become, and when does the window close for it? (SPEC.md §13, GET /api/v1/dedup)"), f, ...[locked].filter(Boolean), out);
  for (const k of ["queue", "partition", "transactionId"]) if (params.get(k)) f.elements[k].value = params.get(k);
  if (locked) {
    f.addEventListener("submit", (ev) => ev.preventDefault());
    return;
  }
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    out.replaceChildren();
    const q = f.elements.queue.value.trim(), p = f.elements.partition.value.trim(), t = f.elements.transactionId.value;
    if (!q || !t) { showError("queue and transactionId are required"); return; }
    showError("");
    try {
      const d = await api("GET", "/api/v1/dedup?" + new URLSearchParams({ queue: q, partition: p || "Default", transactionId: t }));
      if (gen !== generation) return;
      const state = el("span", { class: "state " + d.state, id: "dedup-state", "data-state": d.state }, d.state);
      const words = { in_window: "inside the window: a push with this id is answered duplicate", expired: "stored, but its window has closed: a push with this id is queued as a new message", unknown: "not stored in this partition (never pushed, or purged)" };
      out.replaceChildren(kv([["state", state], ["meaning", words[d.state] || ""], ["message id", d.messageId], ["offset", d.offset],
        ["created", fmtTime(d.createdAt)], ["window", durationText(d.windowSeconds)], ["window closes at", d.windowClosesAt ? fmtTime(d.windowClosesAt) + " (" + fmtAgo(d.windowClosesAt) + ")" : "—"]], "dedup-kv"));
    } catch (e) {
      if (gen === generation) showError(e.message);
    }
  });
  if (params.get("queue") && params.get("transactionId")) f.requestSubmit();
}

// ---- DLQ

function dlqTable(msgs, replayable) {
  const rows = msgs.map((m) => el("tr", { "data-id": m.id },
    el("td", { class: "num" }, m.id), el("td", null, m.queue), el("td", null, m.partition), el("td", null, m.consumerGroup),
    el("td", { class: "num" }, m.offset), el("td", null, m.transactionId), el("td", null, truncate(m.error || m.errorMessage || "", 80)),
    el("td", { class: "num" }, m.attempts), el("td", null, fmtTime(m.deadLetteredAt)),
    el("td", { class: "producer" }, m.producerSub ? truncate(m.producerSub, 40) : "—"), el("td", { class: "payload" }, payloadText(m.data)),
    replayable ? el("td", null, el("button", { class: "small replay-one", type: "button", "data-id": m.id }, "replay")) : null));
  const h = ["id", "queue", "partition", "group", "offset", "transactionId", "error", "attempts", "dead since", "producer", "payload"];
  if (replayable) h.push("");
  return rows.length ? table(h, rows, "dlq-table") : el("p", { class: "muted", id: "dlq-empty" }, "No dead letters match.");
}

function pageDLQ(gen, params) {
  const f = el("form", { class: "inline", id: "dlq-form" },
    el("label", null, "queue", el("input", { name: "queue", id: "dlq-queue", required: "" })),
    el("label", null, "consumer group", el("input", { name: "consumerGroup", id: "dlq-group", placeholder: "any" })),
    el("label", null, "partition", el("input", { name: "partition", id: "dlq-partition", placeholder: "any" })),
    el("button", { type: "submit", id: "dlq-go" }, "List"),
    el("label", null, "replay dead letter ids", el("input", { name: "ids", id: "replay-ids", placeholder: "e.g. 12, 13" })),
    el("button", { type: "button", id: "replay-ids-go" }, "Replay ids"));
  const list = el("div", { id: "dlq-list" });
  const result = el("div", { id: "replay-result" });
  const locked = lock(lacks("admin", "Listing and replaying dead letters (GET /api/v1/dlq, POST /api/v1/dlq/replay)"), "admin", f.querySelector("#dlq-go"), f.querySelector("#replay-ids-go"));
  main.replaceChildren(el("h2", null, "Dead letters"), f, ...(locked ? [locked] : [list, el("h3", null, "Replay results"), result]));
  for (const k of ["queue", "consumerGroup", "partition"]) if (params.get(k)) f.elements[k].value = params.get(k);
  if (locked) {
    f.addEventListener("submit", (ev) => ev.preventDefault());
    return;
  }
  let shown = [];
  const filter = () => ({ queue: f.elements.queue.value.trim(), consumerGroup: f.elements.consumerGroup.value.trim(), partition: f.elements.partition.value.trim() });
  const load = async () => {
    const flt = filter();
    if (!flt.queue) { showError("queue is required"); return; }
    showError("");
    const qs = new URLSearchParams({ queue: flt.queue, limit: "100" });
    if (flt.consumerGroup) qs.set("consumerGroup", flt.consumerGroup);
    if (flt.partition) qs.set("partition", flt.partition);
    try {
      await api("GET", "/api/v1/resources/queues/" + encodeURIComponent(flt.queue)); // an unknown queue is an error, not an empty list
      const d = await api("GET", "/api/v1/dlq?" + qs);
      if (gen !== generation) return;
      shown = d.messages || [];
      list.replaceChildren(el("p", { class: "muted" }, (d.total !== undefined ? d.total : shown.length) + " dead letter(s)"), dlqTable(shown, true),
        ...(shown.length ? [el("button", { type: "button", id: "replay-all" }, "Replay all " + shown.length + " shown")] : []));
    } catch (e) {
      if (gen === generation) { list.replaceChildren(); showError(e.message); }
    }
  };
  const replay = async (ids) => {
    const flt = filter();
    try {
      const body = { queue: flt.queue, ids };
      if (flt.consumerGroup) body.consumerGroup = flt.consumerGroup;
      const r = await api("POST", "/api/v1/dlq/replay", body);
      if (gen !== generation) return;
      showError("");
      result.replaceChildren(el("p", { id: "replay-summary" }, `moved ${r.moved} · duplicate ${r.duplicate} · gone ${r.gone} · failed ${r.failed}`),
        table(["dead letter", "result", "queue / partition", "message id", "offset", "transactionId", "error"], (r.results || []).map((x) =>
          el("tr", { "data-id": x.id, "data-result": x.result },
            el("td", { class: "num" }, x.id), el("td", { class: "result-" + x.result }, x.result), el("td", null, [x.queue, x.partition].filter(Boolean).join(" / ") || "—"),
            el("td", null, x.messageId || "—"), el("td", { class: "num" }, x.offset === undefined || x.offset === null ? "—" : x.offset),
            el("td", null, x.transactionId || "—"), el("td", null, x.error || ""))), "replay-table"));
      await load();
    } catch (e) {
      if (gen === generation) showError(e.message);
    }
  };
  list.addEventListener("click", (ev) => {
    const b = ev.target.closest("button");
    if (!b) return;
    if (b.id === "replay-all") replay(shown.map((m) => m.id));
    else if (b.classList.contains("replay-one")) replay([Number(b.dataset.id)]);
  });
  f.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  document.getElementById("replay-ids-go").addEventListener("click", () => {
    const raw = f.elements.ids.value.split(/[\s,]+/).filter(Boolean);
    const ids = raw.map(Number);
    if (!filter().queue) { showError("queue is required"); return; }
    if (!ids.length || ids.some((n) => !Number.isSafeInteger(n) || n <= 0)) { showError("dead letter ids are positive whole numbers, got \"" + f.elements.ids.value + "\""); return; }
    replay(ids);
  });
  if (params.get("queue")) load();
}

// ---- cluster

const palette = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#db2777", "#4b5563", "#65a30d"];

function pageCluster(gen) {
  main.replaceChildren(el("h2", null, "Cluster"), el("div", { id: "cluster-body" }, el("p", { class: "muted" }, "loading…")));
  const tick = async () => {
    try {
      const c = await api("GET", "/api/v1/cluster");
      if (gen !== generation) return;
      showError("");
      const color = {};
      (c.brokers || []).forEach((b, i) => { color[b.id] = palette[i % palette.length]; });
      const owned = {};
      for (const s of c.shards || []) owned[s.owner] = (owned[s.owner] || 0) + 1;
      const brokers = table(["", "broker", "HTTP", "started", "heartbeat", "expires", "live", "shards", "release", "schema", "layout"], (c.brokers || []).map((b) => {
        const sw = el("i"); sw.className = "swatch"; sw.style.display = "inline-block"; sw.style.width = ".8rem"; sw.style.height = ".8rem"; sw.style.background = color[b.id];
        return el("tr", { "data-broker": b.id }, el("td", null, sw), el("td", null, b.id + (b.id === c.self ? " (this broker)" : "")), el("td", null, b.httpUrl || "—"),
          el("td", null, fmtTime(b.startedAt)), el("td", null, fmtAgo(b.heartbeatAt, c.now)), el("td", null, fmtAgo(b.expiresAt, c.now)),
          el("td", null, b.live ? "yes" : "no"), el("td", { class: "num" }, owned[b.id] || 0),
          // A broker older than 0.2.0 advertises no release or schema (layout 0).
          el("td", { title: "revision " + (b.revision || "unknown") }, b.release || "—"), el("td", { class: "num" }, b.schema ? String(b.schema) : "—"),
          el("td", { class: "num" }, String(b.layout || 0)));
      }), "cluster-brokers");
      const grid = el("div", { class: "grid", id: "shard-grid" });
      for (const s of c.shards || []) {
        const d = el("div", { title: `shard ${s.shard}: ${s.owner || "no owner"}, lease expires ${fmtTime(s.expiresAt)} (${fmtAgo(s.expiresAt, c.now)})`, "data-shard": s.shard }, String(s.shard));
        d.style.background = color[s.owner] || "#9ca3af";
        if (!s.live) d.className = "expired";
        grid.append(d);
      }
      const body = document.getElementById("cluster-body");
      if (body) body.replaceChildren(el("p", { class: "muted" }, `${(c.brokers || []).length} broker(s) · ${c.shardCount} shards · lease ${c.leaseSeconds} s · as of ${fmtTime(c.now)}`),
        brokers, el("h3", null, "Shard owners (hover for the lease expiry; faded: lease expired)"), grid);
    } catch (e) {
      if (gen === generation) showError(e.message);
    }
  };
  tick();
  timer = setInterval(tick, 2000);
}

// ---- access: who is signed in and what the role allows

function pageAccess() {
  const how = { jwt: "a JWT (JWT_ENABLED): the broker verified the token and read its roles",
    "admin-token": "the admin token (QUEEN_ADMIN_TOKEN; JWT off): every route",
    open: "nothing: this broker has no access control (JWT off and no QUEEN_ADMIN_TOKEN), anyone who reaches it may do everything" };
  const rows = LEVELS.map((lv) => {
    const ok = reaches(lv);
    return el("tr", { "data-level": lv, "data-allowed": String(ok) },
      el("td", null, lv), el("td", null, LEVEL_ALLOWS[lv]),
      el("td", { class: ok ? "allowed" : "denied" }, ok ? "allowed" : "not allowed: needs the " + lv + " role"));
  });
  main.replaceChildren(el("h2", null, "Access"),
    kv([["signed in with", how[identity.access] || identity.access], ["sub", identity.sub || "—"], ["role", identity.role],
      ["token's roles", identity.roles && identity.roles.length ? identity.roles.join(", ") : "—"],
      ["expires", identity.expiresAt ? fmtTime(identity.expiresAt) + " (" + fmtIn(identity.expiresAt) + ")" : identity.access === "jwt" ? "never (the token has no exp)" : "—"]], "access-kv"),
    el("h3", null, "What this role allows"),
    table(["level", "what", "this role"], rows, "access-table"),
    el("p", { class: "muted" }, "As the broker answered GET /api/v1/auth/whoami for this token. Controls the role may not use are shown disabled, with the reason."));
}

// ---- router

async function route() {
  if (timer) { clearInterval(timer); timer = null; }
  onStats = null;
  if (!identity) return; // signed out: the sign-in stays (signOut), or the sign-in is under way (start)
  const gen = ++generation;
  showError("");
  statusBox.textContent = "";
  const hash = location.hash.replace(/^#\/?/, "");
  const [pathPart, query] = hash.split("?");
  const path = pathPart.split("/").map((s) => { try { return decodeURIComponent(s); } catch (e) { return s; } });
  const params = new URLSearchParams(query || "");
  const page = path[0] || "overview";
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.page === page);
  try {
    switch (page) {
      case "overview": pageOverview(gen); break;
      case "queues": if (path[1]) await pageQueue(gen, path[1], params); else await pageQueues(gen); break;
      case "dedup": pageDedup(gen, params); break;
      case "dlq": pageDLQ(gen, params); break;
      case "cluster": pageCluster(gen); break;
      case "access": pageAccess(); break;
      default: main.replaceChildren(el("h2", null, "Not found"), el("p", null, "No page " + page + ": pick one above.")); break;
    }
  } catch (e) {
    if (gen === generation) {
      showError(e.message);
      if (!main.firstChild || main.querySelector("p.muted")) main.replaceChildren(el("h2", null, page), el("p", { class: "muted" }, "Nothing to show: " + e.message));
    }
  }
}

window.addEventListener("hashchange", route);
start();
setInterval(pollStats, POLL_MS);
