"""The local service's page at a million events: ``python -m benchmarks.page``.

Stores 1,000,000 events of a web service's logs over 24 hours (``benchmarks.weblogs``, through
the store's own bulk path), serves them with ``loghandler serve --db``, trickles ten new events
a second into the dataset as a live service would, and drives the page in headless Chromium
(1440x900) in live mode, as a developer would:

- each search of issue 38 (``status:500``, ``duration_ms>1000``, a negation, a rare word): the
  time from the Enter key (the page searches on Enter only: no typing pause starts it early)
  to the right events on screen, checked against the API's answer to the same query (right
  the first time, or not), and to the full result (events, histogram and fields shown);
- the day-wide views of issue 46: the page opened on the last 24 hours (navigation to its
  events, histogram and fields), a drag across the middle half of that day's histogram (the
  mouse-up to the dragged range's events, histogram and fields), a 24-hour ``count() by
  level`` chart and p95 by path over 24 hours (the Run click to the chart);
- the same queries through the API alone, and with the page open (paired, interleaved);
- the requests the page makes while idle in live mode, and the most in flight per panel;
- a 24-hour ``count() by level, bin_auto(_time)`` chart;
- opening an event's link;
- the journey: the errors of the last 15 minutes, a traceback, its request, then p95 latency
  by path for the last hour, with no wrong screen on the way (a panel showing the answer to
  another query than the one asked).

Every figure is the median of ``--repeat`` (3) runs; the machine's one-minute load average
(``os.getloadavg()``) is printed beside each, in the table too. ``--events 100000`` for a
quick run; ``--screenshots DIR`` also saves the docs' screenshots (docs/local-service*.png)
along the way.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from . import weblogs

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"
SEARCHES = [("status:500", 1.0), ("duration_ms>1000", 1.0), ("-level:debug", 1.0),
            (weblogs.RARE_WORD, 1.5)]
CHART = "['web'] | summarize count() by level, bin_auto(_time)"
# The journeys of the docs' table (docs/local-service-overview.md), by their rows' names.
JOURNEYS = ("open on 24 h", "search status:500: Enter to events+", f"search {weblogs.RARE_WORD}: "
            "Enter to events+", "a range drag over 24 h", "24-hour count() by level chart",
            "24-hour p95 by path", "search duration_ms>1000: Enter to events+")
SECTIONS = ("views", "searches", "api", "idle", "chart", "link", "journey")
LEVELS_24H = "['web'] | summarize count() by level"
P95 = ("['web'] | where isnotempty(path) "
       "| summarize percentile(duration_ms, 95) by path, bin_auto(_time)")

# The page's requests, recorded (which panel asked, when, how long, aborted or not).
NET_JS = r"""
(() => {
  const real = window.fetch.bind(window);
  const net = window.__net = { log: [], inflight: {}, most: {} };
  window.fetch = async (url, opts) => {
    opts = opts || {};
    const panel = (opts.headers && opts.headers["X-Loghandler-Panel"]) || "";
    const entry = { url: String(url), panel, t0: performance.now(), t1: null, aborted: false };
    net.log.push(entry);
    net.inflight[panel] = (net.inflight[panel] || 0) + 1;
    net.most[panel] = Math.max(net.most[panel] || 0, net.inflight[panel]);
    const close = () => {
      if (entry.t1 !== null) return;
      entry.t1 = performance.now();
      net.inflight[panel] -= 1;
    };
    if (opts.signal) {
      opts.signal.addEventListener("abort", () => { entry.aborted = true; close(); });
    }
    try { return await real(url, opts); } finally { close(); }
  };
})();
"""

# When the events panel first shows the answer to what is asked (its key), and any moment a
# panel shows the answer to something else (a wrong screen).
WATCH_JS = r"""
window.__bench = { enterAt: null, shown: {}, full: {}, wrong: [] };
document.addEventListener("keydown", (e) => {
  if (e.key === "Enter") window.__bench.enterAt = performance.now(); }, true);
const answered = (id, key) => {
  const n = document.getElementById(id);
  return n && n.dataset.key === key && n.getAttribute("aria-busy") !== "true"
    && !n.classList.contains("stale");
};
new MutationObserver(() => {
  const key = document.body.dataset.key;
  const b = window.__bench;
  if (answered("events-wrap", key) && !(key in b.shown)) b.shown[key] = performance.now();
  // The full result: the events, the histogram's bars (or its "no events") and the fields.
  if (answered("events-wrap", key) && answered("histogram", key) && answered("facets", key)
      && !(key in b.full)) {
    // A panel that ran out of time: the full result never came (-1).
    const out = ["histogram", "facets"].some((id) => /timed out/.test(
      (document.querySelector("#" + id + " .panel-state") || {}).textContent || ""));
    if (out) b.full[key] = -1;
    else if (document.querySelector("#histogram .legend")) b.full[key] = performance.now();
  }
  for (const id of ["events-wrap", "histogram", "facets"]) {
    const n = document.getElementById(id);
    if (!n || n.hidden || n.classList.contains("busy") || n.classList.contains("stale")) continue;
    if (n.dataset.key && n.dataset.key !== key) window.__bench.wrong.push([id, n.dataset.key, key]);
  }
}).observe(document.body, { subtree: true, childList: true, attributes: true });
"""


# A run of the APL editor, timed as the searches are (from the Enter key) and the drag (from
# the mouse-up): from the Run click the page sees (a capturing listener: before the page's
# own) to the first frame drawn with the answer's chart (the task after the frame in which
# the chart first stands, answered: its paint done), not from the driver's command before
# the click to the driver's next look.
RUN_JS = r"""
if (window.__runWatch) window.__runWatch.disconnect();  // a run that timed out left its own
window.__run = { at: null, shown: null };
document.getElementById("editor-run").addEventListener("click", () => {
  window.__run.at = performance.now(); }, { capture: true, once: true });
const runWatch = new MutationObserver(() => {
  const r = window.__run;
  const w = document.getElementById("events-wrap");
  const c = document.getElementById("chart");
  // The answer after the click's own loading state (the same query again has the same key).
  if (r.at !== null && w.getAttribute("aria-busy") === "true") r.asked = true;
  if (!r.asked || r.seen || w.dataset.key !== document.body.dataset.key
      || w.getAttribute("aria-busy") === "true" || c.hidden || !c.querySelector("rect, path"))
    return;
  r.seen = true;
  runWatch.disconnect();
  requestAnimationFrame(() => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => { r.shown = performance.now(); };
    ch.port2.postMessage(0);
  });
});
runWatch.observe(document.body, { subtree: true, childList: true, attributes: true });
window.__runWatch = runWatch;
"""


def load() -> str:
    return "load %.2f" % os.getloadavg()[0]


def loads(values: list[float]) -> str:
    """The load averages seen over a figure's runs, beside the figure."""
    return "load " + "-".join(f"{v:.1f}" for v in (min(values), max(values))) if len(
        values) > 1 and min(values) != max(values) else f"load {values[0]:.1f}"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@contextmanager
def serve(db: str) -> Iterator[tuple[str, str]]:
    """``loghandler serve --db`` in a subprocess: (its base URL, its token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--db", db, "--port",
                             "0", "--quiet"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        for _ in range(40):
            m = re.search(r"(http://127\.0\.0\.1:\d+)/#token=(\S+)", proc.stdout.readline())
            if m:
                yield m.group(1), m.group(2)
                break
        else:
            raise RuntimeError("loghandler serve printed no page URL")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@contextmanager
def feeder(client: Any, per_second: int = 10, limit_s: float = 3600.0) -> Iterator[None]:
    """New events into the dataset, ``per_second`` a second (stops at the end, or after
    ``limit_s`` at most)."""
    stop = threading.Event()

    def run() -> None:
        rng = random.Random(1)
        ends = time.monotonic() + limit_s
        while not stop.wait(1.0) and time.monotonic() < ends:
            try:
                client.ingest(weblogs.DATASET, weblogs.live_events(rng, time.time(),
                                                                   per_second))
            except Exception as exc:  # the benchmark goes on; it says so
                print(f"  (the live trickle failed once: {exc})", file=sys.stderr)

    thread = threading.Thread(target=run, name="live-trickle", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def browser(tmp: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must not fetch anything
    options = Options()
    options.binary_location = next((b for b in CHROMIUM if os.path.exists(b)),
                                   shutil.which("chromium") or CHROMIUM[0])
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-extensions",
                "--window-size=1440,900", f"--user-data-dir={tmp}"):
        options.add_argument(arg)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    drv.set_page_load_timeout(60)
    drv.set_script_timeout(120)
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": NET_JS})
    return drv


def wait(drv: Any, condition: Callable[[Any], Any], what: str, timeout: float = 60.0) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(drv, timeout, poll_frequency=0.02, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(
        condition, message=f"timed out waiting for {what}")


def settled(drv: Any) -> bool:
    """The page shows the answers to what it asks: no panel at work on a new query (a panel
    with an empty key has nothing to show for it: the fields of an APL query)."""
    return bool(drv.execute_script(
        "const key = document.body.dataset.key;"
        "const ids = ['events-wrap', 'histogram', 'facets'];"
        "return ids.every(id => { const n = document.getElementById(id);"
        "  return n.hidden || (n.getAttribute('aria-busy') !== 'true'"
        "    && (n.dataset.key === key || n.dataset.key === '')); });"))


def page_rows(drv: Any) -> list[str]:
    return list(drv.execute_script(
        "return [...document.querySelectorAll('#events tr.row')].map(r => r.dataset.rowId);"))


def open_dataset(drv: Any, base: str, token: str, extra: str = "") -> None:
    drv.get("about:blank")
    drv.get(f"{base}/#token={token}&dataset={weblogs.DATASET}{extra}")
    wait(drv, lambda d: len(page_rows(d)) == 200 and settled(d), "the dataset's events")
    drv.execute_script(WATCH_JS)


def search(drv: Any, text: str) -> tuple[float, float]:
    """Type a search and press Enter: the seconds from the Enter key to its events on screen,
    and to its full result (events, histogram and fields)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = drv.find_element(By.ID, "filter")
    if box.get_attribute("value") == text:
        return 0.0, 0.0  # asked already: Enter would ask nothing new
    box.clear()
    box.send_keys(text)
    # Forget this search's earlier runs: the time is this run's.
    drv.execute_script("const b = window.__bench; b.enterAt = null;"
                       "for (const k of Object.keys(b.shown))"
                       "  if (k.split('|')[1] === arguments[0]) delete b.shown[k];"
                       "for (const k of Object.keys(b.full))"
                       "  if (k.split('|')[1] === arguments[0]) delete b.full[k];", text)
    box.send_keys(Keys.ENTER)
    key = wait(drv, lambda d: d.execute_script(
        "const k = document.body.dataset.key; const b = window.__bench;"
        "return b.enterAt !== null && k.split('|')[1] === arguments[0] && (k in b.shown) && k;",
        text), f"the events of {text!r}")
    took = drv.execute_script("const b = window.__bench; return b.shown[arguments[0]] "
                              "- b.enterAt;", key)
    full = wait(drv, lambda d: d.execute_script(
        "const b = window.__bench; if (!(arguments[0] in b.full)) return false;"
        "return b.full[arguments[0]] === -1 ? 'out' : b.full[arguments[0]] - b.enterAt;", key),
        f"the histogram and fields of {text!r}")
    return float(took) / 1000, (float("nan") if full == "out" else float(full) / 1000)


def right(drv: Any, client: Any) -> bool:
    """The rows on screen are the API's answer to the query on screen (give or take the
    events that arrived since: newer ones on top of the API's, as many older gone below)."""
    from selenium.webdriver.common.by import By

    apl = drv.find_element(By.ID, "query").text
    shown = page_rows(drv)
    answer = [r["_rowId"] for r in client.query(apl)]
    if shown == answer:
        return True
    if not shown:
        return False
    newer = [r for r in answer if r not in shown]
    return answer[len(newer):] == shown[:len(shown) - len(newer)] and all(
        int(r, 16) > max(int(s, 16) for s in shown) for r in newer)


def api_time(client: Any, apl: str) -> float:
    """The seconds of one query through the API; NaN when it met the service's deadline (a
    loaded machine: the run goes on, and says so)."""
    from loghandler import ApiError

    started = time.perf_counter()
    try:
        client.query(apl)
    except ApiError as exc:
        if "ran longer than" not in str(exc):
            raise
        return float("nan")
    return time.perf_counter() - started


def run_apl(drv: Any, apl: str, range_value: str, or_timeout: bool = False) -> float:
    """Run ``apl`` in the editor over ``range_value``: the seconds to its chart (with
    ``or_timeout``, NaN when the page says it timed out)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    if drv.find_element(By.ID, "editor").get_attribute("hidden") is not None:
        drv.find_element(By.ID, "editor-toggle").click()
    Select(drv.find_element(By.ID, "range")).select_by_value(range_value)
    box = drv.find_element(By.ID, "editor-apl")
    box.clear()
    box.send_keys(apl)
    drv.execute_script(RUN_JS)
    drv.find_element(By.ID, "editor-run").click()
    done = wait(drv, lambda d: d.execute_script(
        "const r = window.__run; const st = document.getElementById('events-state');"
        "if (arguments[0] && !st.hidden && /timed out/.test(st.textContent)) return -1;"
        "return r.at !== null && r.shown !== null && r.shown - r.at;", or_timeout),
        "the chart")
    if done == -1:
        return float("nan")
    return float(done) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.page", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle", type=float, default=30.0,
                        help="seconds of idle live mode to count requests over")
    parser.add_argument("--db", help="keep the database in this file (default: a temporary "
                                     "one, removed at the end)")
    parser.add_argument("--reuse-db", action="store_true",
                        help="with --db: use the events already in that file (no new fill)")
    parser.add_argument("--screenshots", help="save the docs' screenshots in this directory")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"some of {','.join(SECTIONS)} (default: all)")
    args = parser.parse_args(argv)

    from loghandler import Client
    from loghandler._local.store import Store

    tmp = tempfile.mkdtemp(prefix="loghandler-page-bench-")
    db = args.db or os.path.join(tmp, "events.sqlite")
    if not (args.reuse_db and args.db and os.path.exists(db)):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.remove(db + suffix)
        print(f"storing {args.events:,} events of a web service's logs over 24 hours "
              f"({load()})")
        store = Store(db)
        try:
            seconds = weblogs.fill(store, args.events)
        finally:
            store.close()
        print(f"  {seconds:.1f} s ({args.events / seconds:,.0f} events/s through "
              f"Store.add_events)")
    results: list[tuple[str, str, str]] = []
    try:
        with serve(db) as (base, token):
            client = Client(token, url=base, timeout=60)
            trickle = Client(token, url=base)
            with feeder(trickle):
                drv = browser(os.path.join(tmp, "chromium"))
                try:
                    results = measure(drv, client, base, token, args)
                finally:
                    drv.quit()
            client.close()
            trickle.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"{'':62} {'figure':>30}  target")
    for name, figure, target in results:
        print(f"{name:62} {figure:>30}  {target}")
    # The journeys of the docs' table, each from the key, click or navigation to its full
    # result on screen, the load beside it.
    print(f"\nthe docs' journeys, to the full result (the load now: {load()})")
    for prefix in JOURNEYS:
        for name, figure, target in results:
            if name.startswith(prefix):
                print(f"  {name:60} {figure:>30}  {target}")
    return 0


def measure(drv: Any, client: Any, base: str, token: str, args: Any) -> list[tuple[str, str,
                                                                                      str]]:
    from selenium.webdriver.common.by import By

    out: list[tuple[str, str, str]] = []
    reps = args.repeat
    open_dataset(drv, base, token)
    if args.screenshots:
        # The checkout service's last hour, a request's events together.
        open_dataset(drv, base, token, "&q=service%3Acheckout&range=1h&group=request_id")
        drv.save_screenshot(os.path.join(args.screenshots, "local-service.png"))
        open_dataset(drv, base, token)

    only = set(args.only.split(","))
    if "views" in only:
        views(drv, base, token, args, out)
    # 1. The searches, with the page open in live mode.
    apls: dict[str, str] = {}
    for text, target in SEARCHES if only & {"searches", "api"} else []:
        if text == SEARCHES[0][0]:
            print(f"\nsearches, the page open in live mode ({load()})")
        times, fulls, seen, firsts = [], [], [], 0
        for _ in range(reps):
            search(drv, "")  # back to no search, settled, then the search
            wait(drv, settled, "the page settled")
            seen.append(os.getloadavg()[0])
            took, full = search(drv, text)
            ok = right(drv, client)
            firsts += ok
            times.append(took)
            fulls.append(full)
            apls[text] = drv.find_element(By.ID, "query").text
            wait(drv, settled, "the page settled")
        print(f"  {text:20} events {', '.join(f'{t:.2f}' for t in times)} s, full "
              f"{', '.join(f'{t:.2f}' for t in fulls)} s; right the first time "
              f"{firsts}/{reps} ({load()})")
        out.append((f"search {text}: Enter to its events (median)",
                    f"{median(times):.2f} s, {firsts}/{reps} right ({loads(seen)})",
                    f"< {target:g} s"))
        done = [t for t in fulls if t == t]  # NaN: the histogram or the fields timed out
        out.append((f"search {text}: Enter to events+histogram+fields",
                    (f"{median(done):.2f} s" if done else "-") + (
                        f", {len(fulls) - len(done)}/{len(fulls)} timed out"
                        if len(done) < len(fulls) else "") + f" ({loads(seen)})", "< 1 s"))
    search(drv, "")
    wait(drv, settled, "the page settled")

    # 2. The same queries through the API, alone and with the page open (interleaved).
    for text, _ in SEARCHES if "api" in only else []:
        if text == SEARCHES[0][0]:
            print(f"\nthe API, alone and with the page open ({load()})")
        alone, beside = [], []
        for _ in range(max(reps, 5)):
            drv.get("about:blank")
            alone.append(api_time(client, apls[text]))
            open_dataset(drv, base, token)
            time.sleep(2.5)  # a live poll or two under way: the page as it is when open
            beside.append(api_time(client, apls[text]))
        late = sum(t != t for t in alone + beside)  # NaN: timed out
        alone, beside = [t for t in alone if t == t], [t for t in beside if t == t]
        if not alone or not beside:
            print(f"  {text:20} timed out ({late} of {2 * max(reps, 5)}; {load()})")
            out.append((f"API {text}: page open / alone", f"timed out ({load()})", "<= 1.5x"))
            continue
        ratio = median(beside) / median(alone)
        said = f", {late} timed out" if late else ""
        print(f"  {text:20} alone {median(alone) * 1000:7.1f} ms, page open "
              f"{median(beside) * 1000:7.1f} ms: {ratio:.2f}x{said} ({load()})")
        out.append((f"API {text}: page open / alone", f"{ratio:.2f}x "
                    f"({median(beside) * 1000:.0f}/{median(alone) * 1000:.0f} ms{said}, "
                    f"{load()})", "<= 1.5x"))

    # 3. Idle in live mode: the requests made, and the most in flight per panel.
    if "idle" in only:
        idle(drv, args, out)
    if "chart" in only:
        chart(drv, args, out)
    if "link" in only:
        link(drv, client, base, token, args, out)
    if "journey" in only:
        journeys, wrong = [], 0
        for i in range(reps):
            took, screens = journey(drv, base, token, args.screenshots if i == 0 else None)
            journeys.append(took)
            wrong += screens
            print(f"the journey: {took:.1f} s, {screens} wrong screens ({load()})")
        out.append(("journey: errors 15m > traceback > request > p95/path 1h",
                    f"{median(journeys):.1f} s, {wrong} wrong screens", "< 60 s, none"))
    most = drv.execute_script("return window.__net.most;")
    out.append(("most requests in flight per panel (the last page)",
                ", ".join(f"{k or 'other'} {v}" for k, v in sorted(most.items())), "1"))
    return out


def views(drv: Any, base: str, token: str, args: Any, out: list[tuple[str, str, str]]) -> None:
    """The day-wide views: the page opened on the last 24 hours (from navigation to its
    events, histogram and fields), a drag over that day's histogram (from the mouse-up to
    the dragged range's), the 24-hour level chart and p95 by path over 24 hours (from the
    Run click to the chart)."""
    from selenium.webdriver.common.by import By

    print(f"\nthe day-wide views ({load()})")
    opens, seen = [], []
    for _ in range(args.repeat):
        drv.get("about:blank")
        seen.append(os.getloadavg()[0])
        drv.get(f"{base}/#token={token}&dataset={weblogs.DATASET}&range=24h")
        done = wait(drv, lambda d: len(page_rows(d)) == 200 and settled(d) and d.execute_script(
            "return document.querySelectorAll('#histogram rect').length > 0"
            " && document.querySelectorAll('#facets .facet').length > 0"
            " && performance.now();"), "the day's events, histogram and fields")
        opens.append(float(done) / 1000)
        print(f"  open on 24 h: {opens[-1]:.2f} s ({load()})")
    out.append(("open on 24 h: events+histogram+fields (median)",
                f"{median(opens):.2f} s ({loads(seen)})", "< 1 s"))
    drag(drv, base, token, args, out)
    drv.execute_script(WATCH_JS)
    for name, apl in (("24-hour count() by level chart", LEVELS_24H),
                      ("24-hour p95 by path chart", P95)):
        took, seen = [], []
        for _ in range(args.repeat):
            seen.append(os.getloadavg()[0])
            took.append(run_apl(drv, apl, "24h", or_timeout=True))
            print(f"  {name}: {took[-1]:.2f} s ({load()})")
        done = [t for t in took if t == t]  # NaN: timed out
        out.append((name, (f"{median(done):.2f} s" if done else "-") + (
            f", {len(took) - len(done)}/{len(took)} timed out" if len(done) < len(took)
            else "") + f" ({loads(seen)})", "< 1 s"))
    drv.find_element(By.ID, "editor-toggle").click()
    open_dataset(drv, base, token)


def drag(drv: Any, base: str, token: str, args: Any, out: list[tuple[str, str, str]]) -> None:
    """A drag across the middle half of the day's histogram: the seconds from the mouse-up
    to the dragged range's events, histogram and fields on screen."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    took, seen = [], []
    for _ in range(args.repeat):
        drv.get("about:blank")
        drv.get(f"{base}/#token={token}&dataset={weblogs.DATASET}&range=24h")
        wait(drv, lambda d: len(page_rows(d)) == 200 and settled(d) and d.execute_script(
            "return document.querySelector('#histogram .legend') !== null"
            " && document.querySelectorAll('#facets .facet').length > 0;"),
            "the day's events, histogram and fields")
        # The mouse-up seen first (a capturing listener: before the page's own).
        drv.execute_script(WATCH_JS + "window.__bench.upAt = null; window.addEventListener("
                           "'mouseup', () => { window.__bench.upAt = performance.now(); }, "
                           "true);")
        before = drv.execute_script("return document.body.dataset.key;")
        svg = drv.find_element(By.CSS_SELECTOR, "#histogram svg")
        width = svg.size["width"]
        seen.append(os.getloadavg()[0])
        ActionChains(drv).move_to_element_with_offset(svg, -int(width / 4), 0).click_and_hold()\
            .move_to_element_with_offset(svg, int(width / 4), 0).release().perform()
        full = wait(drv, lambda d, before=before: d.execute_script(
            "const k = document.body.dataset.key; const b = window.__bench;"
            "if (k === arguments[0] || b.upAt === null || !(k in b.full)) return false;"
            "return b.full[k] === -1 ? 'out' : b.full[k] - b.upAt;", before),
            "the dragged range's events, histogram and fields")
        took.append(float("nan") if full == "out" else float(full) / 1000)
        print(f"  a drag over 24 h: {took[-1]:.2f} s ({load()})")
    done = [t for t in took if t == t]  # NaN: the histogram or the fields timed out
    out.append(("a range drag over 24 h: mouse-up to events+histogram+fields",
                (f"{median(done):.2f} s" if done else "-") + (
                    f", {len(took) - len(done)}/{len(took)} timed out"
                    if len(done) < len(took) else "") + f" ({loads(seen)})", "< 1 s"))


def idle(drv: Any, args: Any, out: list[tuple[str, str, str]]) -> None:
    print(f"\nidle in live mode for {args.idle:g} s ({load()})")
    n0 = drv.execute_script("return window.__net.log.length;")
    time.sleep(args.idle)
    made = drv.execute_script("return window.__net.log.length;") - n0
    rate = made / args.idle
    out.append(("requests a second, idle in live mode", f"{rate:.2f} ({made} in "
                f"{args.idle:g} s)", "<= 1"))
    print(f"  {made} requests: {rate:.2f}/s ({load()})")


def chart(drv: Any, args: Any, out: list[tuple[str, str, str]]) -> None:
    """A day's chart through the APL editor (and the docs' chart screenshot)."""
    print(f"\nthe chart {CHART!r} over 24 hours ({load()})")
    charts, seen = [], []
    for _ in range(args.repeat):
        seen.append(os.getloadavg()[0])
        charts.append(run_apl(drv, CHART, "24h"))
        print(f"  {charts[-1]:.2f} s ({load()})")
    out.append(("24-hour count() by level, bin_auto(_time) chart",
                f"{median(charts):.2f} s ({loads(seen)})", "< 2 s"))
    if args.screenshots:
        wait(drv, settled, "the chart settled")
        run_apl(drv, P95, "1h")
        drv.save_screenshot(os.path.join(args.screenshots, "local-service-chart.png"))


def link(drv: Any, client: Any, base: str, token: str, args: Any,
         out: list[tuple[str, str, str]]) -> None:
    """An event's link (an error from the middle of the day), opened from navigation."""
    middle = client.query("['web'] | where level == 'error' and _time < ago(12h) | take 1 "
                          "| project _time, _rowId")[0]
    # As the page's copy link makes it: the event's minute as the range, its time and id.
    t = datetime.datetime.fromisoformat(middle["_time"].replace("Z", "+00:00"))
    minute = t.replace(second=0, microsecond=0)
    span = "{}/{}".format(*(m.strftime("%Y-%m-%dT%H:%M:%S.000Z") for m in (
        minute, minute + datetime.timedelta(minutes=1))))
    address = (f"{base}/#token={token}&dataset=web&range={quote(span, safe='')}&event="
               f"{quote(middle['_time'] + '~' + middle['_rowId'], safe='')}")
    opens = []
    for _ in range(args.repeat):
        drv.get("about:blank")
        drv.get(address)
        shown = wait(drv, lambda d: d.execute_script(
            "const j = document.getElementById('detail-json').textContent;"
            "return j.includes(arguments[0]) && performance.now();", middle["_rowId"]),
            "the linked event")
        opens.append(float(shown) / 1000)
    print(f"\nan event's link: {', '.join(f'{t:.2f}' for t in opens)} s ({load()})")
    out.append(("opening an event's link (from navigation)", f"{median(opens):.2f} s",
                "< 0.5 s"))


def journey(drv: Any, base: str, token: str, screenshots: str | None) -> tuple[float, int]:
    """Errors of the last 15 minutes -> a traceback -> its request -> p95 latency by path for
    the last hour, as fast as the page lets a user go: (seconds, wrong screens seen)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    started = time.perf_counter()
    open_dataset(drv, base, token)
    box = drv.find_element(By.ID, "filter")
    box.send_keys("level:error" + (" service:checkout" if screenshots else ""), Keys.ENTER)
    Select(drv.find_element(By.ID, "range")).select_by_value("1h" if screenshots else "15m")
    wait(drv, lambda d: settled(d) and "ago(" in d.find_element(By.ID, "query").text
         and page_rows(d), "the errors")
    wait(drv, lambda d: d.find_element(By.XPATH, "//tr[contains(., '⚠ trace')]").click()
         or True, "a click on an error with a traceback")
    wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#detail-traces pre").text
         .startswith("Traceback"), "its traceback")
    if screenshots:
        wait(drv, settled, "the page settled")
        drv.save_screenshot(os.path.join(screenshots, "local-service-search.png"))
    request_id = json.loads(drv.find_element(By.ID, "detail-json")
                            .get_attribute("textContent"))["request_id"]
    drv.find_element(By.ID, "detail-request").click()
    wait(drv, lambda d: settled(d) and d.find_element(By.ID, "filter").get_attribute(
        "value") == "request_id:" + request_id
         and page_rows(d) and all(request_id in r for r in d.execute_script(
             "return [...document.querySelectorAll('#events tr.row')].map(r => r.innerText);")),
         "its request")
    run_apl(drv, P95, "1h")
    took = time.perf_counter() - started
    wrong = len(drv.execute_script("return window.__bench.wrong;"))
    drv.find_element(By.ID, "editor-toggle").click()
    return took, wrong


if __name__ == "__main__":
    sys.exit(main())
