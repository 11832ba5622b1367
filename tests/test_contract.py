"""The real service's contract: the ingest status of a 2xx, the limit answers (429 / 430 with
reset headers), bounded bisection. (The delivery policy's table: ``test_policy.py``.)"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TOKEN, balanced, body_events, wait_until
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

import loghandler
from loghandler import Client, ConfigurationError, PartialIngestError, RateLimitError, Shipper
from loghandler._engine.policy import give_up_after
from loghandler._engine.spool import Spool

DATASET = "ds"
FAST = {"flush_interval": 0.05, "retry_backoff": 0.01, "max_retry_delay": 0.05}

# An answer: (status, headers, body as JSON-able).
Answer = tuple[int, dict[str, str], Any]


def status_of(batch: list[dict[str, Any]]) -> Answer:
    """The real service's ingest status: events with "bad" are turned down one by one."""
    bad = [e for e in batch if e.get("bad")]
    return 200, {}, {
        "ingested": len(batch) - len(bad),
        "failed": len(bad),
        "failures": [{"timestamp": "2026-11-22T20:00:00Z",
                      "error": f"field limit of 256 exceeded (event {e.get('i')})"} for e in bad],
        "processedBytes": 100 * len(batch),
        "blocksCreated": 0,
        "walLength": len(batch) - len(bad),
    }


class Service:
    """An ingest endpoint on loopback answering by ``rule(batch, index)``; it stores the events
    of each 2xx but those its ingest status turns down ("bad")."""

    def __init__(self, server: HTTPServer, rule: Callable[[list[Any], int], Answer]) -> None:
        self.url = server.url_for("").rstrip("/")
        self.rule = rule
        self.lock = threading.Lock()
        self.stored: list[Any] = []
        self.log: list[dict[str, Any]] = []  # per request: status, events, arrival (wall)
        server.expect_request(f"/v1/datasets/{DATASET}/ingest", method="POST") \
            .respond_with_handler(self._handle)

    def _handle(self, request: Request) -> Response:
        arrived = time.time()
        batch = body_events(request.get_data(), request.headers)
        with self.lock:
            status, headers, answer = self.rule(batch, len(self.log))
            self.log.append({"status": status, "events": len(batch), "arrived": arrived,
                             "headers": headers})
            if 200 <= status < 300:
                self.stored.extend(e for e in batch if not e.get("bad"))
        return Response(json.dumps(answer), status, headers=headers,
                        content_type="application/json")

    def statuses(self) -> list[int]:
        with self.lock:
            return [r["status"] for r in self.log]


@pytest.fixture
def serve(_receiver_server: HTTPServer) -> Iterator[Callable[..., Service]]:
    _receiver_server.clear()
    yield lambda rule=lambda b, i: status_of(b): Service(_receiver_server, rule)
    _receiver_server.clear()


def shipper(svc: Service, **options: Any) -> Shipper:
    return Shipper(Client(TOKEN, url=svc.url), DATASET, **{**FAST, **options})


class Errors:
    """An on_error that records what it gets. The flusher calls it just after it settles the
    batch (which is what flush() waits for): ``wait(n)`` waits for the n-th call."""

    def __init__(self) -> None:
        self.got: list[BaseException] = []
        self.cond = threading.Condition()

    def __call__(self, exc: BaseException) -> None:
        with self.cond:
            self.got.append(exc)
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 5.0) -> list[BaseException]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.got) >= n, timeout)
            return list(self.got)


def stderr_lines(capfd: pytest.CaptureFixture[str]) -> list[str]:
    return [x for x in capfd.readouterr().err.splitlines() if x.startswith("loghandler:")]


def test_batch_size_over_the_service_limit_is_a_configuration_error() -> None:
    """The service takes at most 10,000 events per request: more is refused at construction."""
    with pytest.raises(ConfigurationError, match="10,000"):
        Shipper(Client(TOKEN, url="http://127.0.0.1:9"), DATASET, batch_size=10_001)
    Shipper(Client(TOKEN, url="http://127.0.0.1:9"), DATASET, batch_size=10_000).close(0)


# --------------------------------------------------------------------------- ingest status

class TestIngestStatus:
    def test_shipper_counts_the_events_turned_down(self, serve, capfd):
        """2 of 10 turned down: 8 delivered, 2 failed_by_service, flush False, one line with
        the service's error, one on_error call with the counts."""
        svc = serve()
        errors = Errors()
        s = shipper(svc, on_error=errors)
        for i in range(10):
            s.submit({"i": i, "bad": i in (3, 7)})
        assert s.flush(5) is False
        st = s.stats()
        assert (st.delivered, st.failed, st.failed_by_service) == (8, 2, 2) and balanced(st)
        assert len(svc.stored) == 8
        (err,) = errors.wait(1)
        assert isinstance(err, PartialIngestError) and isinstance(err, loghandler.Error)
        assert (err.ingested, err.failed) == (8, 2)
        assert err.failures[0]["error"] == "field limit of 256 exceeded (event 3)"
        (line,) = stderr_lines(capfd)
        assert "turned down 2 events" in line and "field limit of 256 exceeded" in line
        assert "failed_by_service" in line
        # Never retried: the service has answered for good.
        assert svc.statuses() == [200] and st.retried == 0
        for i in range(5):  # a later good batch is just delivered
            s.submit({"i": i})
        assert s.flush(5) is True
        s.close()
        assert stderr_lines(capfd) == []  # the cause was told once
        assert len(errors.got) == 1

    def test_handler(self, serve, capfd):
        """Through IngestHandler: the same account."""
        svc = serve()
        errors = Errors()
        h = loghandler.IngestHandler(DATASET, client=Client(TOKEN, url=svc.url),
                                     on_error=errors, **FAST)
        log = logging.getLogger("contract-handler")
        log.propagate = False
        log.setLevel(logging.INFO)
        log.addHandler(h)
        try:
            for i in range(20):
                log.info("event %d", i, extra={"i": i, "bad": i % 10 == 0})
            assert h.flush(5) is False
            st = h.stats()
            assert (st.delivered, st.failed_by_service) == (18, 2) and balanced(st)
            assert [type(e) for e in errors.wait(1)] == [PartialIngestError]
            assert len(stderr_lines(capfd)) == 1
        finally:
            log.removeHandler(h)
            h.close()
        assert len(errors.got) == 1

    def test_processor(self, serve):
        """Through IngestProcessor: the same account."""
        svc = serve()
        errors = Errors()
        proc = loghandler.IngestProcessor(DATASET, client=Client(TOKEN, url=svc.url),
                                          on_error=errors, **FAST)
        try:
            for i in range(12):
                proc(None, "info", {"event": "e", "i": i, "bad": i < 3})
            assert proc.flush(5) is False
            st = proc.stats()
            assert (st.delivered, st.failed_by_service) == (9, 3) and balanced(st)
            assert errors.wait(1)[0].failed == 3
        finally:
            proc.close()
        assert len(errors.got) == 1

    def test_other_2xx_bodies_mean_delivered(self, serve):
        """A 2xx whose body is not the status shape (empty, text, no "failed") is delivered."""
        bodies = iter(["", "ok", {"ingested": 5}, {"failed": 0}, None])
        svc = serve(lambda b, i: (200, {}, next(bodies)))
        s = shipper(svc)
        for _ in range(5):
            s.submit({"x": 1})
            assert s.flush(5) is True
        assert s.stats().delivered == 5 and s.stats().failed == 0
        s.close()

    def test_more_failures_than_events_keep_the_account(self, serve):
        """A status claiming more failures than events sent counts at most the batch."""
        svc = serve(lambda b, i: (200, {}, {"ingested": 0, "failed": 10 * len(b)}))
        s = shipper(svc)
        for i in range(4):
            s.submit({"i": i})
        assert s.flush(5) is False
        st = s.stats()
        assert st.failed_by_service == 4 and st.delivered == 0 and balanced(st)
        s.close()

    def test_spool_replay_counts_replay_rejected(self, serve, tmp_path: Path):
        """Spooled events replayed into a partial status: the turned-down ones are counted
        replay_rejected, the rest replayed, and the spool ends empty."""
        spool = Spool(tmp_path, DATASET)
        spool.write([json.dumps({"i": i, "bad": i in (1, 2, 5)}).encode() for i in range(10)])
        svc = serve()
        errors = Errors()
        s = shipper(svc, spool_dir=str(tmp_path), on_error=errors)
        try:
            assert wait_until(lambda: s.stats().replayed + s.stats().replay_rejected >= 10)
            st = s.stats()
            assert (st.replayed, st.replay_rejected) == (7, 3)
            assert [e.failed for e in errors.wait(1)] == [3]
        finally:
            s.close()
        assert len(errors.got) == 1
        assert not [p for p in tmp_path.rglob("*.spool")]

    def test_cli_ingest_summary_and_exit_status(self, serve, tmp_path: Path):
        """`loghandler ingest`: the summary counts the events turned down; exit status 1."""
        svc = serve()
        f = tmp_path / "events.ndjson"
        f.write_text("".join(json.dumps({"i": i, "bad": i in (0, 4)}) + "\n" for i in range(6)))
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)
        proc = subprocess.run([sys.executable, "-m", "loghandler", "ingest", DATASET, str(f),
                               "--no-progress"], capture_output=True, text=True, env=env,
                              timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert "6 events read, 4 delivered" in proc.stdout
        assert "2 rejected by the service" in proc.stdout
        assert "field limit of 256 exceeded" in proc.stderr
        assert len(svc.stored) == 4


# --------------------------------------------------------------------------- limits

def limited_until(resets: list[float], header: str, status: int) -> Callable[..., Answer]:
    """429/430 with only a reset header, while a window is on; each window ends at its reset,
    and the first request after it opens the next one (until none are left)."""
    state = {"reset": None}
    windows = iter(resets)

    def rule(batch: list[Any], index: int) -> Answer:
        now = time.time()
        reset = state["reset"]
        if reset is not None and now < reset:
            return status, {header: str(reset)}, {"code": status, "message": "limit"}
        nxt = next(windows, None)
        if nxt is None:
            return status_of(batch)
        state["reset"] = nxt
        return status, {header: str(nxt)}, {"code": status, "message": "limit"}

    return rule


class TestLimits:
    @pytest.mark.parametrize(("status", "header"), [(429, "X-RateLimit-Reset"),
                                                    (430, "X-IngestLimit-Reset")])
    def test_reset_header_pauses_without_spending_retries(self, serve, status, header):
        """Three limit windows in a row, only a reset header (epoch seconds, about a second
        away), max_retries=2: everything delivered, and no request before a reset."""
        now = time.time()
        svc = serve(limited_until([math.ceil(now) + k for k in (1, 2, 3)], header, status))
        s = shipper(svc, max_retries=2)
        for i in range(10):
            s.submit({"i": i})
        assert s.flush(10) is True
        st = s.stats()
        assert st.delivered == 10 and st.failed == 0 and balanced(st)
        log = svc.log
        assert [r["status"] for r in log] == [status] * 3 + [200]
        for before, after in itertools.pairwise(log):
            assert after["arrived"] >= float(before["headers"][header])
        s.close()

    def test_default_options_ride_out_minute_style_windows(self, serve):
        """A window-based rate limit (one request per window, 429 with X-RateLimit-Reset)
        hit over and over with the default options loses nothing, and no request arrives
        inside a window that already answered 429."""
        window = 1.0
        counts: dict[int, int] = {}

        def rule(batch: list[Any], index: int) -> Answer:
            now = time.time()
            w = int(now // window)
            counts[w] = counts.get(w, 0) + 1
            if counts[w] > 1:  # the second request of a window
                reset = (w + 1) * window
                return 429, {"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0",
                             "X-RateLimit-Reset": str(int(reset))}, {"code": 429}
            return status_of(batch)

        svc = serve(rule)
        s = Shipper(Client(TOKEN, url=svc.url), DATASET)  # default options
        for k in range(4):  # one batch after the other: most land in a used window
            for i in range(5):
                s.submit({"i": k * 5 + i})
            assert s.flush(15) is True
        st = s.stats()
        assert st.delivered == 20 and st.failed == 0 and balanced(st)
        assert sorted(e["i"] for e in svc.stored) == list(range(20))
        limited = [w for w, n in counts.items() if n > 1]
        assert len(limited) >= 2
        assert all(counts[w] == 2 for w in limited)  # one 429 per window, then we waited
        s.close()

    def test_close_ends_a_limit_wait_and_spools(self, serve, tmp_path: Path):
        """A reset far away: close() returns at its deadline and the batch is spooled."""
        far = time.time() + 600
        svc = serve(lambda b, i: (429, {"X-RateLimit-Reset": str(far)}, {"code": 429}))
        s = shipper(svc, spool_dir=str(tmp_path))
        for i in range(5):
            s.submit({"i": i})
        assert s.flush(0.3) is False
        started = time.monotonic()
        s.close(timeout=0.5)
        assert time.monotonic() - started < 2
        st = s.stats()
        assert st.spooled == 5 and balanced(st)
        assert svc.statuses() == [429]

    def test_new_events_keep_queueing_while_paused(self, serve):
        """While sending is paused, submit() stays O(1) and queues within the bounds."""
        svc = serve(limited_until([math.ceil(time.time()) + 1], "X-RateLimit-Reset", 429))
        s = shipper(svc, max_queue_size=50)
        s.submit({"i": -1})
        s.flush(0.2)
        started = time.monotonic()
        for i in range(100):
            s.submit({"i": i})
        assert time.monotonic() - started < 0.5
        assert s.flush(10) is True
        st = s.stats()
        assert st.dropped_queue_full >= 50 and st.queued == 0
        assert st.delivered + st.dropped_queue_full == 101 and balanced(st)
        s.close()

    def test_rate_limit_error_retry_after_from_the_reset_header(self, serve):
        """Client: RateLimitError.retry_after comes from X-RateLimit-Reset without
        Retry-After, and 430 is a RateLimitError too."""
        reset = int(time.time()) + 20
        svc = serve(lambda b, i: (429 if i == 0 else 430,
                                  {"X-RateLimit-Reset" if i == 0 else "X-IngestLimit-Reset":
                                   str(reset)}, {"code": 429, "message": "slow"}))
        client = Client(TOKEN, url=svc.url)
        for status in (429, 430):
            with pytest.raises(RateLimitError) as info:
                client.ingest(DATASET, [{"a": 1}])
            assert info.value.status == status
            assert info.value.retry_after is not None and 17 <= info.value.retry_after <= 20
        client.close()


# --------------------------------------------------------------------------- bisection

class TestBisection:
    def test_batch_refused_as_a_whole_costs_log_n_requests(self, serve, capfd):
        """Every request 400: a batch of 256 ends in at most 4*8+4 requests, all 256 counted
        failed_rejected, one on_error call, one line saying none was delivered."""
        svc = serve(lambda b, i: (400, {}, {"code": 400, "message": "unreadable body"}))
        errors = Errors()
        s = shipper(svc, batch_size=256, on_error=errors)
        for i in range(256):
            s.submit({"i": i})
        assert s.flush(10) is False
        st = s.stats()
        requests = len(svc.log)
        assert requests == give_up_after(256) <= 4 * 8 + 4
        assert st.failed_rejected == 256 and st.delivered == 0 and balanced(st)
        assert errors.wait(1)[0].status == 400
        (line,) = stderr_lines(capfd)
        assert line == ("loghandler: dataset 'ds': a batch of 256 events was refused whole (HTTP "
                        "400: unreadable body): check for a proxy in front of the service; 256 "
                        "not delivered (stats().failed_rejected)")
        s.close()
        assert len(errors.got) == 1

    @pytest.mark.parametrize("poison", [(10, 60), (0, 1), (98, 99), (49, 50)])
    def test_two_poison_events_among_100(self, serve, capfd, poison):
        """Two bad events are isolated: 98 delivered, 2 failed_rejected, one on_error call."""
        def rule(batch: list[Any], index: int) -> Answer:
            if any(e["i"] in poison for e in batch):
                return 400, {}, {"code": 400, "message": "invalid event"}
            return status_of(batch)

        svc = serve(rule)
        errors = Errors()
        s = shipper(svc, batch_size=100, on_error=errors)
        for i in range(100):
            s.submit({"i": i})
        assert s.flush(10) is False
        st = s.stats()
        assert st.delivered == 98 and st.failed_rejected == 2 and balanced(st)
        assert sorted(e["i"] for e in svc.stored) == [i for i in range(100) if i not in poison]
        errors.wait(1)
        (line,) = stderr_lines(capfd)
        assert line == ("loghandler: dataset 'ds': the service rejected 2 of 100 events (HTTP "
                        "400: invalid event): check what they hold (stats().failed_rejected)")
        s.close()
        assert len(errors.got) == 1

    def test_spool_replay_of_a_refused_file_is_bounded(self, serve, tmp_path: Path):
        """Replay uses the same loop: a spooled batch refused as a whole costs O(log n)."""
        Spool(tmp_path, DATASET).write([json.dumps({"i": i}).encode() for i in range(64)])
        svc = serve(lambda b, i: (400, {}, {"code": 400, "message": "no"}))
        s = shipper(svc, spool_dir=str(tmp_path), batch_size=64)
        try:
            assert wait_until(lambda: s.stats().replay_rejected >= 64)
            assert len(svc.log) == give_up_after(64)
        finally:
            s.close()


# --------------------------------------------------------------------------- on_error

class TestOnErrorCounts:
    def test_one_403_calls_on_error_once(self, serve):
        """A refused token is one batch outcome: one on_error call."""
        svc = serve(lambda b, i: (403, {}, {"code": 403, "message": "forbidden"}))
        errors = Errors()
        s = shipper(svc, on_error=errors)
        s.submit({"i": 1})
        assert s.flush(5) is False
        assert isinstance(errors.wait(1)[0], loghandler.AuthenticationError)
        s.close(0.1)
        assert len(errors.got) == 1

    def test_one_403_with_a_spool_calls_on_error_once(self, serve, tmp_path: Path):
        """Spooled, a refused token is still told once."""
        svc = serve(lambda b, i: (403, {}, {"code": 403, "message": "forbidden"}))
        errors = Errors()
        s = shipper(svc, on_error=errors, spool_dir=str(tmp_path))
        s.submit({"i": 1})
        assert s.flush(5) is False
        assert s.stats().spooled == 1 and errors.wait(1)
        s.close(0.1)
        assert len(errors.got) == 1

    def test_retries_exhausted_calls_on_error_once(self, serve):
        """500 on every try: one call when the batch fails, none per retry."""
        svc = serve(lambda b, i: (500, {}, {"code": 500}))
        errors = Errors()
        s = shipper(svc, on_error=errors, max_retries=2)
        s.submit({"i": 1})
        assert s.flush(5) is False
        assert len(svc.log) == 3 and errors.wait(1)
        s.close(0.1)
        assert len(errors.got) == 1
