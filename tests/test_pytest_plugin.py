"""The pytest plugin (entry point ``pytest11``) is loaded into every pytest run of every project
that installs the package: it must cost such a run nothing it does not use.

The entry point names the top-level module ``_loghandler_pytestplugin``, not a module of the
``loghandler`` package (whose ``__init__`` would load the library into every run). Its import
cost, measured by ``python -m benchmarks.plugin_cost``, is in docs/testing.md.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

UNRELATED = '''
import sys


def test_unrelated():
    # Another project's test: the plugin is loaded, the library is not.
    assert "_loghandler_pytestplugin" in sys.modules
    assert not [m for m in sys.modules if m == "loghandler" or m.startswith("loghandler.")]
'''

USES_FIXTURE = '''
import loghandler


def test_uses_the_fixture(loghandler_service):
    handler = loghandler.IngestHandler("plugin", url=loghandler_service.url,
                                       token=loghandler_service.token)
    handler.emit(__import__("logging").makeLogRecord({"msg": "from the fixture"}))
    assert handler.flush(10)
    assert [e["message"] for e in loghandler_service.events("plugin")] == ["from the fixture"]
    handler.close()
'''


def run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOGHANDLER_", "PYTEST_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=120, cwd=directory, env=env)


def test_the_entry_point_names_a_module_outside_the_package() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="pytest11")
                if e.name == "loghandler"]
    assert entry.value == "_loghandler_pytestplugin"


def test_a_run_that_does_not_use_it_imports_nothing_of_the_library(tmp_path: Path) -> None:
    (tmp_path / "test_unrelated.py").write_text(UNRELATED, encoding="utf-8")
    proc = run_pytest(tmp_path, "test_unrelated.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_the_fixture_works_in_another_project(tmp_path: Path) -> None:
    (tmp_path / "test_uses.py").write_text(USES_FIXTURE, encoding="utf-8")
    proc = run_pytest(tmp_path, "test_uses.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_the_package_module_names_the_same_fixture(tmp_path: Path) -> None:
    """With plugin auto-loading off, ``pytest_plugins = ["loghandler.pytest_plugin"]`` in a
    conftest.py gives the fixture."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["loghandler.pytest_plugin"]\n',
                                          encoding="utf-8")
    (tmp_path / "test_uses.py").write_text(USES_FIXTURE, encoding="utf-8")
    env_args = ("test_uses.py",)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *env_args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
