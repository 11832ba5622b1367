"""The quickstart runs on a fresh install, with and without structlog, and says what happened."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

QUICKSTART = Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"
# Runs the quickstart as __main__ with structlog made unimportable (the base install).
WITHOUT_STRUCTLOG = (
    "import runpy, sys; sys.modules['structlog'] = None; "
    f"runpy.run_path({str(QUICKSTART)!r}, run_name='__main__')"
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60)
    # The quickstart keeps its data for `loghandler serve --db`; the tests clean it up.
    m = re.search(r"loghandler serve --db (\S+)", proc.stdout)
    if m:
        shutil.rmtree(os.path.dirname(m.group(1)), ignore_errors=True)
    return proc


def test_quickstart_without_structlog() -> None:
    """With the base install only, it exits 0 and shows the three delivered log records."""
    proc = run("-c", WITHOUT_STRUCTLOG)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "structlog is not installed" in out
    assert "delivered=True" in out
    assert "received 3 events" in out
    assert "payment slow" in out and "order_id='A-1042'" in out
    assert "exception: KeyError" in out
    assert "updated view 1: description=" in out
    assert "What next" in out
    assert "error    1" in out  # the query step
    assert "http://127.0.0.1:8080/#token=quickstart" in out
    assert "loghandler tail quickstart -f" in out
    assert proc.stderr == ""


def test_quickstart_with_structlog() -> None:
    """With structlog installed the structlog event arrives too."""
    pytest.importorskip("structlog", reason="structlog is in the dev extra")
    proc = run(str(QUICKSTART))
    assert proc.returncode == 0, proc.stderr
    assert "received 4 events" in proc.stdout
    assert "user signed in" in proc.stdout


def test_the_commands_it_ends_with_show_its_events() -> None:
    """`loghandler serve --db FILE` (as printed) serves the quickstart's events to `tail`."""
    proc = subprocess.run([sys.executable, "-c", WITHOUT_STRUCTLOG], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"loghandler serve --db (\S+) --token quickstart --port 8080", proc.stdout)
    assert m is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    server = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--db", m.group(1),
                               "--token", "quickstart", "--port", "0", "--quiet"],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        url = None
        for _ in range(10):
            found = re.search(r"listening on (http://\S+)", server.stdout.readline())
            if found:
                url = found.group(1)
                break
        assert url is not None
        tail = subprocess.run([sys.executable, "-m", "loghandler", "tail", "quickstart"],
                              capture_output=True, text=True, timeout=60,
                              env={**env, "LOGHANDLER_URL": url,
                                   "LOGHANDLER_TOKEN": "quickstart"})
        assert tail.returncode == 0, tail.stderr
        # One line an event; an exception's traceback follows its event, indented.
        lines = [line for line in tail.stdout.splitlines() if not line.startswith(" ")]
        assert len(lines) == 3 and "order A-1042 received" in lines[0]
        assert "ERROR" in lines[2] and "order lookup failed" in lines[2]
        assert "    Traceback (most recent call last):" in tail.stdout
    finally:
        server.terminate()
        server.communicate(timeout=10)
        shutil.rmtree(os.path.dirname(m.group(1)), ignore_errors=True)
