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
// Where the code ran: shown after the application's own fields, which say what happened.
const CODE_FIELDS = ["logger", "module", "function", "line", "file", "process", "thread"];
const TRACE_FIELDS = ["exception", "exception.stacktrace", "stack", "stack_trace", "traceback",
  "error.stack"];

// An event's text: its message, or structlog's `event` (or `msg`), or an OpenTelemetry log
// record's `body`, or a span's `name`, when it has none.
function messageOf(row) {
  for (const key of ["message", "event", "msg", "body"]) {
    if (typeof row[key] === "string") return [key, row[key]];
  }
  if (typeof row.name === "string" && "span_id" in row) return ["name", row.name];
  return ["message", row.message];
}

const state = {
  token: "",
  selected: null, // {kind: "dataset", name} or {kind: "view", view}
  rows: [],
  seen: new Set(),
  selectedRow: null,
  signature: "",
  search: "", // the search box's text: server-side, over the whole dataset (/local/search)
  range: "all", // the time range: all, 5m, 15m, 1h, 24h, 7d
  apl: null, // the selected dataset's query for search and range, as the service made it
  wanted: null, // what the address asks to show, until the lists are known
  tz: "utc", // every time on the page in UTC, or in the browser's local time
  group: "", // events grouped by this field's value (trace_id, request_id), or not
  hist: null, // the histogram's scale, for a drag to zoom: {first, end, binMs, left, W, barW}
  timers: [],
};
const RANGE_SECONDS = { "5m": 300, "15m": 900, "1h": 3600, "24h": 86400, "7d": 604800 };

// A custom range ("START/END", UTC), as [startMs, endMs], or null.
function customRange(range) {
  const [a, b] = String(range).split("/");
  if (b === undefined) return null;
  const start = Date.parse(a), end = Date.parse(b);
  return Number.isNaN(start) || Number.isNaN(end) ? null : [start, end];
}

// One time convention on the whole page: UTC (as stored) or the browser's local time.
function pad(n, w) { return String(n).padStart(w || 2, "0"); }
function fmtTime(value, withDate) {
  const ms = typeof value === "number" ? value : Date.parse(value);
  if (Number.isNaN(ms)) return String(value);
  const d = new Date(ms);
  const utc = state.tz === "utc";
  const Y = utc ? d.getUTCFullYear() : d.getFullYear();
  const M = (utc ? d.getUTCMonth() : d.getMonth()) + 1;
  const D = utc ? d.getUTCDate() : d.getDate();
  const h = utc ? d.getUTCHours() : d.getHours();
  const m = utc ? d.getUTCMinutes() : d.getMinutes();
  const s = utc ? d.getUTCSeconds() : d.getSeconds();
  const clock = pad(h) + ":" + pad(m) + ":" + pad(s);
  let frac = "";
  if (typeof value === "string") {
    const f = value.match(/\.(\d+)/);
    if (f) frac = "." + f[1];
  }
  const zone = utc ? "Z" : "";
  return (withDate === false ? clock : `${Y}-${pad(M)}-${pad(D)} ${clock}`) + frac + zone;
}

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

// The address holds what is shown (dataset or view, search, range, the event opened), so a
// link shows the same and a reload keeps it: #token=...&dataset=...&q=...&range=...&event=...
function hashParams() {
  const out = {};
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    const i = part.indexOf("=");
    if (i <= 0) continue;
    try { out[part.slice(0, i)] = decodeURIComponent(part.slice(i + 1)); } catch (e) { /* skip */ }
  }
  return out;
}

function writeHash() {
  const parts = ["token=" + encodeURIComponent(state.token)];
  const s = state.selected;
  if (s && s.kind === "dataset") parts.push("dataset=" + encodeURIComponent(s.name));
  if (s && s.kind === "view") parts.push("view=" + encodeURIComponent(s.view.id));
  if (s && s.kind === "query") parts.push("apl=" + encodeURIComponent(s.apl));
  if (state.search) parts.push("q=" + encodeURIComponent(state.search));
  if (state.range !== "all") parts.push("range=" + encodeURIComponent(state.range));
  if (state.tz !== "utc") parts.push("tz=" + state.tz);
  if (state.group) parts.push("group=" + encodeURIComponent(state.group));
  if (state.selectedRow) parts.push("event=" + encodeURIComponent(state.selectedRow));
  const hash = "#" + parts.join("&");
  if (location.hash !== hash) history.replaceState(null, "", hash);
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
  if (!state.selected && state.wanted && state.wanted.apl) {
    const apl = state.wanted.apl;
    $("editor-apl").value = apl;
    openEditor(true);
    select({ kind: "query", apl });
  }
  if (!state.selected && names.length) {
    const wanted = state.wanted;
    if (wanted && wanted.view) return; // the views' list selects it
    const name = wanted && wanted.dataset && names.includes(wanted.dataset)
      ? wanted.dataset : names[0];
    select({ kind: "dataset", name });
  }
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
  const wanted = state.wanted;
  if (!state.selected && wanted && wanted.view) {
    const view = views.find((v) => v.id === wanted.view);
    if (view) select({ kind: "view", view });
    else state.wanted = { ...wanted, view: null };
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
  const wanted = state.wanted;
  state.wanted = null;
  state.selectedRow = wanted && wanted.event ? wanted.event : null;
  $("detail").hidden = true;
  if (what.kind !== "dataset") {
    // A view or a query runs its own APL: the dataset's search does not carry into it.
    state.search = "";
    $("filter").value = "";
  }
  $("filter").disabled = what.kind !== "dataset";
  $("range").disabled = what.kind !== "dataset";
  state.apl = null;
  state.more = false;
  for (const li of document.querySelectorAll(".list li")) {
    const on = what.kind === "dataset" ? li.dataset.dataset === what.name
      : what.kind === "view" && li.dataset.view === what.view.id;
    li.classList.toggle("active", !!on);
  }
  $("title").textContent = what.kind === "dataset" ? what.name
    : what.kind === "view" ? "View: " + what.view.name : "Query";
  $("welcome").hidden = true;
  $("loading").hidden = true;
  $("panes").hidden = false;
  $("histogram").hidden = what.kind !== "dataset";
  writeHash();
  if (what.kind === "dataset") {
    recompute();
    refreshHistogram();
  } else {
    refreshEvents();
    refreshFacets();
  }
}

// The range picker shows a custom range (a drag on the histogram) as an option of its own.
function setRangeOption() {
  const select = $("range");
  let custom = select.querySelector("option[data-custom]");
  const span = customRange(state.range);
  if (span) {
    if (!custom) {
      custom = el("option", { "data-custom": "1" });
      select.append(custom);
    }
    custom.value = state.range;
    custom.textContent = fmtTime(span[0]) + " – " + fmtTime(span[1], false);
  } else if (custom) {
    custom.remove();
  }
  select.value = state.range;
}

// The dataset's query for the search and the range, made by the service (search.py), so the
// query line shows exactly what ran.
async function recompute() {
  const s = state.selected;
  if (!s || s.kind !== "dataset") return;
  writeHash();
  if (!state.search && state.range === "all") {
    state.apl = null;
    refreshEvents();
    refreshFacets();
    return;
  }
  const asked = [s, state.search, state.range];
  try {
    const made = await api("POST", "/local/search",
      { dataset: s.name, q: state.search, range: state.range });
    if (asked[0] !== state.selected || asked[1] !== state.search || asked[2] !== state.range) {
      return; // typed on meanwhile
    }
    state.apl = made.apl;
    state.signature = "";
    state.rows = [];
    refreshEvents();
    refreshFacets();
  } catch (err) {
    if (err instanceof ApiError && err.status === 400) {
      $("notice").textContent = "The search cannot run: " + err.message;
      $("notice").hidden = false;
    } else {
      handleError(err);
    }
  }
}

function currentQuery() {
  const s = state.selected;
  if (!s) return null;
  if (s.kind === "query") return s.apl;
  if (s.kind === "dataset") {
    return state.apl
      || (source(s.name) + " | sort by _time desc, _rowId desc | take " + EVENTS_LIMIT);
  }
  return s.view.aplQuery;
}

// The next page, older than the last row shown (the query API's time and row id); live
// updates pause meanwhile, so what was paged to stays put.
async function loadOlder() {
  const s = state.selected;
  const last = state.rows[state.rows.length - 1];
  if (!s || s.kind !== "dataset" || !last || !last._rowId) return;
  $("live").checked = false;
  try {
    const made = await api("POST", "/local/search", { dataset: s.name, q: state.search,
      range: state.range, after: { _time: last._time, _rowId: last._rowId } });
    let rows = await query(made.apl);
    if (s !== state.selected) return;
    rows = rows.map(compact);
    $("query").textContent = made.apl;
    state.rows = state.rows.concat(rows);
    state.signature = JSON.stringify(state.rows);
    state.more = rows.length >= EVENTS_LIMIT;
    renderEvents();
    setStatus("paused · " + state.rows.length + " events shown");
  } catch (err) { handleError(err); }
}

async function refreshEvents() {
  const apl = currentQuery();
  if (!apl) return;
  if (state.rows.length > EVENTS_LIMIT) return; // paged past the first page: kept as is
  $("query").textContent = apl;
  const notice = $("notice");
  const asked = state.selected;
  try {
    let rows = await query(apl);
    if (asked !== state.selected) return; // the user moved on meanwhile
    if (rows.every((r) => "_sysTime" in r)) rows = rows.map(compact);
    notice.hidden = true;
    // Re-render only on a change: a table rebuilt every poll would lose the reader's text
    // selection and hover, and flicker.
    const signature = JSON.stringify(rows);
    if (signature !== state.signature) {
      state.signature = signature;
      state.rows = rows;
      state.more = state.selected.kind === "dataset" && rows.length >= EVENTS_LIMIT;
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
      drawChart([]);
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
  const rows = state.rows;
  // Whole events carry the service's _sysTime; an aggregate's rows (even by _time) do not:
  // they read as a table, and as a chart when they are counts (drawChart).
  const eventsLike = rows.length === 0 || rows.every((r) => "_sysTime" in r);
  drawChart(eventsLike ? [] : rows);
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
  let ordered = rows;
  const groupHeads = new Map(); // the first row of each group -> [value, size]
  if (eventsLike && state.group) {
    // One request's (or trace's) events together, the group with the newest event first.
    const groups = new Map();
    for (const row of rows) {
      const v = row[state.group] === undefined ? "(none)" : text(row[state.group]);
      if (!groups.has(v)) groups.set(v, []);
      groups.get(v).push(row);
    }
    ordered = [];
    for (const [v, members] of groups) {
      groupHeads.set(members[0], [v, members.length]);
      ordered.push(...members);
    }
  }
  for (const row of ordered) {
    if (groupHeads.has(row)) {
      const [v, size] = groupHeads.get(row);
      body.append(el("tr", { class: "group" }, el("td", { colspan: "4",
        text: `${state.group} = ${v} · ${size} event${size === 1 ? "" : "s"}` })));
    }
    const key = rowKey(row);
    const tr = el("tr", { class: "row", "data-row-id": key });
    if (!firstRender && !state.seen.has(key)) tr.classList.add("fresh");
    if (state.selectedRow === key) tr.classList.add("selected");
    if (eventsLike) {
      const level = levelOf(row);
      const [messageKey, message] = messageOf(row);
      const own = [], code = [];
      for (const [k, v] of Object.entries(row)) {
        if (SYSTEM.has(k) || k === "level" || k === messageKey) continue;
        if (TRACE_FIELDS.includes(k)) continue; // shown as a trace in the event's pane
        (CODE_FIELDS.includes(k) ? code : own).push(k + "=" + text(v));
      }
      const traced = TRACE_FIELDS.some((k) => typeof row[k] === "string");
      tr.append(
        el("td", { class: "time", title: text(row._time), text: fmtTime(row._time) }),
        el("td", {}, el("span", { class: "level " + (level || "none"),
          text: text(row.level || "—") })),
        el("td", { class: "message", text: text(message) + (traced ? "  ⚠ trace" : "") }),
        el("td", { class: "fields", text: [...own, ...code].join("  ") }));
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
  $("empty").textContent = state.search || state.range !== "all"
    ? "no events match the search" : "no events";
  $("older").hidden = !state.more;
  if (state.selectedRow) {
    const row = rows.find((r) => rowKey(r) === state.selectedRow);
    if (row && $("detail").hidden) showDetail(row, state.selectedRow);
  }
}

function showDetail(row, key) {
  state.selectedRow = key;
  writeHash();
  // A traceback reads as one, with its lines, not as a JSON string full of \n.
  const traces = $("detail-traces");
  traces.replaceChildren();
  for (const k of TRACE_FIELDS) {
    if (typeof row[k] === "string" && row[k]) {
      traces.append(el("h3", { text: k }), el("pre", { class: "trace", text: row[k] }));
    }
  }
  traces.hidden = !traces.childElementCount;
  state.detailRow = row;
  const key2 = ["request_id", "trace_id"].find((k) => typeof row[k] === "string" && row[k]);
  $("detail-request").hidden = !key2 || state.selected.kind !== "dataset";
  $("detail-request").textContent = key2 === "trace_id" ? "its trace" : "its request";
  $("detail-around").hidden = state.selected.kind !== "dataset";
  $("detail-json").textContent = JSON.stringify(row, null, 2);
  $("detail").hidden = false;
  for (const tr of document.querySelectorAll("#events tr.row")) {
    tr.classList.toggle("selected", tr.dataset.rowId === key);
  }
}

// ------------------------------------------------------------------ charts

// An aggregate's answer as a chart: over time (a _time column) as bars along time, else one
// bar per group; each numeric column is a series (its bars side by side).
function drawChart(rows) {
  const fig = $("chart");
  if (!rows.length) { fig.hidden = true; fig.replaceChildren(); return; }
  const names = Object.keys(rows[0]);
  const series = names.filter((k) => k !== "_time" && rows.every((r) => typeof r[k] === "number"
    || r[k] === null));
  if (!series.length) { fig.hidden = true; fig.replaceChildren(); return; }
  const overTime = names.includes("_time");
  const groups = names.filter((k) => k !== "_time" && !series.includes(k));
  const label = (r) => overTime ? fmtTime(r._time).replace(/\.0+(Z?)$/, "$1")
    : groups.map((g) => String(r[g])).join(" · ") || "all";
  const points = overTime ? [...rows].sort((a, b) => String(a._time) < String(b._time) ? -1 : 1)
    : rows;
  const max = Math.max(1, ...points.flatMap((r) => series.map((k) => r[k] || 0)));
  const W = 1000, H = 140, top = 8, bottom = 22, left = 40;
  const plotH = H - top - bottom;
  const slot = (W - left) / points.length;
  const barW = Math.max(1, (slot - 2) / series.length);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
    "aria-label": series.join(", ") + (overTime ? " over time" : " by " + groups.join(", ")) });
  const text = (x, y, str, anchor) => {
    const t = svg("text", { x, y, "font-size": 10, fill: "#4b5563", "text-anchor": anchor });
    t.textContent = str;
    root.append(t);
  };
  text(left - 4, top + 8, String(max), "end");
  text(left - 4, H - bottom, "0", "end");
  const palette = ["#4c6ef5", "#2f9e44", "#e8a317", "#e03131", "#9c36b5"];
  points.forEach((r, i) => {
    series.forEach((k, j) => {
      const v = r[k] || 0;
      const h = (v / max) * plotH;
      const rect = svg("rect", { x: left + i * slot + 1 + j * barW, y: H - bottom - h,
        width: Math.max(1, barW - 1), height: h, fill: palette[j % palette.length],
        "data-series": k, "data-label": label(r), "data-value": v });
      const title = svg("title");
      title.textContent = `${label(r)} ${k}: ${v}`;
      rect.append(title);
      root.append(rect);
    });
  });
  if (points.length) {
    text(left, H - 6, label(points[0]), "start");
    if (points.length > 1) text(W, H - 6, label(points[points.length - 1]), "end");
  }
  const legend = el("div", { class: "legend" });
  series.forEach((k, j) => {
    const sw = el("span", { class: "swatch" });
    sw.style.background = palette[j % palette.length];
    legend.append(el("span", {}, sw, k));
  });
  fig.replaceChildren(root, legend);
  fig.hidden = false;
}

// ------------------------------------------------------------------ the query editor

function openEditor(open) {
  $("editor").hidden = !open;
  $("editor-toggle").setAttribute("aria-expanded", String(open));
  if (open) {
    const box = $("editor-apl");
    if (!box.value) box.value = currentQuery() || "";
    box.focus();
  }
}

function runEditor() {
  const apl = $("editor-apl").value.trim();
  if (!apl) return;
  $("editor-said").textContent = "";
  select({ kind: "query", apl });
}

async function saveEditor() {
  const apl = $("editor-apl").value.trim();
  const name = $("editor-name").value.trim();
  if (!apl || !name) { $("editor-said").textContent = "name the view and write its query"; return; }
  const m = apl.match(/^\s*\[?'?"?([^'"\]|\s]+)/);
  try {
    const view = await api("POST", "/v2/views", { name, aplQuery: apl,
      datasets: m ? [m[1]] : [], description: "" });
    $("editor-said").textContent = "saved as view " + view.name;
    await refreshViews();
    select({ kind: "view", view });
  } catch (err) {
    $("editor-said").textContent = err.message;
  }
}

// ------------------------------------------------------------------ facets

// A search term for field = value, quoted when it holds a space or a quote.
function term(field, value) {
  const v = String(value);
  return field + ":" + (/[\s"]/.test(v) ? JSON.stringify(v) : v);
}

function addTerm(t) {
  const box = $("filter");
  box.value = (box.value.trim() + " " + t).trim();
  state.search = box.value;
  recompute();
}

async function refreshFacets() {
  const s = state.selected;
  const panel = $("facets");
  if (!s || s.kind !== "dataset") {
    panel.replaceChildren(el("p", { class: "muted", text: "—" }));
    return;
  }
  try {
    const got = await api("POST", "/local/facets",
      { dataset: s.name, q: state.search, range: state.range });
    if (s !== state.selected) return;
    panel.replaceChildren();
    if (!got.fields.length) panel.append(el("p", { class: "muted", text: "no fields" }));
    for (const f of got.fields) {
      const list = el("ul", { class: "values" });
      for (const [value, count] of f.values) {
        const inBtn = el("button", { type: "button", class: "in", "data-field": f.name,
          title: "only events with " + term(f.name, value), text: String(value) });
        const outBtn = el("button", { type: "button", class: "out", "aria-label":
          "leave out " + term(f.name, value), text: "−" });
        inBtn.addEventListener("click", () => addTerm(term(f.name, value)));
        outBtn.addEventListener("click", () => addTerm("-" + term(f.name, value)));
        list.append(el("li", {}, inBtn, el("span", { class: "n", text: String(count) }), outBtn));
      }
      panel.append(el("div", { class: "facet" },
        el("div", { class: "facet-name", text: f.name + " (" + f.present + ")" }), list));
    }
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 400)) handleError(err);
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
    // The range chosen (a custom one too), or (all time) the hour up to the newest event.
    const custom = customRange(state.range);
    const width = custom ? (custom[1] - custom[0]) / 1e3 : (RANGE_SECONDS[state.range] || 3600);
    let end = custom ? custom[1] : Date.now();
    if (newest.length && state.range === "all") {
      const t = Date.parse(newest[0]._time);
      if (!Number.isNaN(t) && t < end - width * 1e3) end = t + 1000;
    }
    const start = end - width * 1e3;
    const [seconds, span] = SPANS.find(([sec]) => width / sec <= 60) || SPANS[SPANS.length - 1];
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
  label(left, H - 4, fmtTime(first), "start");
  label(W, H - 4, fmtTime(end), "end");
  state.hist = { first, end, binMs, left, W, barW };
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
      title.textContent = `${fmtTime(first + i * binMs)} ${level}: ${n}`;
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
  if (!present.size) legend.append(el("span", { text: "no events in this range" }));
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
  const params = hashParams();
  state.wanted = { dataset: params.dataset || null, view: params.view || null,
    event: params.event || null, apl: params.apl || null };
  state.search = params.q || "";
  state.range = RANGE_SECONDS[params.range] || customRange(params.range) ? params.range : "all";
  state.tz = params.tz === "local" ? "local" : "utc";
  state.group = params.group || "";
  state.selected = null;
  $("filter").value = state.search;
  setRangeOption();
  $("tz").value = state.tz;
  $("group").value = state.group;
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
  state.timers.push(setInterval(() => {
    if ($("live").checked) { refreshHistogram(); refreshFacets(); }
  }, HISTOGRAM_EVERY_MS));
}

document.addEventListener("DOMContentLoaded", () => {
  let typing = null;
  $("filter").addEventListener("input", (e) => {
    state.search = e.target.value.trim();
    $("notice").hidden = true;
    clearTimeout(typing);
    typing = setTimeout(recompute, 300); // one query when the typing pauses
  });
  $("older").addEventListener("click", loadOlder);
  // From one event: every event of the minute around it (the debug lines too), or every event
  // of its request or trace.
  $("detail-around").addEventListener("click", () => {
    const t = Date.parse(state.detailRow && state.detailRow._time);
    if (Number.isNaN(t)) return;
    state.range = new Date(t - 60e3).toISOString() + "/" + new Date(t + 60e3).toISOString();
    state.search = "";
    $("filter").value = "";
    setRangeOption();
    recompute();
    refreshHistogram();
  });
  $("detail-request").addEventListener("click", () => {
    const row = state.detailRow || {};
    const k = ["request_id", "trace_id"].find((f) => typeof row[f] === "string" && row[f]);
    if (!k) return;
    state.search = term(k, row[k]);
    $("filter").value = state.search;
    state.range = "all";
    setRangeOption();
    recompute();
  });
  $("editor-toggle").addEventListener("click", () => openEditor($("editor").hidden));
  $("editor").addEventListener("submit", (e) => { e.preventDefault(); runEditor(); });
  $("editor-apl").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); runEditor(); }
  });
  $("editor-save").addEventListener("click", saveEditor);
  // Live updates pause while the reader scrolls down the events, and resume at the top.
  $("events-wrap").addEventListener("scroll", (e) => {
    const down = e.target.scrollTop > 40;
    if (down && $("live").checked) { $("live").checked = false; state.autoPaused = true; }
    if (!down && state.autoPaused && state.rows.length <= EVENTS_LIMIT) {
      $("live").checked = true;
      state.autoPaused = false;
    }
  });
  $("tz").addEventListener("change", (e) => {
    state.tz = e.target.value;
    writeHash();
    setRangeOption();
    state.signature = "";
    renderEvents();
    refreshHistogram();
  });
  $("group").addEventListener("change", (e) => {
    state.group = e.target.value;
    writeHash();
    renderEvents();
  });
  // Drag across the histogram to zoom to that time.
  let dragFrom = null;
  const toTime = (e) => {
    const h = state.hist;
    const box = $("histogram").querySelector("svg").getBoundingClientRect();
    const x = (e.clientX - box.left) / box.width * h.W;
    return h.first + Math.max(0, (x - h.left) / h.barW) * h.binMs;
  };
  $("histogram").addEventListener("mousedown", (e) => {
    if (state.hist && e.target.closest("svg")) { dragFrom = toTime(e); e.preventDefault(); }
  });
  window.addEventListener("mouseup", (e) => {
    if (dragFrom === null) return;
    const to = toTime(e);
    const [a, b] = [Math.min(dragFrom, to), Math.max(dragFrom, to)];
    dragFrom = null;
    if (b - a < (state.hist.binMs / 2)) return; // a click, not a drag
    const bin = state.hist.binMs;
    const start = Math.floor(a / bin) * bin, end = Math.ceil(b / bin) * bin;
    state.range = new Date(start).toISOString() + "/" + new Date(end).toISOString();
    setRangeOption();
    recompute();
    refreshHistogram();
  });
  $("range").addEventListener("change", (e) => {
    state.range = e.target.value;
    recompute();
    refreshHistogram();
  });
  $("detail-close").addEventListener("click", () => {
    $("detail").hidden = true;
    state.selectedRow = null;
    writeHash();
    for (const tr of document.querySelectorAll("#events tr.selected")) {
      tr.classList.remove("selected");
    }
  });
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("login-token").value.trim();
    if (token) location.hash = "token=" + encodeURIComponent(token);
  });
  // A link pasted into the address bar (another dataset, search or token): start over.
  window.addEventListener("hashchange", start);
  start();
});
