"""The flusher's wake-up (ledger/wake.py): threading.Event's behaviour, with no lock a Ctrl+C
could leave held (tests/test_bounds.py interrupts a logging call exactly there)."""

from __future__ import annotations

import threading
import time

from loghandler._engine.ledger.wake import Wake


def test_set_wait_clear_as_an_event() -> None:
    w = Wake()
    assert not w.is_set()
    assert w.wait(0.01) is False
    w.set()
    w.set()  # twice: still one wake-up's worth, cleared at once
    assert w.is_set() and w.wait(0) is True and w.wait(5) is True
    w.clear()
    assert not w.is_set()
    assert w.wait(0.01) is False


def test_a_set_from_another_thread_wakes_the_waiter_at_once() -> None:
    w = Wake()
    started = threading.Event()
    woke: list[tuple[bool, float]] = []

    def waiter() -> None:
        started.set()
        t0 = time.monotonic()
        woke.append((w.wait(30), time.monotonic() - t0))

    t = threading.Thread(target=waiter)
    t.start()
    assert started.wait(10)
    w.set()
    t.join(30)
    ((result, took),) = woke
    assert result is True and took < 25  # woken by the set, not by the 30 s timeout


def test_a_token_left_by_a_race_with_clear_is_no_wake_up() -> None:
    """set() puts a token; a clear() that ran between its two steps leaves the token with the
    flag down: wait() must not take it for a wake-up."""
    w = Wake()
    # the state a race between set() and clear() leaves, made directly.
    w._flag = False  # noqa: SLF001
    w._tokens.put(None)  # the state such a race leaves  # noqa: SLF001
    t0 = time.monotonic()
    assert w.wait(0.05) is False
    assert time.monotonic() - t0 >= 0.04


def test_every_waiter_wakes() -> None:
    w = Wake()
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(w.wait(30))) for _ in range(3)]
    for t in threads:
        t.start()
    w.set()
    for t in threads:
        t.join(30)
    assert results == [True, True, True]
