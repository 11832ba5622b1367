// The local service's page: plain JavaScript, no build step, no external assets.
// Everything it shows comes from the service's API (the public query API, and the few
// /local/ helpers that turn the search box into APL and compute facets), authenticated with
// the token from the address's fragment (#token=...), which the browser never sends.
//
// Each panel (events, histogram, fields, datasets, views, the event pane) has at most one
// request in flight: a newer one aborts the older (AbortController; the service stops the
// query when its client hangs up), and an answer that belongs to an older query is dropped.
// Live mode asks only for what is new, waits longer while the service is slow, and rests
// while the tab is hidden.
"use strict";

const EVENTS_LIMIT = 200;
// Live mode's pace (ms). A panel polls again this long after its last answer, or five times
// as long as that answer took, whichever is longer: a slow service is asked less often.
// Together, when idle, under one request a second.
const EVENTS_EVERY_MS = 2000;
const SIDEBAR_EVERY_MS = 10000;
const HISTOGRAM_EVERY_MS = 5000;
const FACETS_EVERY_MS = 30000;
const VIEWS_EVERY_MS = 30000;
const QUERY_EVERY_MS = 10000; // an APL query or a view, re-run whole
const SLOW_FACTOR = 5;
// New events are asked for from this long before the last time the page asked: an event
// that arrives a little late (batched by its sender) still shows up.
const LIVE_OVERLAP_MS = 60 * 1000;
const MORE_TIME_S = 60; // "run again with more time": the longest the service allows
const LEVELS = ["debug", "info", "warning", "error", "critical"];
const LEVEL_COLOURS = { debug: "#8b95a5", info: "#2f9e44", warning: "#e8a317",
  error: "#e03131", critical: "#9c36b5", other: "#4c6ef5" };
const PALETTE = ["#4c6ef5", "#2f9e44", "#e8a317", "#e03131", "#9c36b5", "#1098ad", "#f76707",
  "#74b816", "#d6336c", "#5c7cfa", "#0ca678", "#ae3ec9"];
const MAX_SERIES = 12;
// An aggregate's table shows its first rows at once, the rest on a click: laying out a
// day's p95 by path (1,100 rows) took 55-85 ms of the second it had.
const TABLE_FIRST = 100;
const SYSTEM = new Set(["_time", "_sysTime", "_rowId"]);
// Where the code ran: shown after the application's own fields, which say what happened.
const CODE_FIELDS = ["logger", "module", "function", "line", "file", "process", "thread"];
const TRACE_FIELDS = ["exception", "exception.stacktrace", "stack", "stack_trace", "traceback",
  "error.stack"];
// "Its request" / "its trace" look this far either side of the event first; "around it" a
// minute. Each can widen on demand.
const CONTEXT_WINDOWS = { around: [60e3, 5 * 60e3, 3600e3],
  request: [15 * 60e3, 3600e3, 24 * 3600e3] };
const RANGE_SECONDS = { "5m": 300, "15m": 900, "1h": 3600, "24h": 86400, "7d": 604800 };

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
  selected: null, // {kind: "dataset", name} | {kind: "view", view} | {kind: "query", apl}
  rows: [],
  more: false,
  seen: new Set(),
  selectedRow: null, // the key (_rowId) of the event opened
  detailRow: null,
  linkEvent: null, // {time, id} of an event a link names, until it is shown
  search: "",
  range: "all", // all, 5m, 15m, 1h, 24h, 7d, or START/END (UTC)
  plan: null, // the service's queries for the search and the range (/local/search)
  wanted: null, // what the address asks to show, until the lists are known
  tz: "utc",
  group: "",
  columns: [], // fields shown as columns of their own
  context: null, // {kind, label, t, width, back: {search, range}} after "its request" etc.
  hist: null, // the histogram's bins and scale
  facets: null, // the fields panel's last answer
  fieldsInfo: null, // the dataset's fields (for completion): {dataset, at, fields}
  timeout: null, // seconds for the next run of the query (after "run again with more time")
  gen: 0, // bumps with every change of what is asked: answers of older ones are dropped
};

// ------------------------------------------------------------------ small helpers

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

function pad(n, w) { return String(n).padStart(w || 2, "0"); }

// One time convention on the whole page: UTC (as stored) or the browser's local time.
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

function fmtSpan(ms) {
  if (ms % 86400e3 === 0) return ms / 86400e3 + (ms === 86400e3 ? " day" : " days");
  if (ms % 3600e3 === 0) return ms / 3600e3 + (ms === 3600e3 ? " hour" : " hours");
  if (ms % 60e3 === 0) return ms / 60e3 + (ms === 60e3 ? " minute" : " minutes");
  return ms / 1e3 + " s";
}

function iso(ms) { return new Date(ms).toISOString(); }

function source(name) {
  return "['" + name.replace(/\\/g, "\\\\").replace(/'/g, "\\'") + "']";
}

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function levelOf(row) {
  const level = String(row.level || row.severity || "").toLowerCase();
  return level === "warn" ? "warning" : level === "fatal" ? "critical" : level;
}

function rowKey(row) {
  return row._rowId || JSON.stringify(row);
}

// Newest first: by time, then by the service's row id (events at one instant keep an order).
function newerFirst(a, b) {
  if (a._time !== b._time) return a._time < b._time ? 1 : -1;
  return String(a._rowId) < String(b._rowId) ? 1 : -1;
}

// A custom range ("START/END", UTC), as [startMs, endMs], or null.
function customRange(range) {
  const [a, b] = String(range).split("/");
  if (b === undefined) return null;
  const start = Date.parse(a), end = Date.parse(b);
  return Number.isNaN(start) || Number.isNaN(end) ? null : [start, end];
}

// The range as the query API's startTime/endTime (none for all time).
function rangeTimes() {
  const custom = customRange(state.range);
  if (custom) return { startTime: iso(custom[0]), endTime: iso(custom[1]) };
  if (RANGE_SECONDS[state.range]) return { startTime: "now-" + state.range };
  return {};
}

// ------------------------------------------------------------------ the address

function tokenFromHash() {
  // Not URLSearchParams: it would read a "+" in a token as a space.
  const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (!m) return "";
  try { return decodeURIComponent(m[1]); } catch (e) { return m[1]; }
}

function hashParams() {
  const out = {};
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    const i = part.indexOf("=");
    if (i <= 0) continue;
    try { out[part.slice(0, i)] = decodeURIComponent(part.slice(i + 1)); } catch (e) { /* skip */ }
  }
  return out;
}

// What is shown, as address parameters (the token aside): dataset or view or query, the
// search, the range, the event opened, ...
function addressParts() {
  const parts = [];
  const s = state.selected;
  if (s && s.kind === "dataset") parts.push("dataset=" + encodeURIComponent(s.name));
  if (s && s.kind === "view") parts.push("view=" + encodeURIComponent(s.view.id));
  if (s && s.kind === "query") parts.push("apl=" + encodeURIComponent(s.apl));
  if (state.search) parts.push("q=" + encodeURIComponent(state.search));
  if (state.range !== "all") parts.push("range=" + encodeURIComponent(state.range));
  if (state.tz !== "utc") parts.push("tz=" + state.tz);
  if (state.group) parts.push("group=" + encodeURIComponent(state.group));
  if (state.columns.length) parts.push("cols=" + encodeURIComponent(state.columns.join(",")));
  const ev = state.detailRow;
  if (ev && ev._time && ev._rowId) {
    parts.push("event=" + encodeURIComponent(ev._time + "~" + ev._rowId));
  } else if (state.linkEvent) {
    parts.push("event=" + encodeURIComponent(state.linkEvent.time + "~" + state.linkEvent.id));
  }
  return parts;
}

// Each state a user makes is an entry of the browser's history (Back and Forward step
// through them within the page: restore()); the page's own corrections (the first dataset
// chosen, a state restored by Back) replace the entry they are in.
function writeHash(replace) {
  const hash = "#" + ["token=" + encodeURIComponent(state.token), ...addressParts()].join("&");
  if (location.hash === hash) return;
  state.lastHash = hash;
  if (replace || state.restoring || !state.shown) history.replaceState(null, "", hash);
  else history.pushState(null, "", hash);
}

// Back, Forward, or a link pasted into the address bar: the state the address names, in
// place (no new entry); another token signs in again from the start.
function restore() {
  if (location.hash === state.lastHash) return; // popstate and hashchange: one step, once
  state.lastHash = location.hash;
  const params = hashParams();
  const s = state.selected;
  const token = tokenFromHash();
  if (!state.token || !s || (token && token !== state.token)) { start(); return; }
  state.restoring = true;
  try {
    state.search = params.q || "";
    $("filter").value = state.search;
    state.range = RANGE_SECONDS[params.range] || customRange(params.range) ? params.range : "all";
    state.tz = params.tz === "local" ? "local" : "utc";
    $("tz").value = state.tz;
    state.group = params.group || "";
    $("group").value = state.group;
    state.columns = params.cols ? params.cols.split(",").filter(Boolean) : [];
    state.context = null;
    let event = null;
    if (params.event) {
      const i = params.event.lastIndexOf("~");
      if (i > 0) event = { time: params.event.slice(0, i), id: params.event.slice(i + 1) };
    }
    if (params.dataset && !(s.kind === "dataset" && s.name === params.dataset)) {
      state.wanted = { event };
      select({ kind: "dataset", name: params.dataset });
    } else if (params.apl && !(s.kind === "query" && s.apl === params.apl)) {
      $("editor-apl").value = params.apl;
      select({ kind: "query", apl: params.apl });
    } else if (params.view && !(s.kind === "view" && s.view.id === params.view)) {
      start();
    } else {
      const open = state.detailRow;
      if (!event && (open || state.linkEvent)) closeDetail();
      else if (event && s.kind === "dataset" && !(open && open._rowId === event.id)) {
        state.linkEvent = event;
        openLinkedEvent(event);
      }
      recompute();
    }
  } finally {
    state.restoring = false;
  }
}

// An event's own link: its dataset, its time and id, and the minute around it as the range;
// no search (it opens whatever the search), and no token (who opens it signs in).
function eventLink(row) {
  const t = Date.parse(row._time);
  const start = Math.floor(t / 60e3) * 60e3;
  const parts = ["dataset=" + encodeURIComponent(state.selected.name),
    "range=" + encodeURIComponent(iso(start) + "/" + iso(start + 60e3)),
    "event=" + encodeURIComponent(row._time + "~" + row._rowId)];
  return location.origin + location.pathname + "#" + parts.join("&");
}

// ------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, message, data) {
    super(message);
    this.status = status;
    this.data = data || {};
    // The service says when a query ran out of time (and how long it may be given).
    this.timedOut = !!this.data.timedOut || /ran longer than/.test(message);
  }
}

async function api(method, path, body, signal) {
  const headers = { Authorization: "Bearer " + state.token };
  // Which panel asks (the service ignores it; it reads well in the browser's tools).
  if (signal && signal.panel) headers["X-Loghandler-Panel"] = signal.panel;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, cache: "no-store", signal,
    body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const said = data && (data.message || data.error);
    throw new ApiError(resp.status, said || ("HTTP " + resp.status), data);
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

// A query through the public API: {rows, fields, status}.
async function query(apl, opts, signal) {
  const body = { apl, ...(opts || {}) };
  const answer = await api("POST", "/v1/datasets/_apl?format=tabular", body, signal);
  const table = (answer.tables || []).find((t) => t.name !== "_totals");
  if (!table) return { rows: [], fields: [], status: answer.status || {} };
  const names = table.fields.map((f) => f.name);
  const columns = table.columns || [];
  const n = columns.length ? columns[0].length : 0;
  const rows = [];
  for (let i = 0; i < n; i++) {
    const row = {};
    names.forEach((name, j) => { row[name] = columns[j][i]; });
    rows.push(row);
  }
  return { rows, fields: table.fields, status: answer.status || {} };
}

function setStatus(textValue, bad) {
  const s = $("status");
  s.textContent = textValue;
  s.classList.toggle("bad", !!bad);
}

// Errors that are not one panel's: a refused token, or a service out of reach.
function handleError(err) {
  if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
    showLogin("The service did not accept this token.");
    return true;
  }
  if (!(err instanceof ApiError)) {
    setStatus("cannot reach the service: " + err.message, true);
    return true;
  }
  return false;
}

// ------------------------------------------------------------------ panels

// One part of the page that asks the service for something: at most one request in flight
// (a new one aborts the old, whose answer is then ignored), a loading state while it runs.
class Panel {
  constructor(name, elementId) {
    this.name = name;
    this.elementId = elementId;
    this.ctrl = null;
    this.gen = 0;
    this.lastMs = 0; // how long the last answer took: live mode waits longer after a slow one
    this.due = 0; // when live mode asks again (performance.now() ms)
  }

  get node() { return this.elementId ? $(this.elementId) : null; }

  get busy() { return this.ctrl !== null; }

  abort() {
    if (this.ctrl) this.ctrl.abort();
    this.ctrl = null;
    this.gen++;
    this.show(false, false);
  }

  show(busy, stale) {
    const node = this.node;
    if (!node) return;
    node.classList.toggle("busy", busy);
    node.classList.toggle("stale", stale);
    node.setAttribute("aria-busy", String(busy));
  }

  // Run ``work(signal)``; ``apply(answer)`` only if no newer run started meanwhile. A
  // visible run (a new query, not a live refresh) hides what the panel showed until then.
  async run(work, apply, fail, visible) {
    if (this.ctrl) this.ctrl.abort();
    const ctrl = new AbortController();
    ctrl.signal.panel = this.name;
    this.ctrl = ctrl;
    const gen = ++this.gen;
    // A background run (live mode) keeps the panel as it is: what it shows is still the
    // answer to what is asked.
    if (visible) this.show(true, true);
    const began = performance.now();
    try {
      const answer = await work(ctrl.signal);
      if (gen !== this.gen) return;
      this.lastMs = performance.now() - began;
      this.ctrl = null;
      if (visible) this.show(false, false);
      apply(answer);
    } catch (err) {
      if (gen !== this.gen || err.name === "AbortError") return;
      this.lastMs = performance.now() - began;
      this.ctrl = null;
      if (visible) this.show(false, false);
      if (!handleError(err) && fail) fail(err);
    }
  }

  // Live mode: when to ask again after this answer.
  schedule(every) {
    this.due = performance.now() + Math.max(every, SLOW_FACTOR * this.lastMs);
  }
}

const panels = {
  datasets: new Panel("datasets", "datasets"),
  views: new Panel("views", "views"),
  plan: new Panel("plan", null),
  events: new Panel("events", "events-wrap"),
  histogram: new Panel("histogram", "histogram"),
  facets: new Panel("facets", "facets"),
  detail: new Panel("detail", "detail"),
  fields: new Panel("fields", null),
};

// A panel's message in place of its content: a time-out says so and what to do.
// ``again``: a panel that cannot be given more time is offered to try again.
function panelMessage(node, err, rerun, again) {
  node.replaceChildren();
  const p = el("p", { class: "panel-state bad", role: "status" });
  if (err.timedOut) {
    const limit = err.data.timeout ? err.data.timeout + " s" : "its time";
    p.append("The query timed out (ran longer than " + limit + "): narrow the time range or "
      + "the search. ");
    const more = err.data.maxTimeout || MORE_TIME_S;
    if (rerun && (!err.data.timeout || err.data.timeout < more)) {
      const btn = el("button", { type: "button", class: "more-time",
        text: "Run again with " + more + " s" });
      btn.addEventListener("click", () => rerun(more));
      p.append(btn);
    }
  } else {
    p.append("The query failed: " + err.message + " ");
  }
  if (again && !rerun) {
    const btn = el("button", { type: "button", class: "more-time", text: "Try again" });
    btn.addEventListener("click", () => again());
    p.append(btn);
  }
  node.append(p);
}

// ------------------------------------------------------------------ sidebar

function refreshDatasets() {
  panels.datasets.run((signal) => api("GET", "/local/datasets", undefined, signal),
    (list) => {
      panels.datasets.schedule(SIDEBAR_EVERY_MS);
      drawDatasets(list);
    }, () => panels.datasets.schedule(SIDEBAR_EVERY_MS));
}

// The token: in sessionStorage (gone with the tab), in localStorage only when the user asked
// to be remembered (another program served later on this origin could read it there).
function keepToken(token, remember) {
  try {
    if (remember !== undefined) {
      if (remember) localStorage.setItem("loghandler-remember", "1");
      else localStorage.removeItem("loghandler-remember");
    }
    sessionStorage.setItem("loghandler-token", token);
    if (localStorage.getItem("loghandler-remember") === "1") {
      localStorage.setItem("loghandler-token", token);
    } else {
      localStorage.removeItem("loghandler-token");
    }
  } catch (e) { /* storage off: the address keeps the token */ }
}

function keptToken() {
  try {
    if (localStorage.getItem("loghandler-remember") !== "1") {
      localStorage.removeItem("loghandler-token"); // kept by an older page without asking
    }
    return sessionStorage.getItem("loghandler-token")
      || localStorage.getItem("loghandler-token") || "";
  } catch (e) { return ""; }
}

function drawDatasets(list) {
  // The token works: a link opened later in this tab without it (copy link) signs in with
  // it. Kept for the tab's life; across browser restarts only when the user ticked remember.
  keepToken(state.token);
  const ul = $("datasets");
  ul.replaceChildren();
  if (!list.length) ul.append(el("li", { class: "muted", text: "none yet: ingest some events" }));
  for (const d of list) {
    const li = el("li", { "data-dataset": d.name },
      el("span", { class: "name", text: d.name }),
      el("span", { class: "count", text: Number(d.count).toLocaleString() }));
    const s = state.selected;
    if (s && s.kind === "dataset" && s.name === d.name) li.classList.add("active");
    li.addEventListener("click", () => select({ kind: "dataset", name: d.name }));
    ul.append(li);
  }
  const names = list.map((d) => d.name);
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

function refreshViews() {
  panels.views.run((signal) => api("GET", "/v2/views", undefined, signal), (views) => {
    panels.views.schedule(VIEWS_EVERY_MS);
    const ul = $("views");
    ul.replaceChildren();
    if (!views.length) ul.append(el("li", { class: "muted", text: "no views" }));
    for (const view of views) {
      const li = el("li", { "data-view": view.id, title: view.aplQuery },
        el("span", { class: "name", text: view.name || "(unnamed)" }));
      const s = state.selected;
      if (s && s.kind === "view" && s.view.id === view.id) {
        li.classList.add("active");
        s.view = view;
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
  }, () => panels.views.schedule(VIEWS_EVERY_MS));
}

// ------------------------------------------------------------------ what is shown

function select(what) {
  state.selected = what;
  const wanted = state.wanted;
  state.wanted = null;
  state.linkEvent = wanted && wanted.event ? wanted.event : null;
  state.detailRow = null;
  state.selectedRow = null;
  state.context = null;
  state.facets = null;
  $("detail").hidden = true;
  $("panes").classList.remove("with-detail");
  if (what.kind !== "dataset") {
    // A view or a query runs its own APL: the dataset's search does not carry into it.
    state.search = "";
    $("filter").value = "";
  }
  $("filter").disabled = what.kind !== "dataset";
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
  if (what.kind !== "dataset") {
    panels.histogram.abort();
    panels.facets.abort();
    $("facets").dataset.key = "";
    $("facets").replaceChildren(el("p", { class: "muted", text: "—" }));
    $("facets-said").textContent = "";
  }
  if (state.linkEvent && what.kind === "dataset") openLinkedEvent(state.linkEvent);
  recompute();
}

// Everything that depends on the dataset, the search and the range is asked again; what was
// asked before is dropped (its requests aborted, its answers ignored).
function recompute() {
  const s = state.selected;
  if (!s) return;
  state.gen++;
  state.plan = null;
  state.rows = [];
  state.more = false;
  state.hist = null;
  state.histFailed = false;
  state.facetsFailed = false;
  state.histTimeout = null;
  setRangeOption();
  // The address's history entry is written once the requests are on their way: pushState
  // can hold the page for 10-20 ms (a round trip to the browser's process), time the
  // service then spends answering instead of waiting for it.
  const first = !state.shown;
  state.shown = true;
  drawContext();
  $("notice").hidden = true;
  $("query").classList.add("running");
  document.body.dataset.key = currentKey();
  // What answered the last question goes: its chart, its time-out box.
  $("events-state").hidden = true;
  drawChart([], []);
  for (const id of ["histogram", "facets"]) {
    const node = $(id);
    if (node.querySelector(".panel-state")) {
      node.replaceChildren(el("p", { class: "panel-state loading", text: "loading…" }));
    }
  }
  $("facets-said").textContent = "";
  if (s.kind !== "dataset") {
    $("query").textContent = currentApl();
    loadEvents(); // aborts what the events panel had in flight
    writeHash(first);
    return;
  }
  const asked = { dataset: s.name, q: state.search, range: state.range };
  // What was asked before stops now: its requests aborted, its answers never shown.
  for (const p of [panels.events, panels.histogram, panels.facets]) {
    p.abort();
    p.show(true, true);
  }
  panels.plan.run((signal) => api("POST", "/local/search", asked, signal), (plan) => {
    state.plan = plan;
    $("query").textContent = plan.apl;
    loadEvents();
  }, (err) => {
    $("query").classList.remove("running");
    panels.events.show(false, false);
    panels.histogram.show(false, false);
    panels.facets.show(false, false);
    if (err.status === 400) {
      $("notice").textContent = "The search cannot run: " + err.message;
      $("notice").hidden = false;
    }
  });
  writeHash(first);
}

// What is asked, as one string: a panel's answer is shown only under the same key.
function currentKey() {
  const s = state.selected;
  if (!s) return "";
  const what = s.kind === "dataset" ? "dataset:" + s.name
    : s.kind === "view" ? "view:" + s.view.id : "apl:" + s.apl;
  return [what, state.search, state.range].join("|");
}

function currentApl() {
  const s = state.selected;
  if (!s) return null;
  if (s.kind === "query") return s.apl;
  if (s.kind === "view") return s.view.aplQuery;
  return state.plan ? state.plan.apl : null;
}

// ------------------------------------------------------------------ events

function loadEvents(timeout) {
  const apl = currentApl();
  if (!apl) return;
  const key = currentKey();
  const s = state.selected;
  const opts = s.kind === "dataset" ? {} : rangeTimes();
  if (timeout) opts.timeout = timeout;
  $("events-state").hidden = true;
  const asked = Date.now();
  panels.events.run((signal) => query(apl, opts, signal), (answer) => {
    state.polledAt = asked;
    $("query").classList.remove("running");
    let rows = answer.rows;
    const eventsLike = rows.every((r) => "_sysTime" in r);
    if (eventsLike) rows = rows.map(compact);
    state.rows = rows;
    state.fields = answer.fields;
    state.more = s.kind === "dataset" && rows.length >= EVENTS_LIMIT;
    state.seen = new Set();
    renderEvents(key);
    panels.events.schedule(s.kind === "dataset" ? EVENTS_EVERY_MS : QUERY_EVERY_MS);
    liveStatus();
    if (s.kind === "dataset") {
      // The histogram and the fields after the events: the events have the service to
      // themselves, and show first.
      loadHistogram();
      loadFacets();
    }
  }, (err) => {
    $("query").classList.remove("running");
    state.rows = [];
    $("events").replaceChildren();
    $("empty").hidden = true;
    $("older").hidden = true;
    drawChart([], []);
    $("events-wrap").dataset.key = key;
    const box = $("events-state");
    if (err.status === 400 && !err.timedOut && s.kind === "view") {
      box.replaceChildren("This view's query is outside the APL subset the local service "
        + "runs: " + err.message);
      box.className = "panel-state bad";
    } else {
      panelMessage(box, err, (more) => loadEvents(more));
      box.className = "panel-state bad";
    }
    box.hidden = false;
    panels.events.schedule(QUERY_EVERY_MS);
    if (s.kind === "dataset") { loadHistogram(); loadFacets(); }
  }, true);
}

// Live: only what is new, from a little before the newest event shown, merged in.
function pollEvents() {
  const s = state.selected;
  if (!s) return;
  if (s.kind !== "dataset") {
    // An APL query or a view is asked again whole, at the slower pace (aggregations are
    // not incremental).
    const apl = currentApl();
    const key = currentKey();
    const opts = rangeTimes();
    panels.events.run((signal) => query(apl, opts, signal), (answer) => {
      let rows = answer.rows;
      if (rows.every((r) => "_sysTime" in r)) rows = rows.map(compact);
      // A new answer, or the first after a failure (its box goes, whatever the rows).
      if (JSON.stringify(rows) !== JSON.stringify(state.rows) || !$("events-state").hidden) {
        state.rows = rows;
        state.fields = answer.fields;
        renderEvents(key);
      }
      panels.events.schedule(QUERY_EVERY_MS);
      liveStatus();
    }, () => panels.events.schedule(QUERY_EVERY_MS));
    return;
  }
  if (!state.plan || state.rows.length > EVENTS_LIMIT) return;
  const key = currentKey();
  // Since the last time it asked (not since the newest event shown, which for a rare search
  // may be hours ago): a poll reads the last minute or so of the dataset, however big.
  const asked = Date.now();
  const opts = { startTime: iso((state.polledAt || asked) - LIVE_OVERLAP_MS) };
  panels.events.run((signal) => query(state.plan.apl, opts, signal), (answer) => {
    state.polledAt = asked;
    panels.events.schedule(EVENTS_EVERY_MS);
    const known = new Set(state.rows.map(rowKey));
    const fresh = answer.rows.map(compact).filter((r) => !known.has(rowKey(r)));
    if (fresh.length) {
      state.rows = state.rows.concat(fresh).sort(newerFirst).slice(0, EVENTS_LIMIT);
      state.more = state.more || state.rows.length >= EVENTS_LIMIT;
      state.newSince = (state.newSince || 0) + fresh.length;
      renderEvents(key);
    }
    dropAged(key);
    liveStatus();
  }, () => panels.events.schedule(EVENTS_EVERY_MS));
}

// Under a relative range (the last 15 minutes), events that age out of it leave the table.
function dropAged(key) {
  const span = RANGE_SECONDS[state.range];
  if (!span) return;
  const from = Date.now() - span * 1e3;
  const kept = state.rows.filter((r) => Date.parse(r._time) >= from);
  if (kept.length !== state.rows.length) {
    state.rows = kept;
    renderEvents(key);
  }
}

function liveStatus() {
  const live = $("live").checked;
  const why = document.hidden ? " (tab hidden)" : "";
  setStatus((live ? "live" + why + " · " : "paused · ") + "updated "
    + new Date().toLocaleTimeString());
}

// The next page, older than the last row shown (by time and row id); live updates pause
// meanwhile, so what was paged to stays put.
function loadOlder() {
  const s = state.selected;
  const last = state.rows[state.rows.length - 1];
  if (!s || s.kind !== "dataset" || !last || !last._rowId) return;
  $("live").checked = false;
  const key = currentKey();
  panels.events.run(async (signal) => {
    const made = await api("POST", "/local/search", { dataset: s.name, q: state.search,
      range: state.range, after: { _time: last._time, _rowId: last._rowId } }, signal);
    return query(made.apl, {}, signal);
  }, (answer) => {
    const rows = answer.rows.map(compact);
    state.rows = state.rows.concat(rows);
    state.more = rows.length >= EVENTS_LIMIT;
    renderEvents(key);
    setStatus("paused · " + state.rows.length + " events shown");
  }, (err) => {
    $("events-state").hidden = false;
    panelMessage($("events-state"), err, null);
  });
}

// Column names of the events table, for whole events: time, level, message, the chosen
// columns, then the other fields.
function renderEvents(key) {
  const table = $("events");
  const rows = state.rows;
  $("events-wrap").dataset.key = key;
  $("events-state").hidden = true;
  // Whole events carry the service's _sysTime; an aggregate's rows (even by _time) do not:
  // they read as a table, and as a chart when they are numbers (drawChart).
  const eventsLike = rows.length === 0 || rows.every((r) => "_sysTime" in r);
  drawChart(eventsLike ? [] : rows, state.fields || []);
  const head = el("thead");
  const body = el("tbody");
  let columns = [];
  const chosen = state.columns;
  // Whole events: columns of fixed widths, the message and the fields cut to fit (the
  // event's pane shows it whole); an aggregate's table sizes its columns to its values.
  table.classList.toggle("whole", eventsLike);
  if (eventsLike) {
    head.append(el("tr", {}, el("th", { class: "time", text: "time" }),
      el("th", { class: "lvl", text: "level" }), el("th", { class: "msg", text: "message" }),
      ...chosen.map((c) => el("th", { class: "col", text: c })),
      el("th", { class: "flds", text: "fields" })));
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
  const span = 4 + chosen.length;
  // An aggregate's rows past TABLE_FIRST wait for "show all" (kept while the query is the
  // same: live mode's refresh does not fold the table again).
  const folded = !eventsLike && rows.length > TABLE_FIRST && state.allRows !== key;
  if (folded) ordered = rows.slice(0, TABLE_FIRST);
  for (const row of ordered) {
    if (groupHeads.has(row)) {
      const [v, size] = groupHeads.get(row);
      body.append(el("tr", { class: "group" }, el("td", { colspan: String(span),
        text: `${state.group} = ${v} · ${size} event${size === 1 ? "" : "s"}` })));
    }
    const rk = rowKey(row);
    const tr = el("tr", { class: "row", "data-row-id": rk });
    if (!firstRender && !state.seen.has(rk)) tr.classList.add("fresh");
    if (state.selectedRow === rk) tr.classList.add("selected");
    if (eventsLike) {
      const level = levelOf(row);
      const [messageKey, message] = messageOf(row);
      const own = [], code = [];
      for (const [k, v] of Object.entries(row)) {
        if (SYSTEM.has(k) || k === "level" || k === messageKey || chosen.includes(k)) continue;
        if (TRACE_FIELDS.includes(k)) continue; // shown as a trace in the event's pane
        (CODE_FIELDS.includes(k) ? code : own).push(k + "=" + text(v));
      }
      const traced = TRACE_FIELDS.some((k) => typeof row[k] === "string");
      tr.append(
        el("td", { class: "time", title: text(row._time), text: fmtTime(row._time) }),
        el("td", {}, el("span", { class: "level " + (level || "none"),
          text: text(row.level || "—") })),
        el("td", { class: "message" }, ...(traced ? [el("span", { class: "traced",
          title: "a traceback: open the event to read it", text: "⚠ trace" }), " "] : []),
        text(message)),
        ...chosen.map((c) => el("td", { class: "col", "data-col": c, text: text(row[c]) })),
        el("td", { class: "fields", text: [...own, ...code].join("  ") }));
    } else {
      for (const c of columns) tr.append(el("td", { text: text(row[c]) }));
    }
    tr.tabIndex = 0; // the keyboard reaches events too: Tab or ↑/↓ to a row, Enter opens it
    tr.addEventListener("click", () => showDetail(row));
    body.append(tr);
  }
  for (const row of rows) state.seen.add(rowKey(row));
  const parts = [head, body];
  if (folded) {
    const all = el("button", { type: "button", id: "all-rows", class: "more-time",
      text: "Show all " + rows.length.toLocaleString() + " rows" });
    all.addEventListener("click", () => { state.allRows = key; renderEvents(key); });
    parts.push(el("tfoot", {}, el("tr", {}, el("td", { colspan: String(columns.length) },
      el("span", { class: "muted", text: "the first " + TABLE_FIRST + " of "
        + rows.length.toLocaleString() + " rows " }), all))));
  }
  table.replaceChildren(...parts);
  $("empty").hidden = rows.length > 0;
  $("empty").textContent = state.search || state.range !== "all"
    ? "no events match the search in this range" : "no events";
  $("older").hidden = !state.more;
  if (state.selectedRow && $("detail").hidden) {
    const row = rows.find((r) => rowKey(r) === state.selectedRow);
    if (row) showDetail(row, true);
  }
}

function showDetail(row, again) {
  const key = rowKey(row);
  state.selectedRow = key;
  state.detailRow = row;
  state.linkEvent = null;
  panels.detail.abort();
  writeHash(again);
  // A traceback reads as one, with its lines, not as a JSON string full of \n.
  const traces = $("detail-traces");
  traces.replaceChildren();
  for (const k of TRACE_FIELDS) {
    if (typeof row[k] === "string" && row[k]) {
      traces.append(el("h3", { text: k }), el("pre", { class: "trace", text: row[k] }));
    }
  }
  traces.hidden = !traces.childElementCount;
  const onDataset = state.selected && state.selected.kind === "dataset";
  const has = (k) => typeof row[k] === "string" && row[k] !== "";
  $("detail-request").hidden = !onDataset || !has("request_id");
  $("detail-trace").hidden = !onDataset || !has("trace_id");
  $("detail-around").hidden = !onDataset || !row._time;
  $("copy-link").hidden = !onDataset || !row._rowId;
  $("detail-said").textContent = "";
  $("detail-json").textContent = JSON.stringify(row, null, 2);
  drawDetailFields(row, onDataset);
  $("detail").hidden = false;
  $("panes").classList.add("with-detail");
  for (const tr of document.querySelectorAll("#events tr.row")) {
    tr.classList.toggle("selected", tr.dataset.rowId === key);
  }
}

// The event as a table of its fields: each with filter for (+), filter out (−) and copy;
// long values wrap. The time first, then the event's own fields in its order.
function drawDetailFields(row, onDataset) {
  const table = $("detail-fields");
  const body = el("tbody");
  const names = Object.keys(row).filter((k) => k !== "_rowId" && k !== "_sysTime");
  for (const name of names) {
    const v = row[name];
    const scalar = typeof v === "string" || typeof v === "number" || typeof v === "boolean";
    const acts = el("td", { class: "acts" });
    if (onDataset && scalar && !SYSTEM.has(name)) {
      const forBtn = el("button", { type: "button", class: "filter-for", "data-field": name,
        title: "only events with " + term(name, v), "aria-label": "filter for " + name,
        text: "+" });
      forBtn.addEventListener("click", () => addTerm(term(name, v)));
      const outBtn = el("button", { type: "button", class: "filter-out", "data-field": name,
        title: "leave out events with " + term(name, v), "aria-label": "filter out " + name,
        text: "−" });
      outBtn.addEventListener("click", () => addTerm("-" + term(name, v)));
      acts.append(forBtn, outBtn);
    }
    const copy = el("button", { type: "button", class: "copy", "data-field": name,
      title: "copy the value", "aria-label": "copy " + name, text: "copy" });
    copy.addEventListener("click", () => copyText(text(v), name));
    acts.append(copy);
    body.append(el("tr", { "data-field": name }, el("th", { text: name }),
      el("td", { class: "value", text: name === "_time" ? fmtTime(v) : text(v) }), acts));
  }
  table.replaceChildren(body);
}

function showTab(which) {
  const json = which === "json";
  $("tab-json").setAttribute("aria-selected", String(json));
  $("tab-fields").setAttribute("aria-selected", String(!json));
  $("detail-json").hidden = !json;
  $("detail-fields").hidden = json;
}

function closeDetail() {
  $("detail").hidden = true;
  $("panes").classList.remove("with-detail");
  state.selectedRow = null;
  state.detailRow = null;
  state.linkEvent = null;
  panels.detail.abort();
  writeHash();
  for (const tr of document.querySelectorAll("#events tr.selected")) {
    tr.classList.remove("selected");
  }
}

// An event a link names (its time and id): fetched by itself, whatever the search shows.
function openLinkedEvent(ev) {
  const t = Date.parse(ev.time);
  if (Number.isNaN(t) || !/^[0-9a-f]{1,32}$/.test(ev.id)) return;
  const s = state.selected;
  const apl = source(s.name) + " | where _rowId == '" + ev.id + "'";
  // Its own instant as the query's range: the service finds it by its time index.
  const opts = { startTime: ev.time, endTime: iso(t + 1) };
  $("detail").hidden = false;
  $("panes").classList.add("with-detail");
  $("detail-said").textContent = "opening the event…";
  $("detail-json").textContent = "";
  $("detail-fields").replaceChildren();
  panels.detail.run((signal) => query(apl, opts, signal), (answer) => {
    const row = answer.rows.map(compact)[0];
    if (!row) {
      writeHash(true);
      $("detail-said").textContent = "This link's event is not in dataset " + s.name
        + " (deleted or trimmed?).";
      return;
    }
    showDetail(row, true);
  }, (err) => { $("detail-said").textContent = "The event could not be read: " + err.message; },
  true);
}

// ------------------------------------------------------------------ context links

// "Around it", "its request", "its trace": a window of time either side of the event, which
// widens on demand; the search before is one click away.
function openContext(kind) {
  const row = state.detailRow;
  if (!row) return;
  const t = Date.parse(row._time);
  if (Number.isNaN(t)) return;
  const back = state.context ? state.context.back : { search: state.search, range: state.range };
  let search = "", label;
  if (kind === "request" || kind === "trace") {
    const field = kind === "request" ? "request_id" : "trace_id";
    search = term(field, row[field]);
    label = (kind === "request" ? "its request" : "its trace") + " (" + search + ")";
  } else {
    label = "every event around it";
  }
  state.context = { kind, label, t, width: 0, back, row };
  applyContext();
}

function applyContext() {
  const c = state.context;
  const windows = CONTEXT_WINDOWS[c.kind === "around" ? "around" : "request"];
  const w = windows[c.width];
  state.range = w === undefined ? "all" : iso(c.t - w) + "/" + iso(c.t + w);
  state.search = c.kind === "around" ? "" : term(c.kind === "request" ? "request_id"
    : "trace_id", c.row[c.kind === "request" ? "request_id" : "trace_id"]);
  $("filter").value = state.search;
  state.selectedRow = rowKey(c.row);
  recompute();
}

function drawContext() {
  const box = $("context");
  const c = state.context;
  if (!c) { box.hidden = true; box.replaceChildren(); return; }
  const windows = CONTEXT_WINDOWS[c.kind === "around" ? "around" : "request"];
  const w = windows[c.width];
  box.replaceChildren(el("span", { text: "Showing " + c.label + ", "
    + (w === undefined ? "at any time" : "within " + fmtSpan(w) + " of the event") + "." }));
  if (c.width < windows.length) {
    const next = windows[c.width + 1];
    const btn = el("button", { type: "button", id: "context-widen",
      text: next === undefined ? "any time" : "widen to " + fmtSpan(next) });
    btn.addEventListener("click", () => { c.width++; applyContext(); });
    box.append(btn);
  }
  const back = el("button", { type: "button", id: "context-back", text: "back to the search" });
  back.addEventListener("click", () => {
    state.search = c.back.search;
    state.range = c.back.range;
    $("filter").value = state.search;
    state.context = null;
    recompute();
  });
  box.append(back);
  box.hidden = false;
}

// ------------------------------------------------------------------ copy buttons

async function copyText(value, what) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(value);
    ok = true;
  } catch (e) {
    // No clipboard API (or no permission): the older way, through a selected text area.
    const area = el("textarea", {});
    area.value = value;
    document.body.append(area);
    area.select();
    try { ok = document.execCommand("copy"); } catch (e2) { ok = false; }
    area.remove();
  }
  $("detail-said").textContent = ok ? what + " copied" : "could not copy: select the text";
  $("detail").dataset.copied = ok ? value : "";
}

// ------------------------------------------------------------------ the chart

// An aggregate's answer as a chart. Over time (a _time column): one series per group (the
// other group columns), lines for values (avg, percentiles, ...) and stacked bars for counts;
// otherwise one bar per group. A legend names the series.
const COUNTS = new Set(["count", "countif", "sum", "dcount"]);

function drawChart(rows, fields) {
  const fig = $("chart");
  if (!rows.length) { fig.hidden = true; fig.replaceChildren(); return; }
  const meta = new Map(fields.map((f) => [f.name, f]));
  const names = Object.keys(rows[0]);
  const numeric = (k) => rows.every((r) => typeof r[k] === "number" || r[k] === null);
  let values = names.filter((k) => k !== "_time" && meta.get(k) && meta.get(k).agg);
  if (!values.length) values = names.filter((k) => k !== "_time" && numeric(k));
  if (!values.length) { fig.hidden = true; fig.replaceChildren(); return; }
  const groups = names.filter((k) => k !== "_time" && !values.includes(k));
  const overTime = names.includes("_time");
  const root = svg("svg", { viewBox: "0 0 1000 200", preserveAspectRatio: "none", role: "img" });
  const legend = el("div", { class: "legend" });
  fig.replaceChildren(root, legend);
  fig.hidden = false;
  if (overTime) drawTimeChart(root, legend, rows, values, groups, meta);
  else drawBarChart(root, legend, rows, values, groups, meta);
}

function axisText(root, x, y, str, anchor) {
  const t = svg("text", { x, y, "font-size": 10, class: "axis", "text-anchor": anchor });
  t.textContent = str;
  root.append(t);
}

function fmtNum(v) {
  if (typeof v !== "number") return String(v);
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(0) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

// The series' colours of one chart, the same in every run: a level's own (as the histogram
// paints it) when the series are levels, else one picked by the series' name. Two names of
// one chart never share a colour while the palette has one free: in the order of their
// names, each takes its own colour, or the next one no other series of the chart took.
const SERIES_PALETTE = ["#4c6ef5", "#1098ad", "#f76707", "#74b816", "#d6336c", "#5c7cfa",
  "#0ca678", "#ae3ec9", "#845ef7", "#495057", "#f59f00", "#1c7ed6"];
function nameHash(name) {
  let h = 0;
  for (const ch of String(name)) h = (Math.imul(h, 31) + ch.codePointAt(0)) >>> 0;
  return h;
}

function seriesColours(names, byLevel) {
  const out = new Map();
  const used = new Set();
  const rest = [];
  for (const name of names) {
    const level = byLevel ? levelOf({ level: name }) : null;
    if (level && LEVELS.includes(level)) {
      out.set(name, LEVEL_COLOURS[level]);
      used.add(LEVEL_COLOURS[level]);
    } else if (!out.has(name)) {
      rest.push(name);
    }
  }
  // Among levels, the first other value takes the histogram's "other" colour.
  const palette = byLevel ? [LEVEL_COLOURS.other, ...SERIES_PALETTE] : SERIES_PALETTE;
  for (const name of [...new Set(rest)].sort()) {
    const own = byLevel ? 0 : nameHash(name) % palette.length;
    let colour = palette[own];
    for (let i = 0; i < palette.length; i++) {
      const c = palette[(own + i) % palette.length];
      if (!used.has(c)) { colour = c; break; }
    }
    out.set(name, colour);
    used.add(colour);
  }
  return out;
}

function isLevelGroup(groups) {
  return groups.length === 1 && /^(level|severity|severity_text)$/i.test(groups[0]);
}

// The unit of a value column, from the field it aggregates (duration_ms: ms).
function unitOf(name, meta) {
  const m = meta && meta.get(name);
  const field = (m && m.agg && m.agg.fields && m.agg.fields[0]) || name;
  if (m && m.agg && ["count", "countif", "dcount"].includes(m.agg.name)) return "events";
  if (/(_ms|Ms|millis)$/.test(field)) return "ms";
  if (/(_us|Us|micros)$/.test(field)) return "µs";
  if (/(_ns|Ns|nanos)$/.test(field)) return "ns";
  if (/(_s|_sec|_secs|_seconds)$/.test(field)) return "s";
  if (/bytes?$/i.test(field)) return "B";
  return "";
}

function withUnit(v, unit) {
  return fmtNum(v) + (unit && unit !== "events" ? " " + unit : "");
}

// Time ticks: the smallest round step that gives at most ``most`` ticks over [t0, t1].
const TICK_STEPS = [1e3, 5e3, 15e3, 30e3, 60e3, 300e3, 900e3, 1800e3, 3600e3, 3 * 3600e3,
  6 * 3600e3, 12 * 3600e3, 86400e3, 7 * 86400e3, 30 * 86400e3];
function timeTicks(t0, t1, most) {
  const step = TICK_STEPS.find((s) => (t1 - t0) / s <= most) || TICK_STEPS[TICK_STEPS.length - 1];
  const out = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
  return { step, ticks: out };
}

function drawTimeChart(root, legend, rows, values, groups, meta) {
  // Series: one per group (and per value column when there are several).
  // One pass over the rows: each bin's time parsed once (a day's p95 by path repeats each
  // of its ~100 times a dozen times), each row's group named once.
  const series = new Map();
  const parsed = new Map();
  for (const r of rows) {
    let t = parsed.get(r._time);
    if (t === undefined) { t = Date.parse(r._time); parsed.set(r._time, t); }
    const group = groups.map((g) => (r[g] === null || r[g] === "" ? "(none)" : text(r[g])))
      .join(" · ");
    for (const v of values) {
      const name = values.length > 1 ? (group ? group + " · " + v : v) : group || v;
      let s = series.get(name);
      if (s === undefined) { s = { name, points: new Map(), total: 0 }; series.set(name, s); }
      const y = r[v];
      if (typeof y === "number") { s.points.set(t, y); s.total += y; }
    }
  }
  const times = [...new Set(parsed.values())].filter((t) => !Number.isNaN(t))
    .sort((a, b) => a - b);
  let all = [...series.values()].sort((a, b) => b.total - a.total);
  const hidden = all.length - MAX_SERIES;
  all = all.slice(0, MAX_SERIES);
  const stacked = values.every((v) => {
    const m = meta.get(v);
    const agg = m && m.agg ? m.agg.name : (v.startsWith("count") ? "count" : "");
    return COUNTS.has(agg);
  });
  const byLevel = isLevelGroup(groups);
  const unit = values.length === 1 ? unitOf(values[0], meta) : "";
  const W = 1000, H = 200, top = 14, bottom = 22, left = 56;
  const plotH = H - top - bottom;
  // A linear time axis: each bin at its own time, so a gap in the data is a gap on the chart.
  let step = Infinity;
  for (let i = 1; i < times.length; i++) step = Math.min(step, times[i] - times[i - 1]);
  if (!Number.isFinite(step) || step <= 0) step = 60e3;
  const t0 = times.length ? times[0] : 0;
  const t1 = (times.length ? times[times.length - 1] : 0) + step;
  const xOf = (t) => left + ((t - t0) / (t1 - t0)) * (W - left);
  const slot = (step / (t1 - t0)) * (W - left);
  let max = 1;
  if (stacked) {
    for (const t of times) max = Math.max(max, all.reduce((a, s) => a + (s.points.get(t) || 0), 0));
  } else {
    // A "(none)" series (the events without the field) does not set the scale of the others.
    const scaled = all.length > 1 ? all.filter((s) => s.name !== "(none)") : all;
    for (const s of scaled) for (const y of s.points.values()) max = Math.max(max, y);
  }
  const yOf = (y) => H - bottom - (Math.min(y, max) / max) * plotH;
  root.setAttribute("aria-label", values.join(", ") + " over time"
    + (groups.length ? " by " + groups.join(", ") : "") + (unit ? " (" + unit + ")" : ""));
  for (const f of [0, 0.5, 1]) {
    const y = H - bottom - f * plotH;
    root.append(svg("line", { x1: left, x2: W, y1: y, y2: y, class: "gridline" }));
    axisText(root, left - 4, y + (f === 1 ? 8 : 0), withUnit(max * f, unit), "end");
  }
  const { ticks } = timeTicks(t0, t1, 6);
  const long = t1 - t0 > 86400e3;
  for (const t of ticks) {
    const x = xOf(t);
    root.append(svg("line", { x1: x, x2: x, y1: H - bottom, y2: H - bottom + 4, class: "gridline tick" }));
    const label = long ? fmtTime(t).slice(0, 16) : fmtTime(t, false).slice(0, 5);
    // A label at an end of the axis stays inside the chart.
    axisText(root, x, H - 6, label, x > W - 40 ? "end" : x < left + 40 ? "start" : "middle");
  }
  const colours = seriesColours(all.map((s) => s.name), byLevel);
  all.forEach((s) => { s.colour = colours.get(s.name); });
  if (stacked) {
    const base = new Map();
    for (const s of all) {
      for (const [t, y] of s.points) {
        const h = (Math.min(y, max) / max) * plotH;
        const b = (base.get(t) || 0) + h;
        base.set(t, b);
        const rect = svg("rect", { x: xOf(t) + 0.5, y: H - bottom - b,
          width: Math.max(1, slot - 1), height: h, fill: s.colour, "data-series": s.name,
          "data-label": fmtTime(t), "data-value": y });
        const title = svg("title");
        title.textContent = `${fmtTime(t)} ${s.name}: ${withUnit(y, unit)}`;
        rect.append(title);
        root.append(rect);
      }
    }
  } else {
    for (const s of all) {
      // A line per series; a missing bin (a gap in time) breaks it.
      let d = "";
      let last = null;
      for (const t of times) {
        const y = s.points.get(t);
        if (y === undefined) { last = null; continue; }
        const x = xOf(t) + slot / 2;
        const pen = last !== null && t - last <= step * 1.5;
        d += (pen ? " L" : " M") + x.toFixed(1) + " " + yOf(y).toFixed(1);
        last = t;
      }
      const path = svg("path", { d: d.trim(), fill: "none", stroke: s.colour,
        "stroke-width": 1.8, "vector-effect": "non-scaling-stroke", "data-series": s.name,
        "data-points": s.points.size });
      const title = svg("title");
      title.textContent = s.name;
      path.append(title);
      root.append(path);
    }
  }
  // Hover: the values of every series at the bin under the pointer.
  const readout = el("span", { class: "readout", role: "status" });
  const cursor = svg("line", { x1: 0, x2: 0, y1: top, y2: H - bottom, class: "cursor",
    visibility: "hidden" });
  root.append(cursor);
  root.addEventListener("mousemove", (e) => {
    const rect = root.getBoundingClientRect();
    const x = (e.clientX - rect.left) / rect.width * W;
    const t = t0 + Math.max(0, (x - left) / (W - left)) * (t1 - t0);
    let near = times[0];
    for (const u of times) if (Math.abs(u - t) < Math.abs(near - t)) near = u;
    if (near === undefined) return;
    cursor.setAttribute("x1", xOf(near) + slot / 2);
    cursor.setAttribute("x2", xOf(near) + slot / 2);
    cursor.setAttribute("visibility", "visible");
    const said = all.filter((s) => s.points.has(near))
      .map((s) => s.name + " " + withUnit(s.points.get(near), unit));
    readout.textContent = fmtTime(near) + " · " + (said.join(" · ") || "no value");
  });
  root.addEventListener("mouseleave", () => { cursor.setAttribute("visibility", "hidden"); });
  for (const s of all) {
    const sw = el("span", { class: "swatch" });
    sw.style.background = s.colour;
    legend.append(el("span", { class: "series", "data-series": s.name }, sw, s.name));
  }
  if (hidden > 0) {
    legend.append(el("span", { class: "more-series", text: `${hidden} more series not drawn `
      + `(the ${MAX_SERIES} largest are)` }));
  }
  legend.append(readout);
}

function drawBarChart(root, legend, rows, values, groups, meta) {
  const W = 1000, H = 200, top = 14, bottom = 22, left = 56;
  const plotH = H - top - bottom;
  const label = (r) => groups.map((g) => (r[g] === null || r[g] === "" ? "(none)"
    : text(r[g]))).join(" · ") || "all";
  const max = Math.max(1, ...rows.flatMap((r) => values.map((k) => r[k] || 0)));
  const slot = (W - left) / rows.length;
  const barW = Math.max(1, (slot - 4) / values.length);
  const unit = values.length === 1 ? unitOf(values[0], meta) : "";
  root.setAttribute("aria-label", values.join(", ") + " by " + (groups.join(", ") || "all")
    + (unit ? " (" + unit + ")" : ""));
  for (const f of [0, 0.5, 1]) {
    const y = H - bottom - f * plotH;
    root.append(svg("line", { x1: left, x2: W, y1: y, y2: y, class: "gridline" }));
    axisText(root, left - 4, y + (f === 1 ? 8 : 0), withUnit(max * f, unit), "end");
  }
  // One colour per group when there is one value column (a legend of groups: a level's own
  // colour for levels), else one per value column.
  const byGroup = values.length === 1;
  const byLevel = isLevelGroup(groups);
  const colours = byGroup ? seriesColours(rows.map(label), byLevel) : seriesColours(values, false);
  const colourOf = (r, k) => colours.get(byGroup ? label(r) : k);
  rows.forEach((r, i) => {
    values.forEach((k, j) => {
      const v = r[k] || 0;
      const h = (v / max) * plotH;
      const rect = svg("rect", { x: left + i * slot + 2 + j * barW, y: H - bottom - h,
        width: Math.max(1, barW - 1), height: h, fill: colourOf(r, k),
        "data-series": byGroup ? label(r) : k, "data-label": label(r), "data-value": v });
      const title = svg("title");
      title.textContent = `${label(r)} ${k}: ${withUnit(v, unit)}`;
      rect.append(title);
      root.append(rect);
    });
    if (rows.length <= 24) axisText(root, left + (i + 0.5) * slot, H - 6, label(r), "middle");
  });
  const LEGEND_MAX = 40;
  const entries = byGroup ? rows.slice(0, LEGEND_MAX).map((r) => [label(r), colourOf(r, values[0])])
    : values.map((k) => [k, colours.get(k)]);
  for (const [name, colour] of entries) {
    const sw = el("span", { class: "swatch" });
    sw.style.background = colour;
    legend.append(el("span", { class: "series", "data-series": name }, sw, name));
  }
  if (byGroup && rows.length > LEGEND_MAX) {
    legend.append(el("span", { class: "more-series", text: `${rows.length - LEGEND_MAX} more `
      + "groups drawn, not named here" }));
  }
}

// ------------------------------------------------------------------ the query editor

function openEditor(open) {
  $("editor").hidden = !open;
  $("editor-toggle").setAttribute("aria-expanded", String(open));
  if (open) {
    const box = $("editor-apl");
    if (!box.value) box.value = currentApl() || "";
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
    refreshViews();
    select({ kind: "view", view });
  } catch (err) {
    $("editor-said").textContent = err.message;
  }
}

// ------------------------------------------------------------------ fields (facets)

// A search term for field = value, quoted when it holds a space or a quote.
function term(field, value) {
  const v = String(value);
  return field + ":" + (/[\s"]/.test(v) || v === "" ? JSON.stringify(v) : v);
}

function addTerm(t) {
  const box = $("filter");
  box.value = (box.value.trim() + " " + t).trim();
  state.search = box.value.trim();
  state.context = null;
  recompute();
}

function loadFacets() {
  const s = state.selected;
  if (!s || s.kind !== "dataset") return;
  const key = currentKey();
  const asked = { dataset: s.name, q: state.search, range: state.range };
  panels.facets.run((signal) => api("POST", "/local/facets", asked, signal), (got) => {
    panels.facets.schedule(FACETS_EVERY_MS);
    state.facets = got;
    state.facetsFailed = false;
    state.facetsNew = state.newSince || 0;
    if (!state.search) {
      state.fieldsInfo = { dataset: s.name, at: Date.now(), fields: got.fields,
        said: facetsSaid(got) };
    }
    drawFacets(key);
    drawColumnPicker();
  }, (err) => {
    panels.facets.schedule(HISTOGRAM_EVERY_MS); // a failure is asked again sooner
    $("facets").dataset.key = key;
    state.facets = null;
    state.facetsFailed = true;
    $("facets-said").textContent = ""; // no header describing what is not shown
    panelMessage($("facets"), err, null, () => loadFacets());
  }, true);
}

function facetsSaid(got) {
  const n = got.rows.toLocaleString();
  if (got.sampled) {
    return "· a sample of " + n + " of " + (got.exact ? "" : "about ")
      + Number(got.matched || 0).toLocaleString() + ", spread evenly over the range";
  }
  return "· of " + n + " event" + (got.rows === 1 ? "" : "s");
}

function drawFacets(key) {
  const got = state.facets;
  const panel = $("facets");
  panel.dataset.key = key;
  panel.replaceChildren();
  if (!got) return;
  $("facets-said").textContent = facetsSaid(got);
  const filter = $("field-filter").value.trim().toLowerCase();
  const fields = got.fields.filter((f) => !filter || f.name.toLowerCase().includes(filter));
  if (!got.fields.length) panel.append(el("p", { class: "muted", text: "no fields" }));
  const shown = filter ? fields : fields.slice(0, 25);
  for (const f of shown) {
    const colBtn = el("button", { type: "button", class: "col", "data-field": f.name,
      "aria-pressed": String(state.columns.includes(f.name)), title: "show as a column",
      text: "col" });
    colBtn.addEventListener("click", () => toggleColumn(f.name));
    const pct = got.rows ? Math.round(100 * f.present / got.rows) : 0;
    const head = el("div", { class: "facet-name" }, el("span", { class: "name", text: f.name,
      title: f.name }), el("span", { class: "pct", text: pct + "%" }), colBtn);
    const facet = el("div", { class: "facet", "data-facet": f.name }, head);
    if (f.high) {
      // An id, a duration, a timestamp: a list of values each seen once says nothing.
      facet.append(el("div", { class: "high", text: (f.distinct >= f.present ? "all " : "≈")
        + Number(f.distinct).toLocaleString() + " distinct values" }));
    } else {
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
      facet.append(list);
    }
    panel.append(facet);
  }
  if (fields.length > shown.length) {
    panel.append(el("p", { class: "more", text: (fields.length - shown.length)
      + " more fields: type in the filter above to find one" }));
  }
  if (filter && !fields.length) panel.append(el("p", { class: "muted", text: "no field matches" }));
}

// ------------------------------------------------------------------ columns

function knownFields() {
  const names = new Set();
  for (const f of (state.facets ? state.facets.fields : [])) names.add(f.name);
  for (const r of state.rows) for (const k of Object.keys(r)) if (!SYSTEM.has(k)) names.add(k);
  for (const c of state.columns) names.add(c);
  return [...names].sort();
}

function drawColumnPicker() {
  const list = $("columns-list");
  if ($("columns").hidden) return;
  const filter = $("columns-filter").value.trim().toLowerCase();
  list.replaceChildren();
  for (const name of knownFields()) {
    if (filter && !name.toLowerCase().includes(filter)) continue;
    const box = el("input", { type: "checkbox", "data-column": name });
    box.checked = state.columns.includes(name);
    box.addEventListener("change", () => toggleColumn(name));
    list.append(el("label", {}, box, " " + name));
  }
}

function toggleColumn(name) {
  const i = state.columns.indexOf(name);
  if (i >= 0) state.columns.splice(i, 1);
  else state.columns.push(name);
  writeHash();
  renderEvents(currentKey());
  drawColumnPicker();
  for (const b of document.querySelectorAll("#facets button.col")) {
    b.setAttribute("aria-pressed", String(state.columns.includes(b.dataset.field)));
  }
}

// ------------------------------------------------------------------ histogram

// The histogram of the search over the range. Live, only its newest bins are asked again
// (from a little before the last answer); under "all time", when the data has grown to many
// more bins than it was planned with, the service plans it again (wider bins).
function loadHistogram(fromMs, replan, timeout) {
  const s = state.selected;
  const plan = state.plan;
  if (!s || s.kind !== "dataset" || !plan || !plan.histogram) return;
  const key = currentKey();
  const partial = fromMs !== undefined && state.hist && state.hist.key === key;
  const asked = Date.now();
  panels.histogram.run(async (signal) => {
    let h = plan.histogram;
    if (replan) {
      const again = await api("POST", "/local/search",
        { dataset: s.name, q: state.search, range: state.range }, signal);
      h = again.histogram;
    }
    const opts = partial ? { startTime: iso(fromMs) } : {};
    if (timeout || state.histTimeout) opts.timeout = timeout || state.histTimeout;
    const answer = await query(h.apl, opts, signal);
    return { h, answer };
  }, ({ h, answer }) => {
    panels.histogram.schedule(HISTOGRAM_EVERY_MS);
    state.histNew = state.newSince || 0;
    state.histFailed = false;
    if (replan) plan.histogram = h;
    let bins;
    if (partial) {
      bins = state.hist.bins; // the older bins stand; the newest are replaced
      for (const t of [...bins.keys()]) if (t >= fromMs) bins.delete(t);
    } else {
      bins = new Map();
    }
    for (const row of answer.rows) {
      const t = Date.parse(row._time);
      const level = LEVELS.includes(levelOf(row)) ? levelOf(row) : "other";
      if (!bins.has(t)) bins.set(t, {});
      const b = bins.get(t);
      b[level] = (b[level] || 0) + row.count_;
    }
    const start = Date.parse(h.start);
    const end = Math.max(Date.parse(h.end), partial || replan ? asked : 0);
    state.hist = { key, bins, start, end, binMs: h.bin_ms, apl: h.apl, until: asked };
    drawHistogram(key);
  }, (err) => {
    panels.histogram.schedule(HISTOGRAM_EVERY_MS);
    $("histogram").dataset.key = key;
    state.hist = null;
    state.histFailed = true; // live mode asks again (at its slower pace after a slow answer)
    panelMessage($("histogram"), err, (more) => {
      state.histTimeout = more;
      loadHistogram(undefined, false, more);
    });
  }, !partial && !replan);
}

function drawHistogram(key) {
  const fig = $("histogram");
  const h = state.hist;
  fig.dataset.key = key;
  const binMs = h.binMs;
  const span = RANGE_SECONDS[state.range];
  const start = span ? Math.max(h.start, h.end - span * 1e3) : h.start;
  const first = Math.floor(start / binMs) * binMs;
  const nbins = Math.max(1, Math.ceil((h.end - first) / binMs));
  const bins = Array.from({ length: nbins }, () => ({}));
  const present = new Set();
  let total = 0;
  for (const [t, b] of h.bins) {
    const i = Math.floor((t - first) / binMs);
    if (i < 0 || i >= nbins) continue;
    for (const [level, n] of Object.entries(b)) {
      bins[i][level] = (bins[i][level] || 0) + n;
      present.add(level);
      total += n;
    }
  }
  const totals = bins.map((b) => Object.values(b).reduce((a, c) => a + c, 0));
  const max = Math.max(1, ...totals);
  const W = 1000, H = 110, top = 6, bottom = 18, left = 40;
  const plotH = H - top - bottom;
  const barW = (W - left) / nbins;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none",
    role: "img", "aria-label": "events per " + fmtSpan(binMs) + " by level" });
  root.append(svg("line", { x1: left, x2: W, y1: H - bottom, y2: H - bottom, class: "gridline" }));
  axisText(root, left - 4, top + 8, fmtNum(max), "end");
  axisText(root, left - 4, H - bottom, "0", "end");
  axisText(root, left, H - 4, fmtTime(first), "start");
  axisText(root, W, H - 4, fmtTime(first + nbins * binMs), "end");
  state.histScale = { first, end: first + nbins * binMs, binMs, left, W, barW };
  bins.forEach((bin, i) => {
    let y = H - bottom;
    for (const level of [...LEVELS, "other"]) {
      const n = bin[level];
      if (!n) continue;
      const hgt = (n / max) * plotH;
      y -= hgt;
      const rect = svg("rect", { x: left + i * barW + 0.5, y, width: Math.max(1, barW - 1),
        height: hgt, fill: LEVEL_COLOURS[level], "data-level": level, "data-count": n });
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
  if (state.range !== "all") {
    const out = el("button", { type: "button", id: "zoom-out", class: "tool",
      title: "twice the time, around the same middle", text: "zoom out" });
    out.addEventListener("click", zoomOut);
    legend.append(out);
  }
  legend.append(el("span", { class: "total", "data-total": total, text: total.toLocaleString()
    + " event" + (total === 1 ? "" : "s") + " · " + fmtSpan(binMs) + " bars" }));
  fig.replaceChildren(root, legend);
}

// Twice the range around its middle (a drag's range, a context window), or the next
// longer preset; a new entry of the history, like the drag.
const PRESETS = ["5m", "15m", "1h", "24h", "7d", "all"];
function zoomOut() {
  const custom = customRange(state.range);
  if (custom) {
    const [a, b] = custom;
    const w = b - a;
    const end = Math.min(b + w / 2, Date.now() + 60e3);
    state.range = iso(Math.floor(a - w / 2)) + "/" + iso(Math.ceil(end));
  } else {
    state.range = PRESETS[Math.min(PRESETS.length - 1, PRESETS.indexOf(state.range) + 1)];
  }
  state.context = null;
  recompute();
}

// ------------------------------------------------------------------ completion

// Field names, and a field's values after "name:", from the dataset's fields.
function loadFieldsInfo() {
  const s = state.selected;
  if (!s || s.kind !== "dataset") return;
  const info = state.fieldsInfo;
  if (info && info.dataset === s.name && Date.now() - info.at < 60e3) return;
  panels.fields.run((signal) => api("POST", "/local/facets",
    { dataset: s.name, q: "", range: state.range }, signal), (got) => {
    state.fieldsInfo = { dataset: s.name, at: Date.now(), fields: got.fields,
      said: facetsSaid(got) };
    if ($("complete").hidden) complete(); // never under a choice being made
  });
}

// The word at the caret: [start, end, text].
function caretWord(box) {
  const v = box.value;
  const caret = box.selectionStart === null ? v.length : box.selectionStart;
  let a = caret;
  while (a > 0 && !/\s/.test(v[a - 1])) a--;
  let b = caret;
  while (b < v.length && !/\s/.test(v[b])) b++;
  return [a, b, v.slice(a, caret)];
}

function complete() {
  const box = $("filter");
  const list = $("complete");
  const info = state.fieldsInfo;
  if (document.activeElement !== box || !info) { hideComplete(); return; }
  const [, , word] = caretWord(box);
  const neg = word.startsWith("-") ? "-" : "";
  const w = word.slice(neg.length);
  const items = [];
  const colon = w.indexOf(":");
  if (colon > 0) {
    const name = w.slice(0, colon), prefix = w.slice(colon + 1).replace(/^"/, "").toLowerCase();
    const f = info.fields.find((x) => x.name === name);
    for (const [value, count] of (f && !f.high ? f.values : [])) {
      if (String(value).toLowerCase().startsWith(prefix)) {
        items.push({ insert: neg + term(name, value) + " ", label: String(value), n: count });
      }
    }
  } else if (w.length >= 1 && !/[<>=]/.test(w)) {
    const lw = w.toLowerCase();
    for (const f of info.fields) {
      if (f.name.toLowerCase().startsWith(lw) && f.name !== w) {
        items.push({ insert: neg + f.name + ":", label: f.name + ":", n: f.present });
      }
    }
  }
  if (!items.length) { hideComplete(); return; }
  list.replaceChildren();
  items.slice(0, 10).forEach((item, i) => {
    const li = el("li", { role: "option", "data-insert": item.insert,
      "aria-selected": String(i === 0) }, el("span", { text: item.label }),
    el("span", { class: "n", text: String(item.n) }));
    li.addEventListener("mousedown", (e) => { e.preventDefault(); acceptCompletion(li); });
    list.append(li);
  });
  // Where the counts come from: the dataset's fields over a sample, said as the panel says it.
  if (info.said) {
    list.append(el("li", { class: "complete-note", role: "presentation",
      text: "counts " + info.said.replace(/^· /, "") }));
  }
  list.hidden = false;
  box.setAttribute("aria-expanded", "true");
}

function hideComplete() {
  $("complete").hidden = true;
  $("filter").setAttribute("aria-expanded", "false");
}

function moveCompletion(step) {
  const items = [...$("complete").querySelectorAll("[role=option]")];
  let i = items.findIndex((li) => li.getAttribute("aria-selected") === "true");
  i = (i + step + items.length) % items.length;
  items.forEach((li, j) => li.setAttribute("aria-selected", String(i === j)));
  items[i].dataset.userMoved = "1"; // Enter now takes this completion, not the search as typed
  items[i].scrollIntoView({ block: "nearest" });
}

function acceptCompletion(li) {
  const box = $("filter");
  const [a, b] = caretWord(box);
  const insert = li.dataset.insert;
  box.value = box.value.slice(0, a) + insert + box.value.slice(b);
  const caret = a + insert.length;
  box.setSelectionRange(caret, caret);
  hideComplete();
  if (insert.endsWith(" ")) searchNow(); // a whole term: search it
  else complete(); // a field name: now its values
}

function searchNow() {
  const value = $("filter").value.trim();
  if (value === state.search && state.plan) return;
  state.search = value;
  state.context = null;
  recompute();
}

// ------------------------------------------------------------------ keyboard

function rowsShown() { return [...document.querySelectorAll("#events tr.row")]; }

function onKey(e) {
  const target = e.target;
  const typingIn = target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement
    || target instanceof HTMLSelectElement;
  if (e.key === "/" && !typingIn && !e.ctrlKey && !e.metaKey) {
    e.preventDefault();
    const box = $("filter");
    box.focus();
    box.select();
    return;
  }
  if (e.key === "Escape") {
    if (!$("complete").hidden) { hideComplete(); return; }
    if (typingIn) { target.blur(); return; }
    if (!$("detail").hidden) { closeDetail(); return; }
    if (!$("columns").hidden) { toggleColumnsPicker(false); }
    return;
  }
  if (typingIn) return;
  if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    const trs = rowsShown();
    if (!trs.length) return;
    e.preventDefault();
    let i = trs.indexOf(document.activeElement);
    if (i < 0) i = trs.findIndex((tr) => tr.classList.contains("selected"));
    i = i < 0 ? 0 : Math.max(0, Math.min(trs.length - 1, i + (e.key === "ArrowDown" ? 1 : -1)));
    trs[i].focus();
    trs[i].scrollIntoView({ block: "nearest" });
    // With the pane open, it follows the row.
    if (!$("detail").hidden) trs[i].click();
    return;
  }
  if (e.key === "Enter" && target instanceof HTMLTableRowElement && target.classList.contains("row")) {
    e.preventDefault();
    target.click();
  }
}

// ------------------------------------------------------------------ theme

function applyTheme(value) {
  if (value === "light" || value === "dark") document.documentElement.dataset.theme = value;
  else delete document.documentElement.dataset.theme;
  $("theme").value = value === "light" || value === "dark" ? value : "auto";
}

// ------------------------------------------------------------------ live mode

// One timer drives live mode: each panel asks again when it is due, never while its last
// request is in flight, and nothing is asked while the tab is hidden.
let liveTimer = null;
function liveTick() {
  clearTimeout(liveTimer);
  liveTimer = setTimeout(liveTick, 250);
  if (!state.token || document.hidden) return;
  const now = performance.now();
  const due = (p) => !p.busy && now >= p.due;
  if (due(panels.datasets)) refreshDatasets();
  if (due(panels.views)) refreshViews();
  if (!$("live").checked || !state.selected || panels.plan.busy) return;
  if (due(panels.events)) pollEvents();
  const s = state.selected;
  if (s.kind !== "dataset" || !state.plan) return;
  // The histogram's newest bins, and the fields, again only when new events came.
  const fresh = state.newSince || 0;
  if (due(panels.histogram) && state.hist && fresh > (state.histNew || 0)) {
    const h = state.hist;
    if (state.range === "all" && (Date.now() - h.start) / h.binMs > 250) loadHistogram(undefined, true);
    else loadHistogram(Math.floor((h.until - LIVE_OVERLAP_MS) / h.binMs) * h.binMs);
  }
  if (due(panels.facets) && state.facets && fresh > (state.facetsNew || 0)) loadFacets();
  // A histogram or fields that failed (a time-out under load) are asked again.
  if (due(panels.histogram) && state.histFailed) loadHistogram();
  if (due(panels.facets) && state.facetsFailed) loadFacets();
}

// ------------------------------------------------------------------ start

function showLogin(message) {
  for (const p of Object.values(panels)) p.abort();
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  setStatus("not signed in", true);
  state.token = "";
}

// The range picker shows a custom range (a drag on the histogram, a context window) as an
// option of its own.
function setRangeOption() {
  const picker = $("range");
  let custom = picker.querySelector("option[data-custom]");
  const span = customRange(state.range);
  if (span) {
    if (!custom) {
      custom = el("option", { "data-custom": "1" });
      picker.append(custom);
    }
    custom.value = state.range;
    custom.textContent = fmtTime(span[0]) + " – " + fmtTime(span[1], false);
  } else if (custom) {
    custom.remove();
  }
  picker.value = state.range;
}

function start() {
  const params = hashParams();
  let token = tokenFromHash();
  // A link without the token (copy link): the token this browser signed in with before.
  if (!token) token = keptToken();
  state.token = token;
  let event = null;
  if (params.event) {
    const i = params.event.lastIndexOf("~");
    if (i > 0) event = { time: params.event.slice(0, i), id: params.event.slice(i + 1) };
  }
  state.wanted = { dataset: params.dataset || null, view: params.view || null, event,
    apl: params.apl || null };
  state.search = params.q || "";
  state.range = RANGE_SECONDS[params.range] || customRange(params.range) ? params.range : "all";
  state.tz = params.tz === "local" ? "local" : "utc";
  state.group = params.group || "";
  state.columns = params.cols ? params.cols.split(",").filter(Boolean) : [];
  state.selected = null;
  state.context = null;
  state.shown = false;
  state.lastHash = location.hash;
  $("filter").value = state.search;
  setRangeOption();
  $("tz").value = state.tz;
  $("group").value = state.group;
  for (const p of Object.values(panels)) { p.abort(); p.due = 0; }
  if (!state.token) { showLogin(""); return; }
  $("login").hidden = true;
  $("app").hidden = false;
  panels.datasets.due = 0;
  panels.views.due = 0;
  liveTick();
}

function toggleColumnsPicker(open) {
  $("columns").hidden = !open;
  $("columns-toggle").setAttribute("aria-expanded", String(open));
  if (open) drawColumnPicker();
}

document.addEventListener("DOMContentLoaded", () => {
  let savedTheme = "auto";
  try { savedTheme = localStorage.getItem("loghandler-theme") || "auto"; } catch (e) { /* none */ }
  applyTheme(savedTheme);
  $("theme").addEventListener("change", (e) => {
    applyTheme(e.target.value);
    try { localStorage.setItem("loghandler-theme", e.target.value); } catch (err) { /* none */ }
  });
  const box = $("filter");
  box.addEventListener("input", () => {
    // Typing completes; Enter searches (a search at each pause scanned the dataset for
    // words half typed, and raced the Enter).
    $("notice").hidden = true;
    complete();
  });
  box.addEventListener("focus", () => { loadFieldsInfo(); complete(); });
  box.addEventListener("blur", () => setTimeout(() => {
    if (document.activeElement !== box) hideComplete();
  }, 100));
  box.addEventListener("keydown", (e) => {
    const open = !$("complete").hidden;
    if (open && (e.key === "ArrowDown" || e.key === "ArrowUp")) {
      e.preventDefault();
      moveCompletion(e.key === "ArrowDown" ? 1 : -1);
    } else if (open && e.key === "Tab") {
      e.preventDefault();
      acceptCompletion($("complete").querySelector("[aria-selected='true']"));
    } else if (e.key === "Enter") {
      e.preventDefault();
      const chosen = open && $("complete").querySelector("[aria-selected='true']");
      if (chosen && chosen.dataset.userMoved) acceptCompletion(chosen);
      else { hideComplete(); searchNow(); }
    }
  });
  $("complete").addEventListener("keydown", (e) => e.stopPropagation());
  document.addEventListener("keydown", onKey);
  $("older").addEventListener("click", loadOlder);
  $("detail-around").addEventListener("click", () => openContext("around"));
  $("detail-request").addEventListener("click", () => openContext("request"));
  $("detail-trace").addEventListener("click", () => openContext("trace"));
  $("copy-link").addEventListener("click", () => {
    if (state.detailRow) copyText(eventLink(state.detailRow), "link");
  });
  $("copy-json").addEventListener("click", () => {
    if (state.detailRow) copyText(JSON.stringify(state.detailRow, null, 2), "JSON");
  });
  $("editor-toggle").addEventListener("click", () => openEditor($("editor").hidden));
  $("editor").addEventListener("submit", (e) => { e.preventDefault(); runEditor(); });
  $("editor-apl").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); runEditor(); }
  });
  $("editor-save").addEventListener("click", saveEditor);
  $("columns-toggle").addEventListener("click", () => toggleColumnsPicker($("columns").hidden));
  $("columns-filter").addEventListener("input", drawColumnPicker);
  $("field-filter").addEventListener("input", () => drawFacets(currentKey()));
  // Live updates pause while the reader scrolls down the events, and resume at the top.
  $("events-wrap").addEventListener("scroll", (e) => {
    const down = e.target.scrollTop > 40;
    if (down && $("live").checked) { $("live").checked = false; state.autoPaused = true; }
    if (!down && state.autoPaused && state.rows.length <= EVENTS_LIMIT) {
      $("live").checked = true;
      state.autoPaused = false;
    }
  });
  $("live").addEventListener("change", () => { liveStatus(); liveTick(); });
  // A hidden tab asks nothing; back in view, it catches up at once.
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) {
      panels.events.due = 0;
      panels.datasets.due = 0;
    }
    liveStatus();
    liveTick();
  });
  $("tz").addEventListener("change", (e) => {
    state.tz = e.target.value;
    writeHash();
    setRangeOption();
    renderEvents(currentKey());
    if (state.hist) drawHistogram(currentKey());
  });
  $("group").addEventListener("change", (e) => {
    state.group = e.target.value;
    writeHash();
    renderEvents(currentKey());
  });
  // Drag across the histogram to zoom to that time.
  let dragFrom = null;
  const toTime = (e) => {
    const h = state.histScale;
    const rect = $("histogram").querySelector("svg").getBoundingClientRect();
    const x = (e.clientX - rect.left) / rect.width * h.W;
    return h.first + Math.max(0, (x - h.left) / h.barW) * h.binMs;
  };
  $("histogram").addEventListener("mousedown", (e) => {
    if (state.histScale && e.target.closest("svg")) { dragFrom = toTime(e); e.preventDefault(); }
  });
  window.addEventListener("mouseup", (e) => {
    if (dragFrom === null) return;
    const to = toTime(e);
    const [a, b] = [Math.min(dragFrom, to), Math.max(dragFrom, to)];
    dragFrom = null;
    const bin = state.histScale.binMs;
    if (b - a < bin / 2) return; // a click, not a drag
    const from = Math.floor(a / bin) * bin, until = Math.ceil(b / bin) * bin;
    state.range = iso(from) + "/" + iso(until);
    state.context = null;
    recompute();
  });
  $("range").addEventListener("change", (e) => {
    state.range = e.target.value;
    state.context = null;
    recompute();
  });
  $("detail-close").addEventListener("click", closeDetail);
  $("tab-fields").addEventListener("click", () => showTab("fields"));
  $("tab-json").addEventListener("click", () => showTab("json"));
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("login-token").value.trim();
    if (!token) return;
    keepToken(token, $("login-remember").checked);
    // The rest of the address (a link's dataset, event, ...) stays.
    const rest = location.hash.replace(/^#/, "").split("&")
      .filter((p) => p && !p.startsWith("token="));
    location.hash = ["token=" + encodeURIComponent(token), ...rest].join("&");
  });
  // A link pasted into the address bar (another dataset, search or token): start over.
  window.addEventListener("hashchange", restore);
  window.addEventListener("popstate", restore);
  start();
});
