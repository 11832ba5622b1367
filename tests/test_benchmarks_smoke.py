"""A tiny run of the benchmark suite: it still runs end to end and its accounting holds.

No timing is asserted here (timings belong in the benchmark's output): only that every scenario
produced a result, that every event reached the receiver, and that the exit paths behave.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys

import pytest

from benchmarks.report import cycle_ratios

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

    def test_each_row_is_paired_with_its_floor_inside_its_process(
            self, smoke: tuple[str, dict]) -> None:
        """Scenarios 1 and 2 (``--pairing chunks``, the default): each row's child alternated
        it with its own floor, cycles of three chunks of the same calls, and the report's ratio
        is the child's; each floor other than NullHandler was also paired with itself."""
        _, results = smoke
        for scenario in ("1", "2"):
            assert f"{scenario}-floors" not in results
            for row, floor in (("null", "null"), ("ingest", "null"), ("processor", "structlog")):
                (run,) = results[scenario][row]
                assert run["floor"]["row"] == floor, run
                assert len(run["cycles"]) >= 4 and {len(c) for c in run["cycles"]} == {3}
                key = "ns_per_call" if scenario == "1" else "events_per_s"
                assert run["ratio"][key] > 0 and run["floor"][key] > 0
            (self_check,) = results[f"{scenario}-self"]["structlog"]
            assert self_check["floor"]["row"] == "structlog" and self_check["cycles"]

    def test_gzip_is_smaller_on_the_wire(self, smoke: tuple[str, dict]) -> None:
        """Scenario 6: bytes per event are counted and gzip shrinks them."""
        _, results = smoke
        (run,) = results["6"]["ingest"]
        assert run["delivered"] == run["calls"] and run["bytes"] > 0
        assert run["bytes"] / run["delivered"] < 100


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Scenarios 1 and 2 with the earlier pairing, ``--pairing processes``."""
    out = tmp_path_factory.mktemp("bench") / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--scale", "0.02", "--reps", "1",
         "--rows", "null,ingest,processor", "--scenarios", "1,2", "--cap", "0.3",
         "--pairing", "processes", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())["results"]


class TestProcessesPairing:
    def test_each_row_is_paired_with_its_floor_beside_it(self, processes: dict) -> None:
        """Scenarios 1 and 2, ``--pairing processes``: every row ran between two runs of its
        own floor (the floor child just before and just after it), even a floor the rows ask
        for leave out (structlog, the processor's), and the report's ratio is taken against
        those two."""
        for scenario in ("1", "2"):
            floors = processes[f"{scenario}-floors"]
            for row, floor in (("null", "null"), ("ingest", "null"), ("processor", "structlog")):
                (run,) = processes[scenario][row]
                assert "cycles" not in run
                before, after = run["floors"]
                assert (before["seq"], after["seq"]) == (run["seq"] - 1, run["seq"] + 1), run
                assert {before["seq"], after["seq"]} <= {f["seq"] for f in floors[floor]}


def _child(cfg: dict) -> dict:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.scenarios", json.dumps(cfg)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stderr[-2000:]
    return json.loads(lines[0][7:])


class TestChunkPairing:
    """Scenarios 1 and 2 paired inside one process: the cycle arithmetic, and one child."""

    def test_a_row_at_its_floors_speed_reads_one(self) -> None:
        from benchmarks.scenarios import cycle_cost

        cost = cycle_cost([[10.0, 10.0, 10.0], [20.0, 20.0, 20.0], [5.0, 5.0, 5.0]])
        assert cost["ratios"] == [1.0, 1.0, 1.0]
        assert cost["median"] == cost["pooled"] == 1.0 and cost["spill"] == 0.0
        assert cost["quartiles"] == [1.0, 1.0, 1.0]

    def test_a_slower_f2_is_charged_to_the_row(self) -> None:
        """The floor chunk right after the row slowed by the row's flusher: the row pays it,
        the floor is F1 alone. A faster F2 (noise) comes off the row's cost as well."""
        from benchmarks.scenarios import cycle_cost

        cost = cycle_cost([[10.0, 12.0, 13.0], [10.0, 12.0, 11.0], [20.0, 24.0, 20.0],
                           [10.0, 12.0, 9.0]])
        assert cost["ratios"] == pytest.approx([1.5, 1.3, 1.2, 1.1])
        assert cost["median"] == pytest.approx(1.25)
        assert cost["row"] == pytest.approx(12 + 3 + 12 + 1 + 24 + 0 + 12 - 1)
        assert cost["floor"] == 50.0
        assert cost["pooled"] == pytest.approx(63 / 50)
        assert cost["spill"] == pytest.approx(3 / 50)

    def test_scenario_2_drains_right_after_the_last_row_chunk(self) -> None:
        """The wait for delivery comes after the last R, before its F2: a floor chunk first
        would let the flusher send the last events in time charged to no one. A cap that ends
        the cycles early drains after that cycle's R too."""
        from benchmarks.rows import Row
        from benchmarks.scenarios import _cycles

        seen: list[str] = []
        row = Row("r", lambda i: seen.append("R") if i % 10 == 0 else None)
        floor = Row("f", lambda i: seen.append("F") if i % 10 == 0 else None)
        _cycles(row, floor, {"chunk": 10, "cycles": 3, "cap": 60.0},
                lambda calls: seen.append(f"drain {calls}"))
        assert seen == ["F", "R", "F"] * 2 + ["F", "R", "drain 30", "F"]
        seen.clear()
        _cycles(row, floor, {"chunk": 10, "cycles": 3, "cap": 0.0},
                lambda calls: seen.append(f"drain {calls}"))
        assert seen == ["F", "R", "drain 10", "F"]

    def test_chunks_after_f2_are_not_charged(self) -> None:
        from benchmarks.scenarios import cycle_cost

        assert cycle_cost([[10.0, 12.0, 13.0, 99.0]])["ratios"] == pytest.approx([1.5])

    def test_a_rate_is_the_inverse_cycle_ratio(self) -> None:
        """Scenario 2's per-cycle ratios are the floor's rate over the row's: F1 / (R + F2 - F1)."""
        from benchmarks.report import cycle_ratios

        run = {"cycles": [[[10, 0, 0], [15, 0, 0], [15, 0, 0]]]}
        assert cycle_ratios(run, "events_per_s") == pytest.approx([0.5])
        assert cycle_ratios(run, "ns_per_call") == pytest.approx([2.0])
        assert cycle_ratios({**run, "error": "exit status 1"}, "ns_per_call") == []

    def test_one_row_in_one_process(self) -> None:
        """A real child of each scenario, IngestHandler beside NullHandler, a few small cycles
        (an F3 chunk too in scenario 1): every chunk timed on three clocks, the ratios are
        the cycles', and scenario 2 delivers every call of the row's chunks."""
        from benchmarks import receiver

        with receiver.start_receiver() as url:
            port = int(url.rsplit(":", 1)[1])
            common = {"row": "ingest", "floor": "null", "port": port, "threads": 1, "cap": 30.0,
                      "wait": 30.0, "stall": 10.0, "opts": {"shutdown_timeout": 1.0},
                      "chunk": 300, "cycles": 4}
            one = _child({**common, "kind": "app_cost", "tag": "one", "after": 2,
                          "base": f"{url}/t/one"})
            two = _child({**common, "kind": "end_to_end", "tag": "two",
                          "base": f"{url}/t/two"})
        assert one["calls"] == 1200 and one["floor"]["row"] == "null"
        assert len(one["cycles"]) == 4
        assert {len(c) for c in one["cycles"]} == {4}  # F1, R, F2, F3
        assert all(len(chunk) == 3 and chunk[0] > 0 for c in one["cycles"] for chunk in c)
        for key in ("ns_per_call", "thread_cpu_ns_per_call", "cpu_ns_per_call"):
            assert one["ratio"][key] == pytest.approx(statistics.median(cycle_ratios(one, key)))
        assert two["calls"] == two["delivered"] == two["expected"] == 1200
        assert {len(c) for c in two["cycles"]} == {3}
        wall = [[chunk[0] for chunk in c] for c in two["cycles"]]
        row_s = sum(r + f2 - f1 for f1, r, f2 in wall) / 1e9 + two["drain_s"]
        assert two["events_per_s"] == pytest.approx(1200 / row_s)
        assert two["ratio"]["events_per_s"] == pytest.approx(
            sum(c[0] for c in wall) / 1e9 / row_s)


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
