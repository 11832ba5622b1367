"""The test matrix on this machine, one session per Python and path (``pip install nox``).

    nox -l                                  # the sessions
    nox -s "engine-3.12(path='pure')"       # one Python, one path
    nox -s engine                           # the engine's tests on 3.10-3.13, both paths
    nox -s suite load                       # the whole suite (both paths), and under load
    nox -s load -- 10                       # the delivery tests under load, ten runs in a row
    nox -s wheel                            # the wheel, tested where no compiler is

``engine`` installs the package with only the ``test`` extra and runs the engine's tests and
the compiled path's property tests (tests/groups.py: ENGINE_MODULES), as .ci/matrix does in
CI; ``suite`` is the README's command on the main Python; ``load`` the delivery tests with a
CPU hog on every core (tests/cpuload.py). nox finds each interpreter as ``python3.X`` on PATH;
with pyenv, ``pyenv global 3.11 3.10 3.12 3.13`` puts them there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
MAIN = "3.11"

nox.options.sessions = ["engine", "suite", "load"]
nox.options.reuse_existing_virtualenvs = True

sys.path.insert(0, str(ROOT / "tests"))
from groups import engine_args  # noqa: E402


@nox.session(python=PYTHONS)
@nox.parametrize("path", ["compiled", "pure"])
def engine(session: nox.Session, path: str) -> None:
    """The engine's tests and the compiled path's property tests, on one Python and path."""
    # Not editable: the tests import the installed package, whose extensions are built for
    # this interpreter (the `pytest` script, unlike `python -m pytest`, keeps the working
    # directory's loghandler/ off sys.path).
    session.install(".[test]")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-n", "4", *engine_args(),
                env={"LOGHANDLER_PURE_PYTHON": "1" if path == "pure" else "0"})


@nox.session(python=MAIN)
def suite(session: nox.Session) -> None:
    """The whole suite, compiled then pure (the README's command, in nox's venv)."""
    session.install("-e", ".[dev]")
    failed = []
    for pure in ("0", "1"):
        try:
            session.run("python", "-m", "pytest", "-q", "-n", "4",
                        env={"LOGHANDLER_PURE_PYTHON": pure})
        except nox.command.CommandFailed:
            failed.append("pure" if pure == "1" else "compiled")
    if failed:
        session.error(f"the suite failed on the {' and '.join(failed)} path")


@nox.session(python=MAIN)
def load(session: nox.Session) -> None:
    """The delivery tests with every core busy; ``nox -s load -- 10``: ten runs in a row,
    stopping at the first that fails (the check of issue 35)."""
    session.install("-e", ".[dev]")
    runs = int(session.posargs[0]) if session.posargs else 1
    for run in range(1, runs + 1):
        session.log(f"run {run} of {runs} under load")
        session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "delivery",
                    "--load")


@nox.session(python=False)
def wheel(session: nox.Session) -> None:
    """Build the wheel here and test it in a fresh venv with no compiler (.ci/wheel)."""
    session.run("bash", str(ROOT / ".ci" / "wheel"), *session.posargs, external=True)
