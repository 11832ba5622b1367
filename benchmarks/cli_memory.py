"""Peak memory of ``loghandler ingest`` on a big JSON array on one line, and on the same as NDJSON.

    python -m benchmarks.cli_memory [--mb 50] [--pythonpath DIR]

Each run is a fresh ``python -m loghandler ingest`` process shipping to the local service
(``loghandler serve``, another process: a forked child's peak RSS would include this process's
memory as it was before exec); its peak RSS comes from ``wait4``'s rusage, nothing is sampled.
``--pythonpath`` runs another checkout's package (e.g. ``git archive HEAD~1 loghandler | tar -x
-C /tmp/before`` then ``--pythonpath /tmp/before``) to compare before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-cli-memory-token"


def write_inputs(directory: Path, mb: int) -> tuple[Path, Path, int]:
    """The same events as one single-line JSON array and as NDJSON, about ``mb`` MB each."""
    event = {"level": "info", "message": "GET /api/orders 200", "service": "shop",
             "latency_ms": 12.5, "pad": "x" * 120}
    line = json.dumps(event)
    n = mb * 1024 * 1024 // (len(line) + 1)
    array, ndjson = directory / "events.json", directory / "events.ndjson"
    with open(array, "w") as a, open(ndjson, "w") as nd:
        a.write("[")
        for i in range(n):
            text = json.dumps({**event, "i": i})
            a.write(("," if i else "") + text)
            nd.write(text + "\n")
        a.write("]")
    return array, ndjson, n


def _env(pythonpath: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env["PYTHONPATH"] = pythonpath
    return env


def peak_rss_mb(path: Path, url: str, pythonpath: str) -> tuple[float, float, str]:
    env = _env(pythonpath)
    env.update(LOGHANDLER_URL=url, LOGHANDLER_TOKEN=TOKEN)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "loghandler", "ingest", "bench", str(path),
                             "--no-progress"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=path.parent)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    assert proc.stdout is not None
    summary = proc.stdout.read().strip()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024, elapsed, summary  # ru_maxrss is in KiB on Linux


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_memory",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=50, help="size of each input (default 50)")
    parser.add_argument("--pythonpath", help="run the loghandler package found in this directory")
    args = parser.parse_args(argv)
    pythonpath = args.pythonpath or str(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        array, ndjson, n = write_inputs(Path(tmp), args.mb)
        print(f"{n:,} events, {array.stat().st_size / 1e6:.0f} MB each, package from "
              f"{pythonpath}")
        server = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--port", "0",
                                   "--quiet", "--token", TOKEN], env=_env(pythonpath),
                                  stdout=subprocess.PIPE, text=True, cwd=tmp)
        try:
            assert server.stdout is not None
            url = server.stdout.readline().split("listening on ")[1].split()[0]
            for label, path in (("JSON array, one line", array), ("NDJSON", ndjson)):
                rss, elapsed, summary = peak_rss_mb(path, url, pythonpath)
                print(f"  {label:<22} peak RSS {rss:6.1f} MB   {elapsed:5.1f} s   {summary}")
        finally:
            server.terminate()
            server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
