"""bisector.py: the split loop (``Bisection``) and its report (``conclude``), driven as the
worker drives it, by a scripted ``post`` (no transport, no thread)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loghandler._engine.batches import Chunk
from loghandler._engine.bisector import Bisection, Tally, conclude, partial_error
from loghandler._engine.policy import Outcome, give_up_after
from loghandler._engine.reporter import Reporter
from loghandler._errors import ApiError, Error, PartialIngestError


def batch(n: int) -> Chunk:
    return Chunk(parts=[json.dumps({"i": i}).encode() for i in range(n)])


def ids(chunk: Chunk) -> list[int]:
    return [json.loads(p)["i"] for p in chunk.as_parts()]


class Script:
    """A ``post`` that refuses (400) every piece holding one of ``bad``, and records the
    pieces it was given; a ``settle`` that records final outcomes."""

    def __init__(self, bad: set[int] | None = None, refuse_all: bool = False) -> None:
        self.bad = bad or set()
        self.refuse_all = refuse_all
        self.posted: list[list[int]] = []
        self.settled: list[tuple[list[int], Outcome]] = []

    def post(self, chunk: Chunk) -> tuple[Outcome, Error | None]:
        got = ids(chunk)
        self.posted.append(got)
        if self.refuse_all or self.bad & set(got):
            return Outcome.REJECTED, ApiError(400, {"message": "bad event"}, "HTTP 400")
        return Outcome.DELIVERED, None

    def settle(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> bool:
        self.settled.append((ids(chunk), outcome))
        return True


def bisect(whole: Chunk, post: Any, settle: Any) -> tuple[list[Chunk], Tally]:
    """The worker's loop (``Worker.send``): post each piece the split hands out, settle what
    it says reached its outcome; ``settle`` returning False stops, and what is left comes
    back, in order."""
    split = Bisection(whole)
    while (piece := split.next()) is not None:
        outcome, error = post(piece)
        done = split.told(outcome, error)
        for i, chunk in enumerate(done):
            if not settle(chunk, outcome, error):
                return [*done[i:], *split.waiting()], split.tally
    return [], split.tally


class TestBisect:
    def test_a_good_batch_is_one_request(self) -> None:
        s = Script()
        left, tally = bisect(batch(100), s.post, s.settle)
        assert left == [] and s.posted == [list(range(100))]
        assert (tally.requests, tally.delivered, tally.rejected) == (1, 100, 0)

    @pytest.mark.parametrize("bad", [{0}, {37}, {99}, {12, 80}])
    def test_bad_events_are_isolated_and_the_rest_delivered(self, bad: set[int]) -> None:
        """Halving down to single events: the bad ones alone are rejected, in O(log n)
        requests per bad event, and every event is settled once, in order."""
        s = Script(bad)
        left, tally = bisect(batch(100), s.post, s.settle)
        assert left == []
        rejected = [i for got, o in s.settled if o is Outcome.REJECTED for i in got]
        assert rejected == sorted(bad)
        assert sorted(i for got, _ in s.settled for i in got) == list(range(100))
        assert [i for got, _ in s.settled for i in got] == list(range(100))  # in order
        assert tally.delivered == 100 - len(bad) and tally.rejected == len(bad)
        assert tally.requests <= len(bad) * 2 * 7 + 1  # 7 = ceil(log2 100)

    @pytest.mark.parametrize("n", [100, 5000])
    def test_a_batch_refused_as_a_whole_costs_log_n_requests(self, n: int) -> None:
        """400 to everything: give_up_after(n) requests, then the rest is settled untried."""
        s = Script(refuse_all=True)
        left, tally = bisect(batch(n), s.post, s.settle)
        assert left == []
        assert tally.requests == len(s.posted) <= give_up_after(n)
        assert tally.gave_up_as is Outcome.REJECTED and tally.rejected == n
        assert sorted(i for got, _ in s.settled for i in got) == list(range(n))

    def test_settle_saying_stop_returns_the_rest_in_order(self) -> None:
        """settle() returning False (replay: the service stopped taking them) ends the loop;
        the pieces not sent come back, oldest first."""
        s = Script({5})

        def settle(chunk: Chunk, outcome: Outcome, error: Error | None) -> bool:
            s.settle(chunk, outcome, error)
            return outcome is not Outcome.REJECTED

        left, _ = bisect(batch(8), s.post, settle)
        assert [i for c in left for i in ids(c)] == [5, 6, 7]

    def test_held_tells_what_is_held(self) -> None:
        """held(): the piece being posted, then the pieces waiting, in order; what is told
        is no longer held (a closing thread takes over the rest)."""
        s = Script({1})
        split = Bisection(batch(2))
        assert [ids(c) for c in split.held()] == [[0, 1]]
        piece = split.next()
        assert piece is not None and split.posting is piece
        assert [ids(c) for c in split.held()] == [[0, 1]]
        assert split.told(*s.post(piece)) == []  # refused: halved, nothing settled yet
        assert split.posting is None and [ids(c) for c in split.held()] == [[0], [1]]
        first = split.next()
        assert first is not None and [ids(c) for c in split.held()] == [[0], [1]]
        assert [ids(c) for c in split.told(*s.post(first))] == [[0]]
        assert [ids(c) for c in split.held()] == [[1]]


class TestConclude:
    def test_one_line_per_cause_and_one_on_error_per_kind(
            self, capfd: pytest.CaptureFixture[str]) -> None:
        errors: list[BaseException] = []
        reporter = Reporter("ds", errors.append)
        s = Script({3, 4})
        _, tally = bisect(batch(10), s.post, s.settle)
        conclude(reporter, tally, replay=False)
        lines = capfd.readouterr().err.splitlines()
        assert len(lines) == 1
        assert lines == ["loghandler: dataset 'ds': the service rejected 2 of 10 events (HTTP "
                         "400: bad event): check what they hold (stats().failed_rejected)"]
        assert len(errors) == 1 and isinstance(errors[0], ApiError)
        conclude(reporter, tally, replay=False)  # the same cause again: no second line
        assert capfd.readouterr().err == ""

    def test_refused_as_a_whole_is_said_so(self, capfd: pytest.CaptureFixture[str]) -> None:
        s = Script(refuse_all=True)
        _, tally = bisect(batch(64), s.post, s.settle)
        conclude(Reporter("ds", None), tally, replay=True)
        (line,) = capfd.readouterr().err.splitlines()
        assert line == ("loghandler: dataset 'ds': a batch of 64 events was refused whole (HTTP "
                        "400: bad event): check for a proxy in front of the service; 64 not "
                        "delivered (stats().replay_rejected)")

    def test_partial_error_names_the_first_failure(self) -> None:
        error = partial_error(8, 2, [{"timestamp": "t", "error": "invalid _time"}], of=10)
        assert isinstance(error, PartialIngestError)
        assert (error.ingested, error.failed) == (8, 2)
        assert "turned down 2 events of a batch of 10" in str(error)
        assert str(error).endswith(": invalid _time")
