"""Context on every event: ``fields=``, ``loghandler.context(...)`` and OpenTelemetry trace ids,
delivered over loopback and checked on the events the service received."""

from __future__ import annotations

import asyncio
import logging
import logging.config
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import structlog
from helpers import TOKEN, Receiver, run_in_threads
from opentelemetry import trace

import loghandler
from loghandler import ConfigurationError, IngestHandler, IngestProcessor, Shipper

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {"service": "checkout", "env": "prod", "version": "1.4.2", "host": "web-7"}
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7


def span(trace_id: int = TRACE_ID, span_id: int = SPAN_ID) -> Any:
    """A current span for ``with``: what an instrumented application has while it serves."""
    ctx = trace.SpanContext(trace_id=trace_id, span_id=span_id, is_remote=False,
                            trace_flags=trace.TraceFlags(1))
    return trace.use_span(trace.NonRecordingSpan(ctx), end_on_exit=False)


def shipped(handler: Any, receiver: Receiver) -> list[dict[str, Any]]:
    assert handler.flush(timeout=5) is True
    return receiver.events


def by_message(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e.get("message", e.get("event")): e for e in events}


class TestStaticFields:
    def test_every_event_gets_them(self, make_logger: Any, receiver: Receiver) -> None:
        """fields= lands on fast-path, slow-path (exception) and extra-carrying events alike."""
        log, handler = make_logger(fields=FIELDS)
        log.info("plain")
        log.info("with extra", extra={"order": 17})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
        events = shipped(handler, receiver)
        assert len(events) == 3
        for event in events:
            assert {k: event[k] for k in FIELDS} == FIELDS
        assert by_message(events)["failed"]["exception"]["type"] == "ValueError"

    def test_the_events_own_fields_win(self, make_logger: Any, receiver: Receiver) -> None:
        """An extra named like a static field overrides it for that event only; event keys
        (message, level) are never replaced by a static field."""
        log, handler = make_logger(fields={"env": "prod", "message": "not me", "level": "x"})
        log.warning("canary", extra={"env": "canary"})
        log.warning("normal")
        events = by_message(shipped(handler, receiver))
        assert events["canary"]["env"] == "canary"
        assert events["normal"]["env"] == "prod"
        assert events["normal"]["level"] == "warning"

    def test_from_dict_config(self, receiver: Receiver) -> None:
        """dictConfig passes fields= through (a ConvertingDict) like any other option."""
        logging.config.dictConfig({
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"ingest": {"class": "loghandler.IngestHandler", "dataset": "ds",
                                    "url": receiver.url, "token": TOKEN,
                                    "fields": {"service": "api", "tags": ["a", "b"]}}},
            "loggers": {"test.context.dictconfig": {"handlers": ["ingest"], "level": "INFO",
                                                    "propagate": False}},
        })
        log = logging.getLogger("test.context.dictconfig")
        handler = log.handlers[0]
        try:
            log.info("configured")
            (event,) = shipped(handler, receiver)
            assert event["service"] == "api" and event["tags"] == ["a", "b"]
        finally:
            log.removeHandler(handler)
            handler.close()

    def test_shipper_and_processor_take_them(self, receiver: Receiver) -> None:
        """Shipper.submit() events and IngestProcessor events get fields= too."""
        client = loghandler.Client(url=receiver.url, token=TOKEN)
        with Shipper(client, "ds", fields={"service": "jobs"}) as shipper:
            shipper.submit({"event": "job done", "service": "own"})
            shipper.submit({"event": "job started"})
            assert shipper.flush(5)
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN, fields={"service": "web"})
        proc(None, "info", {"event": "request"})
        events = by_message(shipped(proc, receiver))
        proc.close()
        client.close()
        assert events["job done"]["service"] == "own"
        assert events["job started"]["service"] == "jobs"
        assert events["request"]["service"] == "web"

    def test_copied_at_construction(self, make_logger: Any, receiver: Receiver) -> None:
        """Changing the mapping after construction changes nothing: it was checked and copied."""
        fields = {"service": "a"}
        log, handler = make_logger(fields=fields)
        fields["service"] = "b"
        fields["new"] = "c"
        log.info("x")
        (event,) = shipped(handler, receiver)
        assert event["service"] == "a" and "new" not in event

    @pytest.mark.parametrize("fields, words", [
        (["service", "x"], "mapping"),
        ("service=x", "mapping"),
        ({1: "x"}, "key must be a string"),
        ({"service": object()}, "fields['service']"),
        ({"ratio": float("nan")}, "fields['ratio']"),
        ({"nested": {"ok": [1, {2: "bad key"}]}}, "fields['nested']"),
    ])
    def test_wrong_type_is_a_configuration_error(self, fields: Any, words: str) -> None:
        """Anything but a mapping of str keys to JSON values fails at construction, saying
        where."""
        with pytest.raises(ConfigurationError, match="fields") as info:
            IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN, fields=fields)
        assert words in str(info.value)

    def test_trace_context_must_be_a_bool(self) -> None:
        """trace_context="no" would be truthy: refused."""
        with pytest.raises(ConfigurationError, match="trace_context"):
            IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN, trace_context="no")


class TestContext:
    def test_nested_contexts_merge_inner_wins(self, make_logger: Any,
                                              receiver: Receiver) -> None:
        """Inner context overrides a shared key; leaving it restores the outer one; outside
        every context, nothing is added."""
        log, handler = make_logger()
        with loghandler.context(request_id="r-1", user="ann"):
            log.info("outer")
            with loghandler.context(user="bob", step=2):
                log.info("inner")
            log.info("outer again")
        log.info("outside")
        events = by_message(shipped(handler, receiver))
        assert (events["outer"]["request_id"], events["outer"]["user"]) == ("r-1", "ann")
        assert "step" not in events["outer"]
        assert (events["inner"]["request_id"], events["inner"]["user"],
                events["inner"]["step"]) == ("r-1", "bob", 2)
        assert events["outer again"]["user"] == "ann" and "step" not in events["outer again"]
        assert not {"request_id", "user", "step"} & events["outside"].keys()

    def test_precedence_extra_then_context_then_fields(self, make_logger: Any,
                                                       receiver: Receiver) -> None:
        """The event's own fields win over the context, which wins over fields=."""
        log, handler = make_logger(fields={"a": "static", "b": "static", "c": "static"})
        with loghandler.context(a="context", b="context"):
            log.info("mixed", extra={"a": "extra"})
        (event,) = shipped(handler, receiver)
        assert (event["a"], event["b"], event["c"]) == ("extra", "context", "static")

    def test_context_on_the_slow_path(self, make_logger: Any, receiver: Receiver) -> None:
        """Records the fast path leaves to record_to_event (exception, stack, a dict extra)
        get the context too."""
        log, handler = make_logger()
        with loghandler.context(request_id="r-9"):
            log.info("stack", stack_info=True)
            log.info("dict extra", extra={"cart": {"items": 3}})
            try:
                {}["sku"]
            except KeyError:
                log.exception("failed")
        events = shipped(handler, receiver)
        assert len(events) == 3
        assert all(e["request_id"] == "r-9" for e in events)

    def test_per_thread(self, make_logger: Any, receiver: Receiver) -> None:
        """Each thread sees only the context it entered itself."""
        log, handler = make_logger()
        ready = threading.Barrier(4)

        def work(n: int) -> None:
            with loghandler.context(worker=n):
                ready.wait(5)  # all four contexts are entered at the same time
                log.info("from %d", n)

        run_in_threads(work, 4)
        log.info("main")
        events = by_message(shipped(handler, receiver))
        for n in range(4):
            assert events[f"from {n}"]["worker"] == n
        assert "worker" not in events["main"]

    def test_per_asyncio_task_interleaved(self, make_logger: Any, receiver: Receiver) -> None:
        """Tasks that take turns at every step keep their own context."""
        log, handler = make_logger()

        async def task(n: int) -> None:
            with loghandler.context(task=n):
                for step in range(3):
                    log.info("task %d step %d", n, step)
                    await asyncio.sleep(0)  # hand over to the other tasks

        async def main() -> None:
            with loghandler.context(app="shop"):
                await asyncio.gather(*(task(n) for n in range(3)))

        asyncio.run(main())
        events = shipped(handler, receiver)
        assert len(events) == 9
        for event in events:
            assert event["message"].startswith(f"task {event['task']} ")
            assert event["app"] == "shop"
        # interleaved indeed: the first three events come from three different tasks
        assert {e["task"] for e in events[:3]} == {0, 1, 2}

    def test_decorator_sync_and_async(self, make_logger: Any, receiver: Receiver) -> None:
        """As a decorator, each call runs in the context; the function's result is kept."""
        log, handler = make_logger()

        @loghandler.context(job="sync")
        def job(n: int) -> int:
            log.info("sync %d", n)
            return n * 2

        @loghandler.context(job="async")
        async def ajob(n: int) -> int:
            await asyncio.sleep(0)
            log.info("async %d", n)
            return n * 3

        assert job(2) == 4
        assert asyncio.run(ajob(2)) == 6
        assert job.__name__ == "job" and asyncio.iscoroutinefunction(ajob)
        log.info("after")
        events = by_message(shipped(handler, receiver))
        assert events["sync 2"]["job"] == "sync"
        assert events["async 2"]["job"] == "async"
        assert "job" not in events["after"]

    def test_one_instance_entered_by_many_threads(self, make_logger: Any,
                                                  receiver: Receiver) -> None:
        """One context object shared by threads: each enters and leaves its own copy."""
        log, handler = make_logger()
        shared = loghandler.context(tenant="acme")
        inside = threading.Barrier(3)

        def work(n: int) -> None:
            with shared:
                inside.wait(5)
                log.info("in %d", n)
            log.info("out %d", n)

        run_in_threads(work, 3)
        events = by_message(shipped(handler, receiver))
        for n in range(3):
            assert events[f"in {n}"]["tenant"] == "acme"
            assert "tenant" not in events[f"out {n}"]

    def test_values_are_copied_json_safe_at_entry(self, make_logger: Any,
                                                  receiver: Receiver) -> None:
        """A mutable value is copied when the context is entered: later changes do not leak
        into events, and odd values arrive JSON-safe."""
        log, handler = make_logger()
        roles = ["admin"]
        with loghandler.context(roles=roles, ids={1, 2}, obj=object()):
            roles.append("root")
            log.info("x")
        (event,) = shipped(handler, receiver)
        assert event["roles"] == ["admin"]
        assert sorted(event["ids"]) == [1, 2]
        assert event["obj"].startswith("<object object")

    def test_processor_events_and_structlog_keys_win(self, receiver: Receiver) -> None:
        """IngestProcessor events carry the context; a structlog key (bound or passed) wins."""
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN, flush_interval=60,
                               fields={"service": "web"})
        log = structlog.wrap_logger(structlog.ReturnLogger(), processors=[
            structlog.processors.add_log_level, proc, lambda _, __, ed: ""])
        try:
            with loghandler.context(request_id="r-1", user="ctx", service="ctx-service"):
                log.info("bound", user="own")
                log.bind(request_id="bound-id").info("rebound")
            log.info("outside")
            events = by_message(shipped(proc, receiver))
        finally:
            proc.close()
        assert events["bound"]["user"] == "own"
        assert events["bound"]["request_id"] == "r-1"
        assert events["bound"]["service"] == "ctx-service"
        assert events["rebound"]["request_id"] == "bound-id"
        assert events["rebound"]["user"] == "ctx"
        assert "request_id" not in events["outside"]
        assert events["outside"]["service"] == "web"

    def test_import_is_cheap_and_no_opentelemetry(self) -> None:
        """import loghandler (and using a context) never imports OpenTelemetry."""
        code = ("import sys, loghandler\n"
                "with loghandler.context(a=1):\n"
                "    pass\n"
                "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "[]"


class TestTraceIds:
    def test_inside_a_span_and_not_outside(self, make_logger: Any, receiver: Receiver) -> None:
        """Events logged in a valid span carry its ids as lowercase hex; others have none."""
        log, handler = make_logger()
        with span():
            log.info("in span")
            try:
                raise KeyError("x")
            except KeyError:
                log.exception("failed in span")
        log.info("outside")
        with trace.use_span(trace.INVALID_SPAN):
            log.info("invalid span")
        events = by_message(shipped(handler, receiver))
        for name in ("in span", "failed in span"):
            assert events[name]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
            assert events[name]["span_id"] == "00f067aa0ba902b7"
        for name in ("outside", "invalid span"):
            assert "trace_id" not in events[name] and "span_id" not in events[name]

    def test_ids_are_the_callers_span(self, make_logger: Any, receiver: Receiver) -> None:
        """Two threads in two spans: each event has its own thread's ids (read on the caller's
        thread, not on the flusher)."""
        log, handler = make_logger()
        ready = threading.Barrier(2)

        def work(n: int) -> None:
            with span(trace_id=n + 1, span_id=n + 1):
                ready.wait(5)
                log.info("thread %d", n)

        run_in_threads(work, 2)
        events = by_message(shipped(handler, receiver))
        for n in range(2):
            assert events[f"thread {n}"]["trace_id"] == f"{n + 1:032x}"
            assert events[f"thread {n}"]["span_id"] == f"{n + 1:016x}"

    def test_with_context_and_processor(self, receiver: Receiver) -> None:
        """Span ids and context fields together, on processor events too; an event's own
        trace_id wins."""
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN, flush_interval=60)
        try:
            with span(), loghandler.context(request_id="r-2"):
                proc(None, "info", {"event": "a"})
                proc(None, "info", {"event": "b", "trace_id": "mine"})
            events = by_message(shipped(proc, receiver))
        finally:
            proc.close()
        assert events["a"]["trace_id"] == f"{TRACE_ID:032x}"
        assert events["a"]["request_id"] == "r-2"
        assert events["b"]["trace_id"] == "mine"
        assert events["b"]["span_id"] == f"{SPAN_ID:016x}"

    def test_trace_context_false_turns_it_off(self, make_logger: Any,
                                              receiver: Receiver) -> None:
        """trace_context=False: no ids even inside a span; the context still applies."""
        log, handler = make_logger(trace_context=False)
        with span(), loghandler.context(request_id="r-3"):
            log.info("in span")
            log.info("slow path", stack_info=True)
        events = shipped(handler, receiver)
        assert len(events) == 2
        for event in events:
            assert "trace_id" not in event and "span_id" not in event
            assert event["request_id"] == "r-3"

    def test_an_odd_opentelemetry_costs_no_event(self, make_logger: Any, receiver: Receiver,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        """A stub opentelemetry.trace that raises, or gives ids that are no ints: every event
        still ships, without ids, and nothing reaches the application."""
        class Odd:
            is_valid = True
            trace_id = "not-a-number"
            span_id = None

            def get_span_context(self) -> Any:
                return self

        class Stub:
            calls = 0

            def get_current_span(self) -> Any:
                self.calls += 1
                if self.calls % 2:
                    raise RuntimeError("no tracer here")
                return Odd()

        monkeypatch.setitem(sys.modules, "opentelemetry.trace", Stub())
        log, handler = make_logger()
        for n in range(4):
            log.info("event %d", n)
        log.info("slow path", stack_info=True)
        events = shipped(handler, receiver)
        assert len(events) == 5
        assert not any("trace_id" in e or "span_id" in e for e in events)


class TestCommandLine:
    def test_ingest_field_flag(self, receiver: Receiver, tmp_path: Path) -> None:
        """loghandler ingest --field KEY=VALUE (repeatable) adds fields the lines lack."""
        source = tmp_path / "in.ndjson"
        source.write_text('{"n": 1}\n{"n": 2, "env": "own"}\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        proc = subprocess.run(
            [sys.executable, "-m", "loghandler", "ingest", "ds", str(source), "--url",
             receiver.url, "--token", TOKEN, "--field", "env=prod", "--field", "query=a=b",
             "--no-progress"], capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        events = sorted(receiver.events, key=lambda e: e["n"])
        assert [(e["env"], e["query"]) for e in events] == [("prod", "a=b"), ("own", "a=b")]

    def test_ingest_field_without_equals_is_a_usage_error(self, tmp_path: Path) -> None:
        """--field without KEY= exits 2 with one clear line."""
        proc = subprocess.run(
            [sys.executable, "-m", "loghandler", "ingest", "ds", "--url", "http://127.0.0.1:9",
             "--token", TOKEN, "--field", "prod"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert "KEY=VALUE" in proc.stderr and "Traceback" not in proc.stderr


class TestHotPath:
    def test_no_context_allocates_nothing_extra(self) -> None:
        """The benchmark's allocation check (benchmarks/allocations.py): with no context used
        and OpenTelemetry not imported a queue item is the plain 3-tuple, fields= keeps the
        caller's allocations exactly as they are, and a context or a span adds one tuple."""
        sys.path.insert(0, str(ROOT))
        try:
            from benchmarks import allocations
        finally:
            sys.path.remove(str(ROOT))
        results = {v: allocations.measure(v, n=3000) for v, _ in allocations.VARIANTS}
        for text, ok in allocations.checks(results):
            assert ok, (text, results)
