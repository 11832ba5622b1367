"""The local service under hostile clients: ``python -m benchmarks.local_hostile``.

Runs ``loghandler serve``'s service in a child process (so that its memory is its own), stores
``--events`` events, then for ``--seconds``:

- slow clients with no token hold ``--slow`` connections, each sending a byte a second;
- a client with a token that may query runs ``--heavy`` heavy queries at once, again and again
  (a runaway ``matches regex``, a ``summarize`` over every event, chained ``strcat``s that
  would make gigabytes);
- the client with the service's token runs ``take 1`` and ingests 100 events, each twice a
  second, each with its deadline (10 s).

It prints how fast the token's client was answered (and whether within its deadline), what the
hostile requests were answered, and the service's memory: resident at idle (after the fill),
the most seen during the run (sampled every 0.2 s) and the kernel's peak (VmHWM). Linux only
(reads /proc). ``--seconds 10 --events 20000`` for a quick run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

TOKEN = "bench-hostile-token"
MB = 1024 * 1024
_SERVER = r"""
import sys, threading
from loghandler._local.service import make_server
server = make_server("127.0.0.1", 0, tokens=[sys.argv[1]], create_datasets=True)
threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                 daemon=True).start()
print(server.url, flush=True)
sys.stdin.read()
server.shutdown()
server.server_close()
server.store.close()
"""
_A = "strcat(" + ", ".join(["message"] * 64) + ")"
_B = "strcat(" + ", ".join(["a"] * 64) + ")"
HEAVY = [
    ("runaway regex", "['bench'] | where message matches regex '(a|aa)+$'"),
    ("summarize by every message", "['bench'] | summarize count() by message"),
    ("chained strcat", f"['bench'] | extend a = {_A} | extend b = {_B} "
                       "| extend c = strcat(b, b, b, b)"),
]


def call(url: str, path: str, body: Any, token: str, timeout: float = 30.0) -> int:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return int(exc.code)
    except OSError:
        return 0  # no answer (refused, reset, timed out)


def memory(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    return 0


def run(events: int, seconds: float, slow: int, heavy: int) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, TOKEN], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    url = proc.stdout.readline().strip()
    try:
        return _measure(url, proc.pid, events, seconds, slow, heavy)
    finally:
        proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _measure(url: str, pid: int, events: int, seconds: float, slow: int, heavy: int
             ) -> dict[str, Any]:
    for first in range(0, events, 10_000):
        batch = [{"message": f"request {i} served", "n": i}
                 for i in range(first, min(events, first + 10_000))]
        assert call(url, "/v1/datasets/bench/ingest", batch, TOKEN) == 200
    call(url, "/v1/datasets/bench/ingest", [{"message": "a" * 40 + "!"}], TOKEN)
    req = urllib.request.Request(url + "/v2/tokens", method="POST", data=json.dumps({
        "name": "hostile", "datasetCapabilities": {"bench": {"query": ["read"]}}}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as answer:
        hostile = json.loads(answer.read())["token"]
    call(url, "/v1/datasets/_apl", {"apl": "['bench'] | take 1"}, TOKEN)
    idle = memory(pid, "VmRSS")
    stop = threading.Event()
    found: dict[str, Any] = {"take": [], "ingest": [], "late": 0, "failed": 0,
                             "hostile": {}, "rss": [idle]}
    lock = threading.Lock()

    def sample() -> None:
        while not stop.wait(0.2):
            found["rss"].append(memory(pid, "VmRSS"))

    def slow_clients() -> None:
        host, port = url.removeprefix("http://").split(":")
        socks = []
        for _ in range(slow):
            with contextlib.suppress(OSError):
                s = socket.create_connection((host, int(port)), timeout=2)
                s.send(b"GET /v1/datasets HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                socks.append(s)
        while not stop.wait(1.0):
            for s in socks:
                with contextlib.suppress(OSError):
                    s.send(b"x")
        for s in socks:
            s.close()

    def hostile_client(i: int) -> None:
        name, apl = HEAVY[i % len(HEAVY)]
        while not stop.is_set():
            status = call(url, "/v1/datasets/_apl", {"apl": apl, "timeout": 10}, hostile)
            with lock:
                counts = found["hostile"].setdefault(name, {})
                counts[status] = counts.get(status, 0) + 1

    def good_client() -> None:
        n = 0
        while not stop.wait(0.5):
            for kind, path, body in (
                    ("take", "/v1/datasets/_apl", {"apl": "['bench'] | take 1"}),
                    ("ingest", "/v1/datasets/bench/ingest",
                     [{"message": f"good {n}", "i": i} for i in range(100)])):
                started = time.monotonic()
                status = call(url, path, body, TOKEN, timeout=10)
                took = time.monotonic() - started
                found[kind].append(took)
                if status != 200:
                    found["failed"] += 1
                elif took > 10:
                    found["late"] += 1
            n += 1

    threads = [threading.Thread(target=sample), threading.Thread(target=slow_clients)]
    threads += [threading.Thread(target=hostile_client, args=(i,)) for i in range(heavy)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the hostile clients settle in
    good = threading.Thread(target=good_client)
    good.start()
    time.sleep(seconds)
    stop.set()
    good.join()
    for thread in threads:
        thread.join()
    found.update(idle=idle, peak=max(found["rss"]), hwm=memory(pid, "VmHWM"))
    return found


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (f"median {statistics.median(ordered) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
            f"max {ordered[-1] * 1000:.0f} ms ({len(ordered)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.local_hostile")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--slow", type=int, default=200, help="slow connections, no token")
    parser.add_argument("--heavy", type=int, default=6, help="heavy queries at once")
    args = parser.parse_args(argv)
    if not os.path.exists("/proc/self/status"):
        print("this benchmark reads /proc: Linux only", file=sys.stderr)
        return 2
    found = run(args.events, args.seconds, args.slow, args.heavy)
    print(f"{args.events:,} events; {args.slow} slow connections without a token and "
          f"{args.heavy} heavy queries at once for {args.seconds:g} s "
          f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)")
    print(f"  the token's take 1:  {_ms(found['take'])}")
    print(f"  the token's ingest:  {_ms(found['ingest'])}")
    print(f"  not answered 200: {found['failed']}; answered after its 10 s deadline: "
          f"{found['late']}")
    for name, counts in found["hostile"].items():
        print(f"  hostile {name}: {dict(sorted(counts.items()))}")
    print(f"  service RSS: idle {found['idle'] / MB:.0f} MB, most seen "
          f"{found['peak'] / MB:.0f} MB (+{(found['peak'] - found['idle']) / MB:.0f} MB), "
          f"peak (VmHWM) {found['hwm'] / MB:.0f} MB (+{(found['hwm'] - found['idle']) / MB:.0f}"
          " MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
