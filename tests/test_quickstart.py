"""The quickstart runs on a fresh install, with and without structlog, and says what happened."""

from __future__ import annotations

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
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60)


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
    assert proc.stderr == ""


def test_quickstart_with_structlog() -> None:
    """With structlog installed the structlog event arrives too."""
    pytest.importorskip("structlog", reason="structlog is in the test extra")
    proc = run(str(QUICKSTART))
    assert proc.returncode == 0, proc.stderr
    assert "received 4 events" in proc.stdout
    assert "user signed in" in proc.stdout
