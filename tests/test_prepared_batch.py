"""The next batch prepared while the previous request's answer is awaited (worker.py,
``Worker._prepare``; docs/performance.md, "Sixth pass"), over real HTTP on loopback.

After a request is written, the flusher takes, formats and compresses the next batch before it
reads the answer; requests stay one at a time and in order. Each test holds the first request's
answer (the receiver's ``sleep``) until the next batch is seen prepared, then checks what
happens to it: delivered in order, after a retry or a failure of the one before, at close()
with the service silent, in a forked child; with ``stats()`` exact in each.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from faultserver import FaultServer, Front, check_accounting, sleep, status
from helpers import wait_until

# Only the lean exchange calls the flusher back between writing a request and reading its answer.
pytestmark = pytest.mark.skipif(os.environ.get("LOGHANDLER_LEAN_HTTP") == "0",
                                reason="the next batch is prepared by the lean exchange only")
BOTH = pytest.mark.parametrize("kind", ["handler", "processor"])
BATCH = 10
N = 100


@pytest.fixture
def make(make_front: Any) -> Any:
    """conftest's make_front with this file's batch size (a batch every BATCH events)."""
    def make(kind: str, server: FaultServer, **options: Any) -> Front:
        return make_front(kind, server, **{"batch_size": BATCH, **options})

    return make


def _worker(front: Front) -> Any:
    return front.shipper._flusher.worker  # noqa: SLF001


def _flush_in_background(front: Front) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(front.flush(20)), daemon=True)
    thread.start()
    return thread, result


def _logged_and_prepared(front: Front, srv: FaultServer
                         ) -> tuple[threading.Thread, list[bool]]:
    """N events logged and a flush() started on another thread, returned with its result
    once the next batch is prepared while the first request's answer is held."""
    for i in range(N):
        front.emit(i)
    flushing = _flush_in_background(front)
    _prepared_while_held(front, srv)
    return flushing


def _prepared_while_held(front: Front, srv: FaultServer) -> None:
    """The next batch is taken and compressed while the first request waits for its answer,
    and is not sent (the receiver has seen one request)."""
    worker = _worker(front)
    assert wait_until(lambda: worker.prepared is not None and worker.prepared.body is not None,
                      10), "no batch was prepared while the first answer was awaited"
    assert len(worker.prepared.chunk) == BATCH
    # The receiver records a request once its body is read, maybe after the batch was made.
    assert wait_until(lambda: len(srv.requests) >= 1, 10)
    assert len(srv.requests) == 1 and worker.prepared is not None
    st = front.stats()
    # Taken from the queue, neither delivered nor counted otherwise.
    assert st.delivered == 0 and st.queued == N and st.submitted == N


@BOTH
def test_the_order_is_kept_across_many_batches(kind: str, make: Any) -> None:
    """Many batches, each prepared while the one before was answered: every event once, in
    the order logged, no request over batch_size, one request at a time."""
    n = 2_000
    with FaultServer() as srv:
        front = make(kind, srv, batch_size=25)
        for i in range(n):
            front.emit(i)
        assert front.flush(20)
        st = front.stats()
        assert srv.stored() == list(range(n))
        assert all(r.events <= 25 for r in srv.requests) and len(srv.requests) == n // 25
        assert st.delivered == n and st.batches == n // 25
        check_accounting(st, srv)


@BOTH
def test_a_prepared_batch_waits_for_the_previous_answer_then_goes(kind: str, make: Any) -> None:
    """The first request is answered late: the next batch is ready meanwhile, sent after the
    answer, and every event arrives in order."""
    with FaultServer([sleep(2.0, then=200, store=True)]) as srv:
        front = make(kind, srv)
        thread, result = _logged_and_prepared(front, srv)
        thread.join(20)
        assert result == [True]
        st = front.stats()
        assert srv.stored() == list(range(N)) and st.delivered == N
        assert [r.events for r in srv.requests] == [BATCH] * (N // BATCH)
        check_accounting(st, srv)


@BOTH
def test_the_previous_request_retried_while_a_batch_is_prepared(kind: str, make: Any) -> None:
    """The first request fails (500) after the next batch was prepared: it is retried first,
    then the prepared batch goes; the order holds."""
    with FaultServer([sleep(2.0, then=500)]) as srv:
        front = make(kind, srv, max_retries=3)
        thread, result = _logged_and_prepared(front, srv)
        thread.join(20)
        assert result == [True]
        st = front.stats()
        assert srv.outcomes()[:2] == ["sleep", "200"]
        assert srv.stored() == list(range(N))
        assert st.delivered == N and st.retried == 1 and st.failed == 0
        check_accounting(st, srv)


@BOTH
def test_the_previous_request_given_up_while_a_batch_is_prepared(kind: str, make: Any) -> None:
    """The first request fails for good (its retries spent, no spool) after the next batch was
    prepared: the first batch is counted failed, the prepared one and the rest delivered."""
    with FaultServer([sleep(2.0, then=500), status(500)]) as srv:
        front = make(kind, srv, max_retries=1)
        thread, result = _logged_and_prepared(front, srv)
        thread.join(20)
        assert result == [False]  # not everything was delivered
        st = front.stats()
        assert st.failed_retries_exhausted == BATCH and st.delivered == N - BATCH
        assert srv.stored() == list(range(BATCH, N))
        check_accounting(st, srv)


@BOTH
def test_the_previous_request_spooled_while_a_batch_is_prepared(
        kind: str, make: Any, tmp_path: Any) -> None:
    """With a spool: the first batch given up goes to the spool, first (its file named by its
    oldest event); the prepared batch follows it, to the service or to the spool."""
    with FaultServer([sleep(2.0, then=500), status(500)]) as srv:
        front = make(kind, srv, max_retries=1, spool_dir=str(tmp_path))
        thread, result = _logged_and_prepared(front, srv)
        thread.join(20)
        assert result
        st = front.stats()
        assert st.spooled >= BATCH and st.delivered + st.spooled == N and st.queued == 0
        # What was delivered follows what was spooled, in order (replay comes later).
        assert srv.stored() == list(range(N - st.delivered, N)) and st.replayed == 0
        check_accounting(st, srv)


@BOTH
def test_close_while_a_batch_is_prepared_and_no_answer_comes(kind: str, make: Any) -> None:
    """close() whose deadline passes with the first request unanswered and the next batch
    prepared: the closing thread takes both over; the unanswered request's events count
    unconfirmed, the prepared batch and the queue dropped_shutdown; nothing counted later."""
    with FaultServer([sleep(6.0, then=200, store=True)]) as srv:
        front = make(kind, srv)
        thread, _ = _logged_and_prepared(front, srv)
        front.shipper.close(0.3)
        st = front.stats()
        assert st.unconfirmed == BATCH and st.dropped_shutdown == N - BATCH
        assert st.delivered == 0 and st.queued == 0
        check_accounting(st)
        thread.join(20)
        assert front.stats() == st  # the flusher's late answer counts nothing


@BOTH
def test_close_with_a_spool_keeps_the_prepared_batch(
        kind: str, make: Any, tmp_path: Any) -> None:
    """The same close with a spool: every event goes to the spool, the prepared batch among
    them, none lost."""
    with FaultServer([sleep(6.0, then=200, store=True)]) as srv:
        front = make(kind, srv, spool_dir=str(tmp_path))
        thread, _ = _logged_and_prepared(front, srv)
        front.shipper.close(0.3)
        st = front.stats()
        assert st.spooled == N and st.dropped == 0 and st.delivered == 0
        check_accounting(st)
        thread.join(20)


@BOTH
def test_close_with_an_answer_before_the_deadline_delivers_the_prepared_batch(
        kind: str, make: Any) -> None:
    """close() while a batch is prepared and the answer comes in time: all delivered, in
    order."""
    with FaultServer([sleep(1.0, then=200, store=True)]) as srv:
        front = make(kind, srv)
        thread, _ = _logged_and_prepared(front, srv)
        front.shipper.close(10)
        st = front.stats()
        assert st.delivered == N and srv.stored() == list(range(N))
        check_accounting(st, srv)
        thread.join(20)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_while_a_batch_is_prepared(make: Any) -> None:
    """A fork with the next batch prepared: the child starts without it (the parent's events
    stay the parent's) and delivers its own; the parent delivers all of its own, in order."""
    with FaultServer([sleep(2.0, then=200, store=True)]) as srv:
        front = make("handler", srv)
        thread, result = _logged_and_prepared(front, srv)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            ok = False
            try:
                os.close(r)
                worker = _worker(front)
                fresh = worker.prepared is None and front.stats().queued == 0
                for i in range(1000, 1005):
                    front.emit(i)
                ok = fresh and front.flush(10) and front.stats().delivered == 5
            finally:
                os.write(w, b"1" if ok else b"0")
                os._exit(0)
        os.close(w)
        child_ok = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
        thread.join(20)
        assert child_ok == b"1"
        assert result == [True]
        st = front.stats()
        stored = srv.stored()
        assert [i for i in stored if i < 1000] == list(range(N))
        assert sorted(i for i in stored if i >= 1000) == list(range(1000, 1005))
        assert st.delivered == N
        check_accounting(st)


def test_what_the_prepared_cut_drops_is_settled_after_the_previous_batch(make: Any) -> None:
    """Repeats the next batch's cut drops are settled once the batch before it is (settling
    counts the oldest events in flight): not while its answer is awaited."""
    with FaultServer([sleep(2.0, then=200, store=True)]) as srv:
        front = make("handler", srv, repeat_limit=1, repeat_window=60)
        for i in range(BATCH):
            front.logger.info("first %d", i, extra={"id": i})
        for i in range(BATCH, 2 * BATCH):
            front.logger.info("the same", extra={"id": i})
        thread, result = _flush_in_background(front)
        worker = _worker(front)
        assert wait_until(lambda: worker.prepared is not None and worker.prepared.body
                          is not None, 10)
        assert worker.prepared.settles
        assert wait_until(lambda: len(srv.requests) >= 1, 10) and len(srv.requests) == 1
        st = front.stats()
        assert st.dropped_repeat == 0 and st.delivered == 0  # both wait for the first answer
        thread.join(20)
        assert result == [True]
        front.shipper.close(5)
        st = front.stats()
        assert st.dropped_repeat == BATCH - 1
        assert srv.stored()[:BATCH + 1] == list(range(BATCH + 1))
        check_accounting(st, srv)
