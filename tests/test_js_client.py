"""The official JavaScript client (@axiomhq/js 2.0.0) and its logging transport
(@axiomhq/logging 0.4.1) against the local service, as a user runs them: tests/js/clients.mjs
in node. The packages come from the npm registry into a cache directory (once; CI has the
registry, and node: .ci/run makes sure of it).

Without node this test skips, except where LOGHANDLER_REQUIRE_NODE=1 says it must run (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from loghandler.testing import LocalService

TOKEN = "js-client-token"
PACKAGES = ["@axiomhq/js@2.0.0", "@axiomhq/logging@0.4.1"]
SCRIPT = Path(__file__).with_name("js") / "clients.mjs"


def _install() -> Path:
    """The packages in a cache directory (installed once; npm's own cache makes a second
    install quick)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        if os.environ.get("LOGHANDLER_REQUIRE_NODE"):
            pytest.fail("node and npm are required here (LOGHANDLER_REQUIRE_NODE=1)")
        pytest.skip("node and npm are not installed")
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    where = base / "loghandler-tests" / "js-clients"
    marker = where / "installed.json"
    if not marker.exists() or json.loads(marker.read_text()) != PACKAGES:
        where.mkdir(parents=True, exist_ok=True)
        (where / "package.json").write_text('{"private": true, "type": "module"}\n')
        # --legacy-peer-deps: the logging package names @axiomhq/js ^1 as its peer, and runs
        # over 2.0.0, the client users install today.
        proc = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--legacy-peer-deps",
                               *PACKAGES], cwd=where, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        marker.write_text(json.dumps(PACKAGES))
    return where


def test_the_js_client_works_against_the_local_service() -> None:
    """Datasets, ingest (both clients), APL (tabular and legacy), the legacy query, fields,
    monitors, annotations, saved queries, dashboards, the current user, and the logging
    transport: every call the script makes answers as the real service's reference says."""
    where = _install()
    shutil.copy(SCRIPT, where / "clients.mjs")
    with LocalService(token=TOKEN, datasets=["js-logs"]) as svc:
        env = {**os.environ, "LOGHANDLER_URL": svc.url, "LOGHANDLER_TOKEN": TOKEN}
        proc = subprocess.run([shutil.which("node") or "node", "clients.mjs"], cwd=where,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        logged = svc.events("js-logs")
    assert got["errors"] == []
    assert got["counts"] == [["error", 1], ["info", 2]]
    assert got["aplMatches"] == 2
    assert got["legacyTotals"] == [["error", "events", 1], ["info", "events", 2]]
    assert {"_time:datetime", "level:string", "message:string", "n:integer"} <= set(
        got["fields"])
    assert got["mapFields"] == [] and got["monitorsLeft"] == 0
    assert got["annotations"] == ["v1"] and got["savedQueries"] == ["errors"]
    assert got["dashboard"] == "JS" and got["dashboards"] == ["js-dash"]
    assert got["user"] == "local"
    assert sorted(e.get("message") for e in logged) == ["payment failed", "user signed in"]
    assert {e.get("level") for e in logged} == {"info", "error"}
