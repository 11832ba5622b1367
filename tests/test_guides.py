"""The guides' claims that a block alone cannot show, checked with the real thing.

gunicorn: the guide's app.py and gunicorn.conf.py, served by gunicorn with two forked workers;
requests are answered, then the master gets SIGTERM (what a supervisor or Kubernetes sends).
Every worker's events and gunicorn's own lines must have arrived when it has exited.

Kubernetes: the guide's recipe for Python as process 1 of a container (a SIGTERM handler that
exits), run as process 1 of a new PID namespace: SIGTERM ends it at once, its events delivered.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from loghandler.testing import LocalService

pytestmark = pytest.mark.slow

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "gunicorn.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)


def test_gunicorn_guide_delivers_every_worker_and_gunicorns_own_lines(tmp_path: Path) -> None:
    pytest.importorskip("gunicorn", reason="gunicorn is in the dev extra")
    app, conf = python_blocks(GUIDE)[:2]
    assert "def app(environ, start_response)" in app and "logconfig_dict" in conf
    (tmp_path / "app.py").write_text(app, encoding="utf-8")
    (tmp_path / "gunicorn.conf.py").write_text(conf, encoding="utf-8")
    with LocalService(token="gunicorn-guide") as svc:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=svc.token)
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--workers", "2",
             "--bind", "127.0.0.1:0", "app:app"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert server.stderr is not None
            port = None
            booted = 0
            for _ in range(200):  # gunicorn's start-up lines, bounded
                line = server.stderr.readline()
                if not line:
                    break
                found = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", line)
                if found:
                    port = int(found.group(1))
                booted += "Booting worker" in line
                if port and booted == 2:
                    break
            assert port, "gunicorn did not say where it listens"
            for path in ("/a", "/b", "/c", "/d"):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                    assert r.read() == b"ok\n"
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        assert server.returncode == 0
        events = svc.events("my-dataset")
    requests = [e for e in events if e.get("message") == "request"]
    assert sorted(e["path"] for e in requests) == ["/a", "/b", "/c", "/d"]
    assert all(e["service"] == "web" for e in requests)
    lines = [e for e in events if e.get("logger") == "gunicorn.error"]
    assert any("Booting worker" in e["message"] for e in lines)
    assert any("Shutting down" in e["message"] for e in lines)  # the master's, at SIGTERM
    assert len([e for e in events if e.get("logger") == "gunicorn.access"]) == 4


KUBERNETES = Path(__file__).resolve().parent.parent / "docs" / "guides" / "kubernetes.md"
WAIT_FOREVER = """
import threading
print("ready", flush=True)
threading.Event().wait()          # a server's main loop: only a signal ends it
"""


def pid_one(code: str, tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """Run code as process 1 of a new PID namespace, as a container's entry point runs."""
    script = tmp_path / "entry.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", sys.executable,
                             str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        pytest.skip(f"no PID namespace here (unshare needs root): {err.strip()[:200]}")
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return proc, int(children[0])


def test_kubernetes_guide_pid_one_exits_on_sigterm_and_delivers(tmp_path: Path) -> None:
    """The guide's recipe for Python as PID 1: SIGTERM ends it at once, its events delivered."""
    if sys.platform != "linux" or not Path("/usr/bin/unshare").exists():
        pytest.skip("PID namespaces are Linux's")
    (block,) = [b for b in python_blocks(KUBERNETES) if "signal.signal" in b]
    with LocalService(token="k8s-guide") as svc:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=svc.token)
        proc, pid = pid_one(block + WAIT_FOREVER, tmp_path, env)
        try:
            os.kill(pid, signal.SIGTERM)
            proc.communicate(timeout=30)  # without the recipe, only SIGKILL would end it
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0
        assert [e["message"] for e in svc.events("my-dataset")] == ["started"]
