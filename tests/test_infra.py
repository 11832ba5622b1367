"""The project's own machinery: which interpreters get the compiled part (free-threaded builds
do not), the load harness's hogs (bounded by themselves), and .ci/run running exactly the
README's test command."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from loghandler._build import why_pure

ROOT = Path(__file__).resolve().parent.parent


def config(gil_disabled: object) -> Any:
    """sysconfig.get_config_var as a free-threaded build (1) or a default one (0/None) has it."""
    return lambda name: gil_disabled if name == "Py_GIL_DISABLED" else None


class TestFreeThreaded:
    @pytest.mark.parametrize("value", [0, None])
    def test_a_build_with_the_gil_gets_the_compiled_part(self, value: object) -> None:
        assert why_pure(config(value)) is None

    def test_a_free_threaded_build_gets_the_pure_path_and_says_why(self) -> None:
        reason = why_pure(config(1))
        assert reason is not None and "free-threaded" in reason and "GIL" in reason

    def test_setup_builds_no_extension_there(self, capsys: pytest.CaptureFixture[str]) -> None:
        """setup.py reads the same rule (by path: the package is not importable at build time)."""
        spec = importlib.util.spec_from_file_location("_loghandler_setup", ROOT / "setup.py")
        assert spec is not None and spec.loader is not None
        setup = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(setup)  # not __main__: setup() does not run
        assert [e.name for e in setup.extensions(config(0))] == [
            "loghandler._speedups", "loghandler._gzip"]
        capsys.readouterr()
        assert setup.extensions(config(1)) == []
        assert "not built" in capsys.readouterr().err

    def test_the_package_takes_the_python_path_there_and_doctor_says_why(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """_compiled reads the same rule at import (an extension built by hand is not loaded:
        importing it would turn the GIL back on), and doctor prints its reason."""
        import sysconfig

        from loghandler._engine import compiled as _compiled
        from loghandler.cli import doctor

        real = sysconfig.get_config_var
        monkeypatch.setattr(sysconfig, "get_config_var",
                            lambda name: 1 if name == "Py_GIL_DISABLED" else real(name))
        monkeypatch.delenv("LOGHANDLER_PURE_PYTHON", raising=False)
        for name in ("WHY_PYTHON", "speedups", "record_put", "format_record",
                     "items_size", "gzip_compress", "ACTIVE"):
            monkeypatch.setattr(_compiled, name, getattr(_compiled, name))  # restored after
        # the loader itself, run again under a faked free-threaded build.
        assert _compiled._load() is False  # noqa: SLF001
        monkeypatch.setattr(_compiled, "ACTIVE", False)
        reason = why_pure(config(1))
        assert reason is not None and reason == _compiled.WHY_PYTHON
        # doctor's line on the hot path, without running the whole report.
        assert doctor._hot_path() == f"pure Python: {reason}"  # noqa: SLF001


class TestLoadHarness:
    def test_a_hog_ends_when_the_run_that_started_it_dies(self, tmp_path: Path) -> None:
        """pytest killed (no session end, no cleanup): its hogs stop by themselves."""
        code = textwrap.dedent(f"""
            import os, sys
            sys.path.insert(0, {str(ROOT / "tests")!r})
            from cpuload import Hogs
            hogs = Hogs(2)
            print(" ".join(str(p.pid) for p in hogs.procs), flush=True)
            os._exit(0)  # as a killed run: nothing stops them
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        pids = [int(p) for p in out.split()]
        assert len(pids) == 2

        def gone(pid: int) -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            # A zombie (reparented, not yet reaped) has stopped spinning all the same.
            try:
                return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
            except OSError:
                return True

        # Each hog checks its parent between slices of a few milliseconds: 10 s is what
        # "by itself, at once" may take on a busy host, not a guess of how long it spins.
        assert wait_until(lambda: all(gone(p) for p in pids), 10)  # they stop without pytest

    def test_hogs_spin_and_stop(self) -> None:
        from cpuload import Hogs

        hogs = Hogs(1)
        try:
            # It spins: its own CPU time grows (what the summary line reports).
            stat = Path(f"/proc/{hogs.procs[0].pid}/stat")
            assert wait_until(lambda: int(stat.read_text().split(")")[1].split()[11]) > 0, 10)
        finally:
            hogs.stop()
        assert hogs.procs[0].returncode is not None and hogs.cpu > 0
        assert "1 CPU hog ran" in hogs.summary()


class TestCi:
    def test_ci_runs_exactly_the_readme_command(self) -> None:
        """.ci/run picks the README's test command by a pattern: it finds exactly one line,
        and that line runs both passes, the second even when the first fails."""
        run = (ROOT / ".ci" / "run").read_text()
        (pattern,) = re.findall(r'grep -m1 -E "(.+?)" README\.md', run)
        found = [line for line in (ROOT / "README.md").read_text().splitlines()
                 if re.search(pattern.replace("\\\\", "\\"), line)]
        assert len(found) == 1
        command = found[0]
        assert 'bash -c "$readme_command"' in run
        passes = command.split("pytest -q")
        assert len(passes) == 3 and "LOGHANDLER_PURE_PYTHON=1" in passes[1]
        assert "s=$?" in command and "[ $s = 0 ]" in command

    def test_the_readme_command_fails_when_only_the_first_pass_fails(
            self, tmp_path: Path) -> None:
        """The shape of the command, with stand-in passes: the second runs after a failing
        first, and the line's status is a failure."""
        line = next(x for x in (ROOT / "README.md").read_text().splitlines()
                    if x.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'"))
        tail = line.split(" && ", 2)[2]  # what follows the install
        fake = tmp_path / ".venv" / "bin"
        fake.mkdir(parents=True)
        (fake / "python").write_text(
            "#!/bin/sh\necho \"pass pure=${LOGHANDLER_PURE_PYTHON:-0}\"\n"
            "[ -n \"$LOGHANDLER_PURE_PYTHON\" ] && exit $SECOND\nexit $FIRST\n")
        (fake / "python").chmod(0o755)
        for first, second, ok in ((1, 0, False), (0, 1, False), (0, 0, True)):
            proc = subprocess.run(["bash", "-c", tail], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=30,
                                  env={**{k: v for k, v in os.environ.items()
                                          if k != "LOGHANDLER_PURE_PYTHON"},
                                       "FIRST": str(first), "SECOND": str(second)})
            assert proc.stdout.split("\n")[:2] == ["pass pure=0", "pass pure=1"]
            assert (proc.returncode == 0) is ok
