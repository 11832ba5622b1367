"""The examples run from a fresh checkout and do what they say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(name: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    return subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True,
                          text=True, timeout=60, env=env, cwd=ROOT)


def test_logging_config_example():
    """examples/logging_config.py ships its records but the health check (its filter), each with
    the service from fields=."""
    proc = run("logging_config.py")
    assert proc.returncode == 0, proc.stderr
    assert "delivered: True; the service stored 4 events (health checks filtered out: True; " \
           "service=shop-api)" in proc.stdout


def test_web_context_example():
    """examples/web_context.py: a Flask app over real HTTP; every event carries its request's
    id (from loghandler.context in a middleware) and the handler's fields=."""
    proc = run("web_context.py")
    assert proc.returncode == 0, proc.stderr
    assert "delivered: True; 6 events from 3 requests, each with its request's id: True" \
        in proc.stdout
    proxied = [line for line in proc.stdout.splitlines() if "req-from-proxy" in line]
    assert len(proxied) == 2 and all("/checkout" in line for line in proxied)
    assert all("service=shop-web" in line for line in proc.stdout.splitlines()[:6])


def test_app_events_example():
    """examples/app_events.py ships 1,001 application events through a Shipper."""
    proc = run("app_events.py")
    assert proc.returncode == 0, proc.stderr
    assert "delivered: True (1001 events" in proc.stdout


def test_ruff_clean():
    """The code base is ruff-clean (ruff comes with the dev extra)."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment")
    proc = subprocess.run([str(ruff), "check", "loghandler", "tests", "examples", "benchmarks"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean():
    """The package type-checks (mypy comes with the dev extra): its hints are kept true."""
    mypy = Path(sys.executable).with_name("mypy")
    if not mypy.exists():
        pytest.skip("mypy is not installed in this environment")
    proc = subprocess.run([str(mypy), "loghandler"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
