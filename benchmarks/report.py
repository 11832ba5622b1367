"""Markdown tables from the raw results, and the issue's targets checked side by side."""

from __future__ import annotations

import math
import statistics
from argparse import Namespace
from collections.abc import Callable
from typing import Any

from .rows import FLOOR, FLOORS, LABELS, VARIANTS
from .scenarios import KEYS, cycle_cost

MiB = 1024 * 1024
Results = dict[str, dict[str, list[dict[str, Any]]]]


def _ok(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if "skipped" not in r and "error" not in r and "hung" not in r]


def _vals(runs: list[dict[str, Any]], key: str | Callable[[dict[str, Any]], Any]) -> list[float]:
    get = key if callable(key) else (lambda r: r.get(key))
    return [v for v in (get(r) for r in _ok(runs)) if isinstance(v, (int, float))]


def _med(runs: list[dict[str, Any]], key: Any) -> float | None:
    v = _vals(runs, key)
    return statistics.median(v) if v else None


def _fmt(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _spread(runs: list[dict[str, Any]], key: Any, digits: int = 0, scale: float = 1.0) -> str:
    v = [x * scale for x in _vals(runs, key)]
    if not v:
        return _why(runs)
    med = statistics.median(v)
    if len(v) == 1:
        return _fmt(med, digits)
    return f"{_fmt(med, digits)} ({_fmt(min(v), digits)}–{_fmt(max(v), digits)})"


def _why(runs: list[dict[str, Any]]) -> str:
    for r in runs:
        if "skipped" in r:
            return "skipped"
        if "hung" in r:
            return f"hung > {r['hung']:g} s"
        if "error" in r:
            return "error"
    return "–"


def _paired(runs: list[dict[str, Any]], floor: list[dict[str, Any]], key: str) -> float | None:
    """The median of the per-repetition ratios of ``key`` (run i of a row against run i of the
    floor, measured back to back): steadier than a ratio of medians when the machine's speed
    drifts between repetitions."""
    ratios = [a[key] / b[key] for a, b in zip(runs, floor, strict=False)
              if isinstance(a.get(key), (int, float)) and b.get(key)
              and not any(k in r for r in (a, b) for k in ("skipped", "error", "hung"))]
    return statistics.median(ratios) if ratios else None


def _bad(r: dict[str, Any]) -> bool:
    return any(k in r for k in ("skipped", "error", "hung"))


def _gmean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _beside(runs: list[dict[str, Any]], key: str) -> dict[int, float]:
    """Scenarios 1 and 2: each repetition's ratio of ``key``: the child's own ratio when the row
    and its floor ran in it (``--pairing chunks``: the median over its cycles in scenario 1, the
    sums' in scenario 2), else the row's run against the (geometric) mean of the two runs of
    its floor beside it (``run.paired_order``), by repetition."""
    out: dict[int, float] = {}
    for a in runs:
        if "ratio" in a:
            value = a["ratio"].get(key)
            if not _bad(a) and isinstance(value, (int, float)):
                out[a.get("rep", len(out))] = value
            continue
        floors = a.get("floors") or []
        values = [f[key] for f in floors if isinstance(f.get(key), (int, float)) and f[key] > 0]
        if (_bad(a) or not isinstance(a.get(key), (int, float)) or not values
                or len(values) < len(floors) or any(_bad(f) for f in floors)):
            continue
        out[a.get("rep", len(out))] = a[key] / _gmean(values)
    return out


def _chain(results: dict[str, list[dict[str, Any]]], row: str, key: str,
           to: str = "null") -> dict[int, float]:
    """A row's ratios to ``to`` (a floor), by repetition: against its own floor, times its
    floor's ratio to ``to`` (the floor measured as a row beside ``to``'s runs)."""
    own = _beside(results.get(row, []), key)
    floor = _floor(row)
    if row == to or floor == to:
        return own
    up = _chain(results, floor, key, to) if floor != row else {}
    return {rep: v * up[rep] for rep, v in own.items() if rep in up}


def _xs(ratios: dict[int, float] | list[float]) -> str:
    """The median ratio, and the repetitions' min–max beside it."""
    v = list(ratios.values()) if isinstance(ratios, dict) else list(ratios)
    if not v:
        return "–"
    med = statistics.median(v)
    return f"{med:.2f}x" if len(v) == 1 else f"{med:.2f}x ({min(v):.2f}–{max(v):.2f})"


def _med_of(ratios: dict[int, float]) -> float | None:
    return statistics.median(ratios.values()) if ratios else None


def pairing_check(results: Results, scenario: str, key: str) -> str | None:
    """The floor against itself (``null``), three ways, from one run's children: the null row
    between two null runs (this runner's pairing); each null floor run against the two null
    runs two children away (a harder test of the same pairing); and each null floor run
    against its repetition's first one, which is what a row at its place read when the floor
    ran once per repetition (the earlier pairing). The closer to 1.00x, the less of the
    host's drift is left in a ratio."""
    floors = (results.get(f"{scenario}-floors") or {}).get("null", [])
    runs = [f for f in floors if not _bad(f) and isinstance(f.get(key), (int, float))]
    if len(runs) < 3:
        return None
    by_rep: dict[int, list[dict[str, Any]]] = {}
    for f in runs:
        by_rep.setdefault(f.get("rep", 0), []).append(f)
    near: list[float] = []
    first: list[float] = []
    for chain in by_rep.values():
        chain.sort(key=lambda f: f.get("seq", 0))
        near += [chain[i][key] / _gmean([chain[i - 1][key], chain[i + 1][key]])
                 for i in range(1, len(chain) - 1)]
        first += [f[key] / chain[0][key] for f in chain[1:]]

    def dev(v: list[float]) -> str:
        if not v:
            return "–"
        off = statistics.median(abs(x - 1) for x in v) * 100
        return f"median {off:.0f} % off 1.00x, {min(v):.2f}–{max(v):.2f}x over {len(v)}"

    self_row = _beside((results.get(scenario) or {}).get("null", []), key)
    text = (f"Pairing check, NullHandler against itself ({key}): the null row between two "
            f"null runs {_xs(self_row)}; each null floor run against the two beside it in the "
            f"chain (two children away): {dev(near)}; each against its repetition's first "
            f"floor run, the earlier pairing (one floor run per repetition): {dev(first)}.")
    spreads = _spreads(results, scenario, key)
    if spreads:
        new, old = (statistics.median(v) for v in zip(*spreads, strict=True))
        text += (f" Each row's repetitions, max/min of their ratios (the median over "
                 f"{len(spreads)} rows): {new:.2f} against the floor runs beside the row, "
                 f"{old:.2f} against the repetition's first floor run.")
    return text


def cycle_ratios(run: dict[str, Any], key: str) -> list[float]:
    """A ``--pairing chunks`` child's per-cycle ratios of ``key``: (R + F2 - F1) / F1 of the
    clock's chunk times; for a rate (``events_per_s``), its inverse, F1 / (R + F2 - F1)."""
    if _bad(run) or not run.get("cycles"):
        return []
    k = KEYS.index(key) if key in KEYS else 0
    ratios = cycle_cost([[chunk[k] for chunk in c] for c in run["cycles"]])["ratios"]
    return [1 / x for x in ratios if x > 0] if key == "events_per_s" else ratios


def _quartiles(v: list[float]) -> str:
    q = statistics.quantiles(v, n=4) if len(v) >= 2 else v * 3
    return f"{q[1]:.2f}x (quartiles {q[0]:.2f}–{q[2]:.2f} over {len(v)} cycles)"


def chunk_check(results: Results, scenario: str, key: str) -> str | None:
    """``--pairing chunks``: each floor against itself in one process (the ``null`` row, the
    other floors in ``<scenario>-self``): the children's ratios, and the quartiles of all
    their cycles'; the flusher's spill (F2 - F1) / F1 over the rows; the rows paired across
    processes instead."""
    rows = results.get(scenario) or {}
    selves = {"null": rows.get("null", []), **(results.get(f"{scenario}-self") or {})}
    parts = []
    for floor, runs in selves.items():
        own = _beside(runs, key)
        cycles = [x for r in runs for x in cycle_ratios(r, key)]
        if own and cycles:
            parts.append(f"{floor} {_xs(own)}, its cycles {_quartiles(cycles)}")
    if not parts:
        return None
    text = (f"Pairing check, each floor against itself in one process ({key}; the children's "
            f"ratios, median and min–max): " + "; ".join(parts) + ".")
    spill = {row: statistics.median(v) for row, runs in rows.items() if row not in FLOORS
             and (v := [r["spill"][key] for r in _ok(runs)
                        if isinstance((r.get("spill") or {}).get(key), (int, float))])}
    if spill:
        top = max(spill, key=lambda row: spill[row])
        text += (f" The flusher's spill, (F2 - F1) / F1 summed over a child's cycles, charged "
                 f"to the row: median {statistics.median(spill.values()) * 100:+.1f} % over "
                 f"{len(spill)} shipping rows, {min(spill.values()) * 100:+.1f} to "
                 f"{spill[top] * 100:+.1f} % ({top}).")
    return text


def _spreads(results: Results, scenario: str, key: str) -> list[tuple[float, float]]:
    """(max/min of a row's ratios to the floor runs beside it, the same to its floor's first
    run in each repetition) for every row with two repetitions or more."""
    first: dict[tuple[str, int], dict[str, Any]] = {}
    for floor, runs in (results.get(f"{scenario}-floors") or {}).items():
        for f in runs:
            at = (floor, f.get("rep", 0))
            if not _bad(f) and isinstance(f.get(key), (int, float)) and (
                    at not in first or f.get("seq", 0) < first[at].get("seq", 0)):
                first[at] = f
    out = []
    for row, runs in (results.get(scenario) or {}).items():
        beside = _beside(runs, key)
        old = [r[key] / first[at][key] for r in runs
               if r.get("rep") in beside and (at := (_floor(row), r["rep"])) in first]
        if len(beside) >= 2 and len(old) == len(beside):
            new = list(beside.values())
            out.append((max(new) / min(new), max(old) / min(old)))
    return out


def _pct(runs: list[dict[str, Any]], key: str) -> str:
    """The flusher's spill of a ``--pairing chunks`` row, (F2 - F1) / F1, median over the
    repetitions, in % of the floor's chunks."""
    v = [r["spill"][key] for r in _ok(runs)
         if isinstance((r.get("spill") or {}).get(key), (int, float))]
    return f"{statistics.median(v) * 100:+.1f} %" if v else "–"


def _x(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "–"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _stat(r: dict[str, Any], key: str) -> Any:
    return (r.get("stats") or {}).get(key)


def report(results: Results, machine: dict[str, Any], a: Namespace) -> str:
    out: list[str] = []
    m = machine
    out.append(f"Machine: {m['cpus']} CPUs, {m['implementation']} {m['python']} on "
               f"{m['platform']}; orjson {m['orjson'] or 'not installed'}; gzip by "
               f"{'ISA-L (isal ' + m['isal'] + ')' if m.get('isal') else 'zlib'}; loghandler "
               f"{m['loghandler']}, structlog {m['structlog']}, opentelemetry-sdk "
               f"{m['opentelemetry-sdk']}, logtail-python {m['logtail-python']}.")
    ceil = (results.get("ceiling") or {}).get("receiver", [{}])[0]
    if "plain" in ceil:
        out.append(f"Receiver ceiling (pre-encoded batches of 1,000 events, one keep-alive "
                   f"connection from another process): {_fmt(ceil['plain'])} events/s plain, "
                   f"{_fmt(ceil['gzip'])} events/s gzip.")
    chunks = getattr(a, "pairing", "processes") == "chunks"
    beside = ("against its floor alternated with it in chunks of 5,000 calls inside its "
              "process" if chunks else "against the runs of its floor beside it")
    out.append(f"Medians of {a.reps} repetition(s) for scenarios 1, 2, 3 (min–max in "
               f"brackets); in scenarios 1 and 2 each row's ratio is taken {beside}, in 3 "
               f"and 7 within each repetition, whose rows run "
               f"back to back; call counts scaled by "
               f"{a.scale:g}; timed loops capped at {a.cap:g} s (the calls column says how "
               f"many were made).")
    targets: list[str] = []
    rows_of = lambda s: list((results.get(s) or {}).items())  # noqa: E731

    if "1" in results:
        one = results["1"]
        body = []
        for row, runs in rows_of("1"):
            own = _beside(runs, "ns_per_call")
            cpu = [f"{_spread(runs, key, 1, 1e-3)} ({_xs(_beside(runs, key))})"
                   if _vals(runs, key) else "–"
                   for key in ("thread_cpu_ns_per_call", "cpu_ns_per_call")]
            body.append([LABELS[row], _spread(runs, "ns_per_call", 0, 1e-3),
                         _xs(_chain(one, row, "ns_per_call")), _xs(own),
                         _xs([r["pooled"]["ns_per_call"] for r in _ok(runs) if "pooled" in r]),
                         _pct(runs, "ns_per_call"), *cpu,
                         _spread(runs, "requests_per_1k", 1)
                         if _vals(runs, "requests_per_1k") else "–",
                         _spread(runs, "calls"),
                         _spread(runs, lambda r: _stat(r, "dropped"))])
            med = _med_of(own)
            if _ours(row) and med is not None:
                targets.append(_check("1", f"{row}: {med:.2f}x its floor ({_floor(row)}, "
                                           "target <= 1.5x)", med <= 1.5))
        out.append("\n### 1. App-thread cost (µs per call, healthy receiver)\n")
        out.append(("Each row's child builds its own floor too and alternates them in cycles "
                    "of three chunks of 5,000 calls: F1 (the floor), R (the row), F2 (the floor "
                    "again, which the row's flusher may slow while it sends R's events); the "
                    "row's cost in a cycle is R + (F2 - F1), against F1. \"x own floor\" is "
                    "the median over the repetitions of each child's median over its "
                    "cycles (40 in a full run), the repetitions' min–max in brackets; "
                    "\"pooled\" the same of each child's sums' ratio; \"spill\" the sum of "
                    "F2 - F1 over the sum of F1 (charged to the row). \"x "
                    if chunks else
                    "Each row's child runs between two children of its own floor; \"x own "
                    "floor\" is the median over the repetitions of the row's run against those "
                    "two (their geometric mean), the repetitions' min–max in brackets; \"x ") +
                   "NullHandler\" chains a floor's own ratio to NullHandler's (structlog, "
                   "loguru, OpenTelemetry). CPU time beside the wall time: the calling "
                   "thread's own, and the whole process's (the flusher's too, gzip included), "
                   "x own floor; what the wall time adds to the calling thread's CPU time is "
                   "waiting, for the interpreter's lock or for a core (the receiver, in "
                   "another process, and the flusher's compression take the second one). "
                   "Requests per 1,000 calls: what the receiver had while the calls were "
                   "made.\n")
        out.append(_table(["row", "µs/call", "x NullHandler", "x own floor", "pooled", "spill",
                           "thread CPU µs/call", "process CPU µs/call", "requests/1k calls",
                           "calls", "dropped"], body))
        for check in (pairing_check(results, "1", "ns_per_call"),
                      chunk_check(results, "1", "ns_per_call"),
                      chunk_check(results, "1", "thread_cpu_ns_per_call")):
            if check:
                out.append("\n" + check)
        vs_null = _chain(one, "ingest", "ns_per_call")
        queue = _chain(one, "queue", "ns_per_call")
        vs_queue = {rep: v / queue[rep] for rep, v in vs_null.items() if rep in queue}
        if vs_null and vs_queue:
            a_, b_ = _med_of(vs_null), _med_of(vs_queue)
            assert a_ is not None and b_ is not None
            targets.append(_check("1", f"IngestHandler {a_:.2f}x NullHandler "
                                       f"(target <= 1.5x), {b_:.2f}x QueueHandler "
                                       "(target <= 0.5x)", a_ <= 1.5 and b_ <= 0.5))

    if "2" in results:
        two = results["2"]
        body = []
        for row, runs in rows_of("2"):
            delivered = "–" if row in FLOORS else (
                f"{_spread(runs, 'delivered')} / {_spread(runs, 'expected')} of "
                f"{_spread(runs, 'calls')}")
            own = _beside(runs, "events_per_s")
            body.append([LABELS[row], _spread(runs, "events_per_s"),
                         _xs(_chain(two, row, "events_per_s")), _xs(own),
                         _pct(runs, "events_per_s"), delivered,
                         _spread(runs, "drain_s", 2) if _vals(runs, "drain_s") else "–",
                         _spread(runs, "call_rate")])
            med = _med_of(own)
            if _ours(row) and med is not None:
                every = all(r.get("delivered", 0) >= r.get("expected", 1) for r in _ok(runs))
                targets.append(_check("2", f"{row}: {med:.2f}x its floor's call rate "
                                           f"(target >= 0.65x), every event accounted for: "
                                           f"{every}", med >= 0.65 and every))
        out.append("\n### 2. End to end (events/s from the first call until the receiver "
                   "acknowledged the last; a policy's drops, counted, as configured)\n")
        out.append("Each row alternated with its own floor in one process, 20 cycles of "
                   "(F1, R, F2) chunks of 5,000 calls from the row's first call: the row's time "
                   "is its chunks, plus each cycle's F2 - F1 (\"spill\", over the F1 chunks' "
                   "time), plus the drain (the final flush and the wait until the receiver "
                   "acknowledged every event); the floor's time is its F1 chunks. \"x own "
                   "floor\" is the median of the repetitions' ratios (min–max in brackets).\n"
                   if chunks else
                   "Each row between two runs of its own floor, as in scenario 1: \"x own "
                   "floor\" is the median of the repetitions' ratios to them (min–max in "
                   "brackets).\n")
        out.append(_table(["row", "events/s", "x NullHandler calls/s", "x own floor", "spill",
                           "delivered / expected of calls", "drain s", "app calls/s"], body))
        for check in (pairing_check(results, "2", "events_per_s"),
                      chunk_check(results, "2", "events_per_s")):
            if check:
                out.append("\n" + check)
        runs = two.get("ingest", [])
        rate = _med_of(_chain(two, "ingest", "events_per_s"))
        if rate:
            every = all(r.get("delivered") == r.get("calls") for r in _ok(runs))
            targets.append(_check("2", f"IngestHandler delivers {rate:.2f}x the "
                                       f"NullHandler call rate (target >= 0.65x), every event "
                                       f"delivered: {every}", rate >= 0.65 and every))

    if "3" in results:
        body = []
        for row, runs in rows_of("3"):
            body.append([LABELS[row]] + [_spread(runs, k) for k in
                                         ("p50_us", "p99_us", "p999_us", "max_us")]
                        + [_spread(runs, "behind_ms", 1)])
        out.append("\n### 3. Slow service (1 s per request): app-thread latency, 5,000 calls/s\n")
        out.append(_table(["row", "p50 µs", "p99 µs", "p99.9 µs", "max µs",
                           "max behind schedule ms"], body))
        runs = results["3"].get("ingest", [])
        p999 = _paired(runs, results["3"].get("null", []), "p999_us")
        mx, behind = _med(runs, "max_us"), _med(runs, "behind_ms")
        if p999 and mx is not None and behind is not None:
            targets.append(_check("3", f"IngestHandler p99.9 {p999:.2f}x NullHandler "
                                       f"(target <= 2x), max {mx / 1000:.1f} ms (target < 20), "
                                       f"behind schedule {behind:.1f} ms",
                                  p999 <= 2 and mx < 20_000 and behind < 20))

    if "4" in results:
        body = []
        floor4 = _ok(results["4"].get("null") or [])
        null_slowest = floor4[0].get("slowest_ms") if floor4 else None
        for row, runs in rows_of("4"):
            ok = _ok(runs)
            r = ok[0] if ok else {}
            st = r.get("stats") or {}
            exact = "–"
            if "submitted" in st:
                total = st["delivered"] + st["dropped"] + st["failed"] + st["spooled"] + \
                    st["queued"]
                exact = "yes" if st["submitted"] == total == r["calls"] + 0 else \
                    f"no ({st['submitted']} vs {total})"
            mqb = r.get("max_queue_bytes")
            body.append([LABELS[row], _spread(runs, "calls"), _spread(runs, "ns_per_call", 0, 1e-3),
                         _spread(runs, "slowest_ms", 1),
                         _spread(runs, "rss_growth", 1, 1 / MiB),
                         f"{mqb / MiB:g}" if mqb else "–",
                         str(st.get("dropped", "–")), str(st.get("queued", "–")), exact])
            if row == "ingest" and mqb and "rss_growth" in r:
                targets.append(_check("4", f"IngestHandler RSS growth "
                                           f"{r['rss_growth'] / MiB:.1f} MiB (target <= "
                                           f"{mqb / MiB + 16:g} MiB), drops counted exactly: "
                                           f"{exact}", r["rss_growth"] <= mqb + 16 * MiB
                                      and exact == "yes"))
            if row == "ingest" and null_slowest and "slowest_ms" in r:
                ratio = r["slowest_ms"] / null_slowest
                targets.append(_check("4", f"IngestHandler slowest call during the outage "
                                           f"{r['slowest_ms']:.1f} ms = {ratio:.2f}x the "
                                           f"NullHandler's {null_slowest:.1f} ms (target <= 2x)",
                                      ratio <= 2))
        out.append("\n### 4. Service down: the slowest call and memory during an outage\n")
        out.append(_table(["row", "calls", "µs/call", "slowest call ms", "peak RSS growth MiB",
                           "max_queue_bytes MiB", "dropped", "queued", "counts add up"], body))

    if "5-up" in results or "5-down" in results:
        body = []
        rows = list((results.get("5-up") or results.get("5-down") or {}).keys())
        for row in rows:
            up = (results.get("5-up") or {}).get(row, [])
            down = (results.get("5-down") or {}).get(row, [])
            u = _ok(up)[0] if _ok(up) else {}
            d = down[0] if down else {}
            lines = [ln for ln in d.get("stderr", []) if "Traceback" not in ln]
            first = lines[0][:110] if lines else ""
            body.append([LABELS[row], str(u.get("delivered", _why(up))) if row not in (
                "null", "structlog", "queue") else "–", _spread(up, "exit_s", 2),
                _spread(down, "exit_s", 2), str(len(d.get("stderr", []))),
                first.replace("|", "/")])
            if row == "ingest":
                st = d.get("shutdown_timeout") or 5.0
                ok_up = u.get("delivered") == 10_000 and u.get("exit_s", 9) < 0.5
                ok_down = d.get("exit_s", 99) <= st + 0.5 and len(d.get("stderr", [])) == 1
                targets.append(_check("5", f"service up: {u.get('delivered')} / 10000 delivered, "
                                           f"exit adds {u.get('exit_s', float('nan')):.2f} s "
                                           f"(target < 0.5); down: exit adds "
                                           f"{d.get('exit_s', float('nan')):.2f} s (target <= "
                                           f"shutdown_timeout {st:g} + 0.5), stderr lines: "
                                           f"{len(d.get('stderr', []))}", ok_up and ok_down))
        out.append("\n### 5. Exit after 10,000 events (seconds from the last call to the "
                   "end of the process)\n")
        out.append(_table(["row", "delivered (up)", "exit s (up)", "exit s (down)",
                           "stderr lines (down)", "first stderr line (down)"], body))

    if "6" in results:
        body = []
        per: dict[str, float] = {}
        for row, runs in rows_of("6"):
            ok = _ok(runs)
            r = ok[0] if ok else {}
            if r.get("delivered"):
                per[row] = r["bytes"] / r["delivered"]
                body.append([LABELS[row], f"{per[row]:.1f}", str(r["requests"]),
                             f"{r['delivered'] / r['requests']:.0f}"])
            else:
                body.append([LABELS[row], _why(runs), "–", "–"])
        out.append("\n### 6. Bytes on the wire per event (request bodies)\n")
        out.append(_table(["row", "bytes/event", "requests", "events/request"], body))
        if "ingest" in per and "ingest-nogzip" in per:
            ratio = per["ingest-nogzip"] / per["ingest"]
            targets.append(_check("6", f"gzip {ratio:.1f}x smaller (target >= 5x)", ratio >= 5))

    if "7a" in results or "7b" in results:
        body = []
        na = (results.get("7a") or {}).get("null", [])
        nb = (results.get("7b") or {}).get("null", [])
        for row in (results.get("7a") or results.get("7b") or {}):
            ra = (results.get("7a") or {}).get(row, [])
            rb = (results.get("7b") or {}).get(row, [])
            body.append([LABELS[row], _spread(ra, "ns_per_call", 0, 1e-3),
                         _x(_paired(ra, na, "ns_per_call")), _spread(rb, "events_per_s"),
                         _x(_paired(rb, nb, "events_per_s")),
                         "–" if row in FLOORS else
                         f"{_spread(rb, 'delivered')} / {_spread(rb, 'calls')}"])
        out.append("\n### 7. Eight application threads (µs per call = wall time / all calls)\n")
        out.append(_table(["row", "µs/call", "x NullHandler", "events/s end to end",
                           "x NullHandler", "delivered / calls"], body))

    if targets:
        out.append("\n### Targets (issues 7 and 36), measured side by side in this run\n")
        out += [f"- {t}" for t in targets]
    return "\n".join(out)


def _floor(row: str) -> str:
    """The row's own floor (issue 36): its ecosystem's call with nothing shipped."""
    return FLOOR.get(row, "null")


def _ours(row: str) -> bool:
    """A loghandler row held to issue 36's targets against its own floor."""
    return row == "ingest" or row in VARIANTS or row in FLOOR


def _check(scenario: str, text: str, ok: bool) -> str:
    return f"{'PASS' if ok else 'MISS'} scenario {scenario}: {text}"
