"""Process-wide lifecycle of shippers: the ways a process ends, and a fresh start after fork.

A process can end in four ways that matter here, and each closes every live shipper within
``shutdown_timeout``:

- a normal exit: one atexit hook;
- ``os._exit`` at the end of a multiprocessing child (fork and forkserver ``Process`` and
  ``Pool`` workers skip atexit): a ``multiprocessing.util.Finalize``, which multiprocessing runs
  in the child just before ``os._exit``;
- SIGTERM with the default disposition (``docker stop``, Kubernetes, systemd): a handler that
  closes the shippers on a helper thread, restores the default and re-raises the signal, so the
  exit status a supervisor sees is unchanged. Installed only when it replaces nothing, and never
  in a multiprocessing child (SIGTERM is how ``Pool.terminate()`` ends workers; see
  ``_mp_after_fork``);
- SIGKILL, OOM, power loss, ``Pool.terminate()``: nothing can run (docs/reliability.md,
  "Delivery guarantee").

Each shipper registers its ``Flusher`` (the ``Member`` protocol below: ``flusher.py`` imports
this module, never the other way round). Everything here holds them through weak references,
so registering never keeps one alive.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .._wire.client import after_fork_in_child as client_after_fork
from .._wire.imports import keep_modules
from .guard import block_sigterm_in_this_thread
from .reporter import print_exit_summary

__all__ = ["Member", "adopt", "close_all", "flushing", "live_shippers", "register", "release"]


class Member(Protocol):
    """What the process's lifecycle needs of each shipper (``flusher.Flusher``, which holds
    its thread and outlives a shipper dropped without ``close()``)."""

    @property
    def closed(self) -> bool:
        """Whether close() began (then later events are dropped)."""
        ...

    @property
    def shutdown_timeout(self) -> float: ...

    def flusher_alive(self) -> bool: ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def begin_close(self, deadline: float, *, at_exit: bool = False,
                    late_events: bool = False, seconds: float | None = None) -> None:
        """Stop taking events; deliver what is queued by ``deadline`` (monotonic)."""
        ...

    def wait_closed(self) -> None:
        """Wait for that, until the deadline; then spool or count what is left."""
        ...

    def exit_summary(self) -> str | None:
        """This shipper's part of the exit line (None: everything was delivered)."""
        ...

    def after_fork_in_child(self) -> None: ...

    def uses(self, client: object) -> bool:
        """Whether this shipper is open and ships through ``client``."""
        ...


# close_all's: one close of the process's shippers at a time.
_close_lock = threading.Lock()

# Weakly: registering never keeps a shipper alive. A dropped shipper's Flusher stays here while
# it delivers what it held (adopt), and goes when its thread ends (release).
_live: weakref.WeakSet[Member] = weakref.WeakSet()
_adopted: set[Member] = set()


ENV_HANDLE_SIGTERM = "LOGHANDLER_HANDLE_SIGTERM"


def register(member: Member, handle_sigterm: bool) -> None:
    _live.add(member)
    _arm_multiprocessing()
    if handle_sigterm:
        _install_sigterm_handler()


def live_shippers() -> list[Member]:
    """Every shipper of the process still open or still delivering (its ``Member``)."""
    return list(_live)


def end_idle_threads() -> None:
    """After a close: when no shipper of the process is open or delivering any more, end the
    threads shared by all of them (the request watchdog, the spool's spare thread), so that
    none outlives ``close()`` (a sub-interpreter ends only when its threads have: mod_wsgi's
    reload aborted the process). The next shipper's first request or flusher starts them."""
    if any(not s.closed or s.flusher_alive() for s in list(_live)):
        return
    from .._wire.watchdog import watchdog
    from .spilling import SPARE

    SPARE.stop()
    watchdog.stop_if_idle()


def adopt(member: Member) -> None:
    """Keep ``member`` (a dropped shipper's Flusher) alive while it delivers what it held."""
    _adopted.add(member)


def release(member: Member) -> None:
    _adopted.discard(member)


def close_all(timeout: float | None = None, *, report: bool = True,
              at_exit: bool = False) -> None:
    """Close every live shipper within one overall time limit, then report what was not sent.

    ``timeout`` defaults to the largest ``shutdown_timeout`` among them: the exit of the whole
    process is bounded by it, not one timeout per shipper. With ``at_exit``, events logged after
    this (by atexit hooks that run later) are still delivered within that bound: see
    ``Flusher._send_late`` in flusher.py. Runs from atexit, before
    ``logging.shutdown`` (atexit is LIFO and logging registered first), so by the time logging
    calls ``flush()`` and ``close()`` on the handlers there is nothing left to wait for.
    """
    # Closed ones whose flusher still works are waited for too: a SIGTERM that interrupts a
    # close in progress (multiprocessing's finalizer, then Pool.terminate()) must not cut it.
    shippers = [s for s in list(_live) if not s.closed or s.flusher_alive()]
    if not shippers:
        return
    now = time.monotonic()
    if timeout is None:
        timeout = max(s.shutdown_timeout for s in shippers)
    # One close at a time: SIGTERM's closer (or a pool worker's watch thread) may start while
    # the exit hook or multiprocessing's finalizer closes on the main thread. It waits for that
    # close (it is bounded by the same timeout) and then finds nothing left to do, rather than
    # closing beside it and telling the same losses twice.
    if not _close_lock.acquire(timeout=timeout + 1.0):
        return
    try:
        _close_all_locked(timeout, now, report, at_exit)
    finally:
        _close_lock.release()
    if _sigterm_deferred and threading.current_thread() is threading.main_thread():
        # SIGTERM came during this close, and its handler let it go on (_on_sigterm): done,
        # so die of it now, as the process would have without us.
        _CLOSED.set()
        _die_of_sigterm()


def _close_all_locked(timeout: float, now: float, report: bool, at_exit: bool) -> None:
    shippers = [s for s in list(_live) if not s.closed or s.flusher_alive()]
    if not shippers:
        return
    deadline = now + timeout
    for s in shippers:
        if not s.closed:  # one closing already has its deadline: only wait for it
            own = s.shutdown_timeout
            s.begin_close(min(deadline, now + own), at_exit=report, late_events=at_exit,
                          seconds=min(timeout, own))
    for s in shippers:
        s.wait_closed()
    # As close() does: at a sub-interpreter's end (its atexit hooks run, this one among them,
    # just before it checks that no other thread is left: mod_wsgi's reload) a watchdog or
    # spare thread still parked would abort the whole process.
    end_idle_threads()
    if at_exit:  # for events logged later still (Flusher._send_late)
        keep_modules()
    if report:
        print_exit_summary([part for s in shippers if (part := s.exit_summary())])


def _at_exit() -> None:
    try:
        close_all(at_exit=True)
    except Exception:  # never disturb the interpreter's exit
        pass


def _after_fork_in_child() -> None:
    # The package's one at-fork hook, in the child: the wire client's pools and watchdog first
    # (a shipper's first request may follow at once), then the sending marks, then each shipper.
    global _close_lock, _CLOSED, _terminating, _sigterm_deferred
    from . import guard, spool

    # The parent's closing state is not the child's (its lock may have been held at fork).
    _close_lock = threading.Lock()
    _CLOSED = threading.Event()
    _terminating = _sigterm_deferred = False
    for renew in (client_after_fork, spool.after_fork_in_child, guard.after_fork_in_child):
        try:
            renew()
        except Exception:
            pass
    for s in list(_live):
        try:
            s.after_fork_in_child()
        except Exception:
            pass


atexit.register(_at_exit)
# Before a fork: multiprocessing may have been imported after the shippers were made.
os.register_at_fork(before=lambda: _arm_multiprocessing(),
                    after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------- SIGTERM

# None: not decided yet; True: our handler is installed; False: decided against (the
# application has its own handler, or the user turned it off).
_sigterm_decided: bool | None = None
_terminating = False
# SIGTERM: the shippers are closed (by _closer, or the worker's watch thread).
_CLOSED = threading.Event()
# The handler returned before the close was done: the closer raises SIGTERM again.
_sigterm_deferred = False


def _install_sigterm_handler() -> None:
    """Install the SIGTERM handler if SIGTERM still has its default disposition.

    Decided once, by the first shipper made on the main thread (signal handlers can only be set
    there). An application's own handler is never replaced, and one the application sets later
    replaces ours: it is then the application's to close the shippers (``close()`` /
    ``logging.shutdown()``).
    """
    global _sigterm_decided
    if _sigterm_decided is not None or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_decided = False
    if os.environ.get(ENV_HANDLE_SIGTERM, "").strip().lower() in ("0", "false", "no", "off"):
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # not the main interpreter, no SIGTERM
        return
    _sigterm_decided = True
    if _in_multiprocessing_child():
        _watch_sigterm_in_worker()


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM, on the main thread, between two bytecodes of whatever it was doing.

    The shippers are closed on a thread of their own (``_closer``), never here: the code this
    interrupted may hold a lock that closing needs. The main thread then waits for that thread
    (bounded), unless it was interrupted inside loghandler itself (the exit hook's or a pool
    worker's finalizer closing already, a locked step of the queue): there, waiting could hold
    the very lock the flusher needs (an Event's, while ``begin_close`` sets it), and nothing
    would move until the deadline (issue 35.2: a pool worker delivered none of its events). So
    the handler returns at once, the interrupted code goes on, and the closer raises SIGTERM
    again on the main thread once everything is closed. Either way the process then dies of
    SIGTERM exactly as without us."""
    global _terminating, _sigterm_deferred
    first = not _terminating
    _terminating = True
    limit = max((s.shutdown_timeout for s in list(_live)), default=0.0) + 1.0
    ours = _in_loghandler(frame)
    if first:
        closer = threading.Thread(target=_closer, name="loghandler-sigterm", daemon=True)
        try:
            closer.start()
        except RuntimeError:  # interpreter shutdown: no new thread
            if ours:
                # The close in progress on this thread finishes the job, then dies of the
                # signal (close_all reads this; CPython 3.12 starts no thread at exit).
                _sigterm_deferred = True
                return
            _close_quietly()
            _CLOSED.set()
    # Set before looking at _CLOSED, which the closer sets before looking at this: one of the
    # two sees the other, so SIGTERM is always raised again.
    _sigterm_deferred = True
    if not _CLOSED.is_set():
        if ours:
            return
        _CLOSED.wait(limit)
    _die_of_sigterm()


def _die_of_sigterm() -> None:
    # Die of SIGTERM exactly as without us: the parent (a shell, a supervisor, Pool) sees the
    # same status (-15 from subprocess, 143 from a shell). Nothing after this runs: the default
    # disposition ends the process without atexit, as it always did.
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _closer() -> None:
    """The thread that closes the shippers on SIGTERM; then it has the main thread raise the
    signal again, if the handler returned early (``_on_sigterm``)."""
    try:
        _close_quietly()
    finally:
        _CLOSED.set()
        if _sigterm_deferred:
            try:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
            except (ValueError, OSError, AttributeError):
                pass


def _in_loghandler(frame: Any) -> bool:
    """Whether the interrupted code (``frame`` and its callers) is loghandler's own."""
    depth = 0
    while frame is not None and depth < 200:
        name = frame.f_globals.get("__name__", "")
        if type(name) is str and (name == "loghandler" or name.startswith("loghandler.")):
            return True
        frame = frame.f_back
        depth += 1
    return False


_worker_watch: threading.Thread | None = None


def _watch_sigterm_in_worker() -> None:
    """In a multiprocessing child with our SIGTERM handler: make sure SIGTERM is acted on
    within a bound even when the main thread never gets back to bytecode (a long C call).

    A Python handler runs only on the main thread, between bytecodes. So the C-level handler's
    wake-up byte (``signal.set_wakeup_fd``) is also watched by a thread: on SIGTERM it closes
    the shippers (delivering what the tasks logged) within ``shutdown_timeout`` and ends the
    process, whichever of it and the handler gets there first. With a wake-up fd the
    application set already (asyncio's), the handler alone acts.
    """
    global _worker_watch
    if _worker_watch is not None and _worker_watch.is_alive():
        return
    try:
        r, w = os.pipe()
        os.set_blocking(w, False)
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        if old != -1:  # the application's: leave it
            signal.set_wakeup_fd(old)
            os.close(r)
            os.close(w)
            return
    except (ValueError, OSError, AttributeError):
        return
    watch = threading.Thread(target=_worker_watch_run, args=(r,),
                             name="loghandler-sigterm-watch", daemon=True)
    try:
        watch.start()
    except RuntimeError:
        return
    _worker_watch = watch


def _worker_watch_run(fd: int) -> None:
    global _terminating
    block_sigterm_in_this_thread()
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM not in data:
            continue
        if not _terminating:
            _terminating = True
            _close_quietly()
            _CLOSED.set()
            os._exit(128 + signal.SIGTERM)
        # The main thread's handler is closing: if it is stuck, end the process at the bound.
        limit = max((s.shutdown_timeout for s in list(_live)), default=0.0) + 1.5
        time.sleep(limit)
        os._exit(128 + signal.SIGTERM)


def _close_quietly() -> None:
    if threading.current_thread() is not threading.main_thread():
        block_sigterm_in_this_thread()
    try:
        close_all()
    except Exception:
        pass


# ---------------------------------------------------------------------------- multiprocessing

_mp_armed_pid: int | None = None
_mp_after_fork_registered = False


class _MpKey:
    """A weak-referenceable key for multiprocessing's after-fork registry (it holds it weakly)."""


_MP_KEY = _MpKey()


def _arm_multiprocessing() -> None:
    """Close the shippers in multiprocessing's own exit, in a multiprocessing child.

    Such a child ends with ``os._exit`` (fork and forkserver), which skips atexit; just before
    it, multiprocessing runs its finalizers. It clears them when a child starts, then runs its
    after-fork callbacks: one of ours arms the finalizer again in every forked child. Nothing is
    imported here: a program that does not use multiprocessing pays nothing.
    """
    global _mp_after_fork_registered
    mp_process = sys.modules.get("multiprocessing.process")
    if mp_process is None or not _live:
        return
    try:
        import multiprocessing.util as mp_util  # cheap, and imported by any Process start
        if not _mp_after_fork_registered:
            _mp_after_fork_registered = True
            mp_util.register_after_fork(_MP_KEY, _mp_after_fork)
        if mp_process.parent_process() is not None:
            _arm_finalizer(mp_util)
    except Exception:
        pass


def _mp_after_fork(_key: object) -> None:
    # In a child that multiprocessing just forked, after it cleared the inherited finalizers.
    # SIGTERM is how a pool ends its workers (Pool.terminate(), which `with Pool()` calls):
    # the worker delivers what its tasks logged first, within shutdown_timeout
    # (_watch_sigterm_in_worker keeps that bounded even when its main thread is stuck).
    if _sigterm_decided:
        _watch_sigterm_in_worker()
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and _live:
        try:
            _arm_finalizer(mp_util)
        except Exception:
            pass


def _in_multiprocessing_child() -> bool:
    mp_process = sys.modules.get("multiprocessing.process")
    try:
        return mp_process is not None and mp_process.parent_process() is not None
    except Exception:
        return False


def _arm_finalizer(mp_util: Any) -> None:
    global _mp_armed_pid
    pid = os.getpid()
    if _mp_armed_pid == pid:
        return
    _mp_armed_pid = pid
    # The lowest priority: after the application's own finalizers, which may log.
    mp_util.Finalize(None, _at_exit, exitpriority=-(2**30))


F = TypeVar("F", bound=Callable[..., Any])


class flushing:  # lower case: used like a function, `with flushing(h):` or `@flushing(h)`
    """Flush handlers, processors or shippers when a block or function ends.

    For serverless functions, whose process is frozen between invocations (nothing is sent in
    the background while it sleeps, and a frozen process may never wake)::

        @flushing(handler, timeout=2.0)
        def lambda_handler(event, context): ...

    As a decorator of a function that receives an AWS Lambda-style ``context`` (an argument
    with ``get_remaining_time_in_millis()``), the flush is bounded by the time the invocation
    has left, less ``reserve`` seconds for the function to return: the platform never kills
    an invocation because of the flush. ``async def`` functions are decorated the same way
    (the flush then runs in a thread, off the event loop). ``delivered`` tells how the last
    flush went (None before the first): on the ``flushing`` object, and on the decorated
    function (``lambda_handler.delivered``). With no targets, every live shipper of the process
    is flushed.
    """

    def __init__(self, *targets: Any, timeout: float | None = 2.0,
                 reserve: float = 0.2) -> None:
        self._targets = targets
        self._timeout = timeout
        self._reserve = reserve
        self.delivered: bool | None = None

    def __enter__(self) -> flushing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delivered = self.flush()

    def flush(self, budget: float | None = None) -> bool:
        """Flush every target within ``timeout`` (and ``budget``, when given); True when all
        that was queued was delivered."""
        targets = self._targets or tuple(live_shippers())
        limits = [t for t in (self._timeout, budget) if t is not None]
        deadline = time.monotonic() + max(0.0, min(limits)) if limits else None
        ok = True
        for target in targets:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ok = bool(target.flush(remaining)) and ok
            except Exception:
                ok = False
        return ok

    def _budget(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
        # The invocation's time left, from a Lambda-style context among the arguments.
        for arg in (*args, *kwargs.values()):
            left = getattr(arg, "get_remaining_time_in_millis", None)
            if callable(left):
                try:
                    return max(0.0, float(left()) / 1000.0 - self._reserve)
                except Exception:
                    return None
        return None

    def __call__(self, func: F) -> F:
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await func(*args, **kwargs)
                finally:
                    import asyncio

                    budget = self._budget(args, kwargs)
                    self.delivered = await asyncio.get_running_loop().run_in_executor(
                        None, self.flush, budget)
                    run_async.delivered = self.delivered  # type: ignore[attr-defined]

            run_async.delivered = None  # type: ignore[attr-defined]
            return run_async  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            finally:
                self.delivered = self.flush(self._budget(args, kwargs))
                # `@flushing(h)` leaves no name for the flushing object: the function tells.
                wrapper.delivered = self.delivered  # type: ignore[attr-defined]

        wrapper.delivered = None  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]
