// The local service's page: plain JavaScript, no build step, no external assets.
// Everything it shows comes from the service's public API (the same one the real service
// has), authenticated with the token from the address's fragment (#token=...), which the
// browser never sends to the server.
"use strict";

const EVENTS_LIMIT = 200;
const EVENTS_EVERY_MS = 1500;
const SIDEBAR_EVERY_MS = 3000;
const HISTOGRAM_EVERY_MS = 5000;
const VIEWS_EVERY_MS = 15000;
const LEVELS = ["debug", "info", "warning", "error", "critical"];
const LEVEL_COLOURS = { debug: "#8b95a5", info: "#2f9e44", warning: "#e8a317",
  error: "#e03131", critical: "#9c36b5", other: "#4c6ef5" };
const SYSTEM = new Set(["_time", "_sysTime", "_rowId"]);

const state = {
  token: "",
  selected: null, // {kind: "dataset", name} or {kind: "view", view}
  rows: [],
  seen: new Set(),
  selectedRow: null,
  signature: "",
  filter: "",
  timers: [],
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function tokenFromHash() {
  // Not URLSearchParams: it would read a "+" in a token as a space.
  const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (!m) return "";
  try { return decodeURIComponent(m[1]); } catch (e) { return m[1]; }
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + state.token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const said = data && (data.message || data.error);
    throw new ApiError(resp.status, said || ("HTTP " + resp.status));
  }
  return data;
}

// Tabular answers give every row every column: for whole events, a null is a field the
// event does not have.
function compact(row) {
  const out = {};
  for (const [k, v] of Object.entries(row)) if (v !== null && v !== undefined) out[k] = v;
  return out;
}

async function query(apl) {
  const answer = await api("POST", "/v1/datasets/_apl?format=tabular", { apl });
  const table = (answer.tables || []).find((t) => t.name !== "_totals");
  if (!table) return [];
  const names = table.fields.map((f) => f.name);
  const columns = table.columns || [];
  const n = columns.length ? columns[0].length : 0;
  const rows = [];
  for (let i = 0; i < n; i++) {
    const row = {};
    names.forEach((name, j) => { row[name] = columns[j][i]; });
    rows.push(row);
  }
  return rows;
}

function source(name) {
  return "['" + name.replace(/\\/g, "\\\\").replace(/'/g, "\\'") + "']";
}

function setStatus(text, bad) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("bad", !!bad);
}

function handleError(err) {
  if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
    showLogin("The service did not accept this token.");
    return;
  }
  setStatus("cannot reach the service: " + err.message, true);
}

// ------------------------------------------------------------------ sidebar

async function refreshDatasets() {
  const list = await api("GET", "/v1/datasets");
  const names = list.map((d) => d.name);
  const counts = await Promise.all(names.map((name) =>
    query(source(name) + " | count").then((rows) => (rows[0] ? rows[0].count : 0))
      .catch(() => "?")));
  const ul = $("datasets");
  ul.replaceChildren();
  if (!names.length) ul.append(el("li", { class: "muted", text: "none yet: ingest some events" }));
  names.forEach((name, i) => {
    const li = el("li", { "data-dataset": name },
      el("span", { class: "name", text: name }),
      el("span", { class: "count", text: typeof counts[i] === "number"
        ? counts[i].toLocaleString() : "?" }));
    if (state.selected && state.selected.kind === "dataset" && state.selected.name === name) {
      li.classList.add("active");
    }
    li.addEventListener("click", () => select({ kind: "dataset", name }));
    ul.append(li);
  });
  if (!state.selected && names.length) select({ kind: "dataset", name: names[0] });
  // The welcome text only once the list is known, so a first paint never claims "no events".
  $("loading").hidden = true;
  if (!state.selected) { $("welcome").hidden = false; setStatus("live · no events yet"); }
}

async function refreshViews() {
  const views = await api("GET", "/v2/views");
  const ul = $("views");
  ul.replaceChildren();
  if (!views.length) ul.append(el("li", { class: "muted", text: "no views" }));
  for (const view of views) {
    const li = el("li", { "data-view": view.id, title: view.aplQuery },
      el("span", { class: "name", text: view.name || "(unnamed)" }));
    if (state.selected && state.selected.kind === "view" && state.selected.view.id === view.id) {
      li.classList.add("active");
      state.selected.view = view;
    }
    li.addEventListener("click", () => select({ kind: "view", view }));
    ul.append(li);
  }
}

async function refreshSidebar() {
  try { await refreshDatasets(); } catch (err) { handleError(err); }
}

async function refreshViewList() {
  try { await refreshViews(); } catch (err) { handleError(err); }
}

// ------------------------------------------------------------------ events

function select(what) {
  state.selected = what;
  state.rows = [];
  state.signature = "";
  state.seen = new Set();
  state.selectedRow = null;
  $("detail").hidden = true;
  for (const li of document.querySelectorAll(".list li")) {
    const on = what.kind === "dataset" ? li.dataset.dataset === what.name
      : li.dataset.view === what.view.id;
    li.classList.toggle("active", !!on);
  }
  $("title").textContent = what.kind === "dataset" ? what.name : "View: " + what.view.name;
  $("welcome").hidden = true;
  $("loading").hidden = true;
  $("panes").hidden = false;
  $("histogram").hidden = what.kind !== "dataset";
  refreshEvents();
  if (what.kind === "dataset") refreshHistogram();
}

function currentQuery() {
  const s = state.selected;
  if (!s) return null;
  if (s.kind === "dataset") {
    return source(s.name) + " | sort by _time desc | take " + EVENTS_LIMIT;
  }
  return s.view.aplQuery;
}

async function refreshEvents() {
  const apl = currentQuery();
  if (!apl) return;
  $("query").textContent = apl;
  const notice = $("notice");
  const asked = state.selected;
  try {
    let rows = await query(apl);
    if (asked !== state.selected) return; // the user moved on meanwhile
    if (rows.every((r) => "_rowId" in r)) rows = rows.map(compact);
    notice.hidden = true;
    // Re-render only on a change: a table rebuilt every poll would lose the reader's text
    // selection and hover, and flicker.
    const signature = JSON.stringify(rows);
    if (signature !== state.signature) {
      state.signature = signature;
      state.rows = rows;
      renderEvents();
    }
    setStatus((($("live").checked) ? "live · " : "paused · ") + "updated "
      + new Date().toLocaleTimeString());
  } catch (err) {
    if (asked !== state.selected) return;
    if (err instanceof ApiError && err.status === 400) {
      notice.textContent = (state.selected.kind === "view"
        ? "This view's query is outside the APL subset the local service runs: "
        : "The query failed: ") + err.message;
      notice.hidden = false;
      state.rows = [];
      state.signature = "";
      renderEvents();
    } else {
      handleError(err);
    }
  }
}

function rowKey(row) {
  return row._rowId || JSON.stringify(row);
}

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function levelOf(row) {
  const level = String(row.level || row.severity || "").toLowerCase();
  return level === "warn" ? "warning" : level === "fatal" ? "critical" : level;
}

function renderEvents() {
  const table = $("events");
  const needle = state.filter.toLowerCase();
  const rows = needle
    ? state.rows.filter((r) => JSON.stringify(r).toLowerCase().includes(needle))
    : state.rows;
  const eventsLike = rows.length === 0 || rows.every((r) => "_time" in r);
  const head = el("thead");
  const body = el("tbody");
  let columns = [];
  if (eventsLike) {
    head.append(el("tr", {}, el("th", { text: "time" }), el("th", { text: "level" }),
      el("th", { text: "message" }), el("th", { text: "fields" })));
  } else {
    const names = new Set();
    rows.forEach((r) => Object.keys(r).forEach((k) => names.add(k)));
    columns = [...names];
    head.append(el("tr", {}, ...columns.map((c) => el("th", { text: c }))));
  }
  const firstRender = state.seen.size === 0;
  for (const row of rows) {
    const key = rowKey(row);
    const tr = el("tr", { class: "row", "data-row-id": key });
    if (!firstRender && !state.seen.has(key)) tr.classList.add("fresh");
    if (state.selectedRow === key) tr.classList.add("selected");
    if (eventsLike) {
      const level = levelOf(row);
      const fields = Object.entries(row)
        .filter(([k]) => !SYSTEM.has(k) && k !== "level" && k !== "message")
        .map(([k, v]) => k + "=" + text(v)).join("  ");
      tr.append(
        el("td", { class: "time", text: text(row._time) }),
        el("td", {}, el("span", { class: "level " + (level || "none"),
          text: text(row.level || "—") })),
        el("td", { class: "message", text: text(row.message) }),
        el("td", { class: "fields", text: fields }));
    } else {
      for (const c of columns) tr.append(el("td", { text: text(row[c]) }));
    }
    tr.tabIndex = 0; // the keyboard reaches events too: Tab to a row, Enter opens it
    tr.addEventListener("click", () => showDetail(row, key));
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter") showDetail(row, key); });
    body.append(tr);
  }
  for (const row of state.rows) state.seen.add(rowKey(row));
  table.replaceChildren(head, body);
  $("empty").hidden = rows.length > 0;
  $("empty").textContent = state.rows.length ? "no events match the filter" : "no events";
}

function showDetail(row, key) {
  state.selectedRow = key;
  $("detail-json").textContent = JSON.stringify(row, null, 2);
  $("detail").hidden = false;
  for (const tr of document.querySelectorAll("#events tr.row")) {
    tr.classList.toggle("selected", tr.dataset.rowId === key);
  }
}

// ------------------------------------------------------------------ histogram

const SPANS = [[1, "1s"], [5, "5s"], [10, "10s"], [30, "30s"], [60, "1m"], [300, "5m"],
  [600, "10m"], [1800, "30m"], [3600, "1h"], [10800, "3h"], [21600, "6h"], [86400, "1d"]];

async function refreshHistogram() {
  const s = state.selected;
  if (!s || s.kind !== "dataset") return;
  try {
    // The hour up to now, or, for a dataset whose newest event is older, up to that event.
    const newest = await query(source(s.name) + " | sort by _time desc | take 1");
    if (s !== state.selected) return;
    let end = Date.now();
    if (newest.length) {
      const t = Date.parse(newest[0]._time);
      if (!Number.isNaN(t) && t < end - 3600e3) end = t + 1000;
    }
    const start = end - 3600e3;
    const [seconds, span] = SPANS.find(([sec]) => 3600 / sec <= 60);
    const apl = source(s.name) + " | where _time >= datetime('" + new Date(start).toISOString()
      + "') and _time < datetime('" + new Date(end).toISOString() + "')"
      + " | summarize count() by bin(_time, " + span + "), level";
    const rows = await query(apl);
    if (s !== state.selected) return;
    drawHistogram(rows, start, end, seconds * 1000);
  } catch (err) { handleError(err); }
}

function drawHistogram(rows, start, end, binMs) {
  const fig = $("histogram");
  const first = Math.floor(start / binMs) * binMs;
  const nbins = Math.ceil((end - first) / binMs);
  const bins = Array.from({ length: nbins }, () => ({}));
  const present = new Set();
  for (const row of rows) {
    const i = Math.floor((Date.parse(row._time) - first) / binMs);
    if (i < 0 || i >= nbins) continue;
    const level = LEVELS.includes(levelOf(row)) ? levelOf(row) : "other";
    bins[i][level] = (bins[i][level] || 0) + row.count_;
    present.add(level);
  }
  const totals = bins.map((b) => Object.values(b).reduce((a, c) => a + c, 0));
  const max = Math.max(1, ...totals);
  const W = 1000, H = 110, top = 6, bottom = 18, left = 34;
  const plotH = H - top - bottom;
  const barW = (W - left) / nbins;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none",
    role: "img", "aria-label": "events per " + (binMs / 1000) + " s by level" });
  root.append(svg("line", { x1: left, x2: W, y1: H - bottom, y2: H - bottom,
    stroke: "#e3e6eb" }));
  const label = (x, y, str, anchor) => {
    const t = svg("text", { x, y, "font-size": 10, fill: "#6b7280", "text-anchor": anchor });
    t.textContent = str;
    root.append(t);
  };
  label(left - 4, top + 8, String(max), "end");
  label(left - 4, H - bottom, "0", "end");
  label(left, H - 4, new Date(first).toLocaleTimeString(), "start");
  label(W, H - 4, new Date(end).toLocaleTimeString(), "end");
  bins.forEach((bin, i) => {
    let y = H - bottom;
    for (const level of [...LEVELS, "other"]) {
      const n = bin[level];
      if (!n) continue;
      const h = (n / max) * plotH;
      y -= h;
      const rect = svg("rect", { x: left + i * barW + 1, y, width: Math.max(1, barW - 2),
        height: h, fill: LEVEL_COLOURS[level], "data-level": level });
      const title = svg("title");
      title.textContent = `${new Date(first + i * binMs).toLocaleTimeString()} ${level}: ${n}`;
      rect.append(title);
      root.append(rect);
    }
  });
  const legend = el("div", { class: "legend" });
  for (const level of [...LEVELS, "other"]) {
    if (!present.has(level)) continue;
    const sw = el("span", { class: "swatch" });
    sw.style.background = LEVEL_COLOURS[level];
    legend.append(el("span", {}, sw, level));
  }
  if (!present.size) legend.append(el("span", { text: "no events in this hour" }));
  fig.replaceChildren(root, legend);
}

// ------------------------------------------------------------------ start

function showLogin(message) {
  state.timers.forEach(clearInterval);
  state.timers = [];
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  setStatus("not signed in", true);
}

function start() {
  state.token = tokenFromHash();
  state.timers.forEach(clearInterval);
  state.timers = [];
  if (!state.token) { showLogin(""); return; }
  $("login").hidden = true;
  $("app").hidden = false;
  refreshSidebar();
  refreshViewList();
  state.timers.push(setInterval(refreshSidebar, SIDEBAR_EVERY_MS));
  state.timers.push(setInterval(refreshViewList, VIEWS_EVERY_MS));
  state.timers.push(setInterval(() => { if ($("live").checked) refreshEvents(); },
    EVENTS_EVERY_MS));
  state.timers.push(setInterval(() => { if ($("live").checked) refreshHistogram(); },
    HISTOGRAM_EVERY_MS));
}

document.addEventListener("DOMContentLoaded", () => {
  $("filter").addEventListener("input", (e) => { state.filter = e.target.value; renderEvents(); });
  $("detail-close").addEventListener("click", () => {
    $("detail").hidden = true;
    state.selectedRow = null;
    for (const tr of document.querySelectorAll("#events tr.selected")) {
      tr.classList.remove("selected");
    }
  });
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("login-token").value.trim();
    if (token) location.hash = "token=" + encodeURIComponent(token);
  });
  window.addEventListener("hashchange", start);
  start();
});
