"""A tiny run of the benchmark suite: it still runs end to end and its accounting holds.

No timing is asserted here (timings belong in the benchmark's output): only that every scenario
produced a result, that every event reached the receiver, and that the exit paths behave.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("structlog", reason="the IngestProcessor row needs structlog")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--scale", "0.02", "--reps", "1",
         "--rows", "null,copy,ingest,processor", "--scenarios", "1,2,3,4,5,6,7", "--cap", "0.3",
         # Scenario 5: each exit timed from the child's last call (the start and the calls
         # are not the exit: counted in, they got a child killed half-way, its loss untold).
         # The service-down exit gets the quick run's 1 s; the service-up one a deadline a
         # loaded host meets with 10,000 events: it takes 0.1-0.3 s quiet or with two hogs a
         # core, 0.5-1.0 s with seven, so 1 s is a coin toss on a busy host (the second batch
         # then said unconfirmed or dropped at exit, not delivered).
         "--exit-timeout", "30", "--shutdown-timeout", "1", "--shutdown-timeout-up", "20",
         "--json", str(out)],
        # A bound on the run, not a timing: it took 40 s quiet, 102 s at a load of 14 on 2 cores.
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads(out.read_text())["results"]


class TestBenchmarkSmoke:
    def test_prints_machine_ceiling_and_every_table(self, smoke: tuple[str, dict]) -> None:
        """The report names the machine, the receiver's ceiling and has one table per scenario."""
        text, _ = smoke
        assert "CPUs" in text and "orjson" in text
        assert "Receiver ceiling" in text
        for heading in ("### 1.", "### 2.", "### 3.", "### 4.", "### 5.", "### 6.", "### 7.",
                        "### Targets"):
            assert heading in text
        assert "loghandler IngestHandler (gzip)" in text

    def test_every_event_reaches_the_receiver(self, smoke: tuple[str, dict]) -> None:
        """Scenario 2: the handler, the processor (and the copy floor) deliver every call."""
        _, results = smoke
        for row in ("copy", "ingest", "processor"):
            (run,) = results["2"][row]
            assert run["calls"] > 0
            assert run["delivered"] == run["calls"], (row, run)

    def test_floors_without_bounds_skip_the_bounded_scenarios(self, smoke: tuple[str, dict]
                                                               ) -> None:
        """The copy floor has no queue bound and nothing to deliver at exit: it is left out of
        scenarios 4 and 5, but measured in 1, 2, 3 and 7."""
        _, results = smoke
        for scenario in ("1", "2", "3", "7a", "7b"):
            assert "copy" in results[scenario]
        for scenario in ("4", "5-up", "5-down"):
            assert "copy" not in results[scenario] and "ingest" in results[scenario]

    def test_service_down_counts_add_up(self, smoke: tuple[str, dict]) -> None:
        """Scenario 4: with nothing listening, every call is queued or dropped, none lost."""
        _, results = smoke
        (run,) = results["4"]["ingest"]
        st = run["stats"]
        assert st["submitted"] == run["calls"]
        assert st["submitted"] == (st["delivered"] + st["dropped"] + st["failed"]
                                   + st["spooled"] + st["queued"])

    def test_exit_delivers_or_reports(self, smoke: tuple[str, dict]) -> None:
        """Scenario 5: up, all 10,000 delivered and nothing told; down, a bounded exit and one
        stderr line that accounts for all 10,000 (none delivered, every one said undelivered).
        Neither child was killed by the harness (it kills an exit 30 s after the last call:
        "hung"), so what the receiver counted is what the exit did."""
        _, results = smoke
        (up,) = results["5-up"]["ingest"]
        assert "hung" not in up and "error" not in up, up
        assert up["delivered"] == 10_000, up
        assert not [ln for ln in up["stderr"] if ln.startswith("loghandler")], up["stderr"]
        (down,) = results["5-down"]["ingest"]
        assert "hung" not in down and "error" not in down, down
        assert len(down["stderr"]) == 1 and "at exit" in down["stderr"][0]
        assert told(down["stderr"][0]) == (0, 10_000, 10_000), down["stderr"]
        assert down["shutdown_timeout"] == 1.0
        assert down["exit_s"] < 1.0 + 5.0  # shutdown_timeout plus a generous margin

    def test_each_row_is_paired_with_its_floor_beside_it(self, smoke: tuple[str, dict]
                                                         ) -> None:
        """Scenarios 1 and 2: every row ran between two runs of its own floor (the floor
        child just before and just after it), even a floor the rows asked for leave out
        (structlog, the processor's), and the report's ratio is taken against those two."""
        _, results = smoke
        for scenario in ("1", "2"):
            floors = results[f"{scenario}-floors"]
            for row, floor in (("null", "null"), ("ingest", "null"), ("processor", "structlog")):
                (run,) = results[scenario][row]
                before, after = run["floors"]
                assert (before["seq"], after["seq"]) == (run["seq"] - 1, run["seq"] + 1), run
                assert {before["seq"], after["seq"]} <= {f["seq"] for f in floors[floor]}

    def test_gzip_is_smaller_on_the_wire(self, smoke: tuple[str, dict]) -> None:
        """Scenario 6: bytes per event are counted and gzip shrinks them."""
        _, results = smoke
        (run,) = results["6"]["ingest"]
        assert run["delivered"] == run["calls"] and run["bytes"] > 0
        assert run["bytes"] / run["delivered"] < 100


class TestPairing:
    """The order of one repetition of scenarios 1 and 2, and the ratio taken from it."""

    def test_every_row_runs_between_two_runs_of_its_floor(self) -> None:
        from benchmarks.run import paired_order

        order = paired_order(["null", "ingest", "processor", "structlog", "loguru-sink"])
        assert order == [("floor", "null"), ("row", "null"), ("floor", "null"),
                         ("row", "ingest"), ("floor", "null"), ("row", "structlog"),
                         ("floor", "null"),
                         ("floor", "structlog"), ("row", "processor"), ("floor", "structlog"),
                         ("floor", "loguru"), ("row", "loguru-sink"), ("floor", "loguru")]

    def test_ratio_is_against_the_floor_runs_beside_the_row(self) -> None:
        """A row at the floor's speed reads 1.00x however far the host's speed moved since
        the repetition's first floor run; the chain to NullHandler multiplies the ratios."""
        from benchmarks.report import _beside, _chain

        results = {
            "null": [{"rep": 0, "ns_per_call": 9.0, "floors": [{"ns_per_call": 8.0},
                                                                {"ns_per_call": 10.125}]}],
            "structlog": [{"rep": 0, "ns_per_call": 12.0,
                           "floors": [{"ns_per_call": 6.0}, {"ns_per_call": 6.0}]}],
            "processor": [{"rep": 0, "ns_per_call": 18.0,
                           "floors": [{"ns_per_call": 12.0}, {"ns_per_call": 12.0}]},
                          {"rep": 1, "ns_per_call": 18.0, "error": "exit status 1",
                           "floors": [{"ns_per_call": 12.0}, {"ns_per_call": 12.0}]}],
        }
        assert _beside(results["null"], "ns_per_call") == {0: pytest.approx(1.0)}  # √(8·10.125)
        assert _beside(results["processor"], "ns_per_call") == {0: pytest.approx(1.5)}
        assert _chain(results, "processor", "ns_per_call") == {0: pytest.approx(3.0)}
        # A floor run that failed leaves the row without a ratio, not against one floor run.
        results["null"][0]["floors"][1]["error"] = "exit status 1"
        assert _beside(results["null"], "ns_per_call") == {}


def told(line: str) -> tuple[int, int, int]:
    """An exit line's figures: delivered, submitted, and the sum of those it says were not
    delivered (dropped, failed, still queued, spooled, unconfirmed)."""
    def number(text: str) -> int:
        return int(text.replace(",", ""))

    head = re.search(r"([\d,]+) of ([\d,]+) delivered", line)
    assert head, line
    rest = sum(number(n) for n in re.findall(
        r"([\d,]+) (?:dropped|failed|still queued|spooled|unconfirmed)\b", line))
    return number(head[1]), number(head[2]), rest
