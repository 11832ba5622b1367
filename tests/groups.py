"""Which tests are which, in one place: the delivery tests (``-m delivery``, run under the load
harness), the engine's tests (run on every Python the package claims, on both paths), and the
known product failures still open (marked xfail with what was found, until their fix lands).

``python tests/groups.py engine`` prints pytest's arguments for the engine's tests, one a line
(.ci/matrix and noxfile.py read them from here).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# Whole modules whose tests are delivery promises: spool, exit, fork, pools, job runners,
# signals, policies, the service's answers, accounting.
DELIVERY_MODULES = frozenset({
    "test_accounting.py", "test_answers.py", "test_bounds.py", "test_faults.py",
    "test_job_runners.py", "test_lifecycle.py", "test_policy.py", "test_process_life.py",
    "test_posting.py", "test_shipper.py", "test_soak.py", "test_spilling.py", "test_spool.py",
    "test_spool_full.py", "test_subinterpreters.py", "test_worker.py",
})
# Code blocks of the docs (tests/test_readme.py) that promise what arrives and what is counted.
DELIVERY_DOC_PAGES = ("docs/what-ships.md", "docs/reliability.md")

# The engine's tests and the compiled path's property tests: they need only the `test` extra
# (and orjson, the fast path users pick), and run on CPython 3.10-3.13, compiled and pure. The
# rest of the suite (the local service, the page, the CLI, the docs, the integrations, the
# packaging) runs on the main Python only: it exercises our code on top of the engine, not
# the interpreter's differences.
ENGINE_MODULES = (
    "test_accounting.py", "test_answers.py", "test_batches.py", "test_bisector.py",
    "test_bounds.py", "test_client.py", "test_config.py", "test_construction_errors.py",
    "test_contract.py", "test_encoding.py", "test_event_model.py", "test_events.py",
    "test_fastpath.py",
    "test_faults.py", "test_handler.py", "test_lifecycle.py", "test_package.py",
    "test_policy.py", "test_posting.py", "test_process_life.py", "test_security.py",
    "test_shipper.py", "test_soak.py", "test_speedups.py", "test_spilling.py", "test_spool.py",
    "test_spool_full.py", "test_subinterpreters.py", "test_time.py", "test_transport.py",
    "test_worker.py",
)

# Tests in those modules that need an integration's package (the `dev` extra): they run on the
# main Python, with the rest of the integrations.
ENGINE_DESELECT = (
    "test_transport.py::TestTransportArgument::test_loguru_sink",
    "test_transport.py::TestTransportArgument::test_opentelemetry_processor",
)

# Product failures found and not yet fixed: each is
# marked xfail where it fails, with what was found, so that .ci/run stays a check of everything
# else; remove an entry with its fix (a strict entry fails the run once the test passes).
# (test id prefix, where: "busy" everywhere, as they fail whenever the host is busy, which the
# load harness makes sure of and .ci/run's concurrent steps often do / "3.10", "3.12": on that
# Python only; strict: it fails every time there, so the mark must go with the fix; why)
KNOWN_FAILURES: tuple[tuple[str, str, bool, str], ...] = (
)


def mark_known_failures(items: list[Any]) -> None:
    import pytest

    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for item in items:
        nodeid = f"{item.path.name}::{item.nodeid.split('::', 1)[1]}" if "::" in item.nodeid \
            else item.nodeid
        for prefix, when, strict, why in KNOWN_FAILURES:
            if nodeid.startswith(prefix) and when in ("busy", version):
                item.add_marker(pytest.mark.xfail(reason=why, strict=strict))


def engine_args(root: Path | None = None) -> list[str]:
    """pytest's arguments for the engine's tests: the files, then a --deselect per test left
    to the main Python."""
    here = root or Path(__file__).resolve().parent
    args = [str(here / name) for name in ENGINE_MODULES]
    for test in ENGINE_DESELECT:  # as pytest names it: from the root (pyproject.toml's folder)
        args += ["--deselect", f"{here.name}/{test}"]
    return args


if __name__ == "__main__":
    if sys.argv[1:] != ["engine"]:
        sys.exit("usage: python tests/groups.py engine")
    print("\n".join(engine_args()))
