"""What the pytest plugin costs a pytest run of a project that never uses it.

    python -m benchmarks.plugin_cost [--runs 15]

pytest loads every installed ``pytest11`` entry point, so this package's plugin is in every run
of every project in an environment where it is installed. Each row runs a one-test project (in
a temporary directory, nothing of loghandler imported by it) with the plugin and with
``-p no:loghandler``, alternating, in fresh processes. Reported: the instructions of each run
counted by valgrind's callgrind (when installed: a measure the machine's load cannot move), and
the best CPU time of ``--runs`` runs; the difference is the plugin's cost.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TEST = "def test_trivial():\n    assert 1 + 1 == 2\n"


def command(with_plugin: bool) -> list[str]:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_trivial.py"]
    return args if with_plugin else [*args, "-p", "no:loghandler"]


def cpu_seconds(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(cmd: list[str], cwd: Path, env: dict[str, str]) -> int | None:
    if shutil.which("valgrind") is None:
        return None
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           *cmd], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    return int(found.group(1)) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plugin_cost")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGHANDLER_", "PYTEST_"))}
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "test_trivial.py").write_text(TEST, encoding="utf-8")
        subprocess.run(command(True), cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
        best = {True: float("inf"), False: float("inf")}
        for _ in range(args.runs):
            for with_plugin in (True, False):
                best[with_plugin] = min(best[with_plugin], cpu_seconds(command(with_plugin),
                                                                        cwd, env))
        counts = {w: instructions(command(w), cwd, env) for w in (True, False)}
    print(f"{'pytest run of a one-test project':36} {'instructions':>14} {'best CPU time':>14}")
    for with_plugin, name in ((False, "-p no:loghandler"), (True, "with the plugin")):
        count = counts[with_plugin]
        shown = f"{count:,}" if count is not None else "(no valgrind)"
        print(f"{name:36} {shown:>14} {best[with_plugin] * 1000:>11.1f} ms")
    if counts[True] is not None and counts[False] is not None:
        extra = counts[True] - counts[False]
        print(f"{'the plugin':36} {extra:>+14,} {(best[True] - best[False]) * 1000:>+11.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
