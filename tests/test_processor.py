"""IngestProcessor: real structlog chains, delivered over loopback and checked field by field."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from helpers import TOKEN, Receiver

import loghandler
from loghandler import ConfigurationError, IngestProcessor, Shipper
from loghandler._front.processor import event_dict_to_event, time_from

ROOT = Path(__file__).resolve().parent.parent
FIXED_TS = "2026-03-04T05:06:07.123456Z"


@pytest.fixture
def processor(receiver: Receiver) -> Iterator[IngestProcessor]:
    proc = IngestProcessor("ds", url=receiver.url, token=TOKEN, flush_interval=60)
    yield proc
    proc.close(timeout=5)


@pytest.fixture(autouse=True)
def _clean_contextvars() -> Iterator[None]:
    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


def fixed_timestamp(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict["timestamp"] = FIXED_TS
    return event_dict


def delivered(proc: IngestProcessor, receiver: Receiver) -> list[dict[str, Any]]:
    assert proc.flush(timeout=5) is True
    return receiver.events


class TestEventShape:
    """event_dict_to_event: the event built from one event dict, without the network."""

    def test_keys_kept_and_time_and_level_added(self) -> None:
        """Keys arrive as they are; `event` stays `event`; `_time` and `level` are added."""
        event, size = event_dict_to_event("info", {"event": "hi", "n": 1, "message": "m"})
        assert event["event"] == "hi"
        assert event["n"] == 1
        assert event["message"] == "m"
        assert event["level"] == "info"
        assert event["_time"].endswith("Z")
        # The size bound counts the values: a longer one weighs that much more.
        _, bigger = event_dict_to_event("info", {"event": "hi", "n": 1, "message": "m" * 1001})
        assert bigger >= size + 1000

    @pytest.mark.parametrize(("method", "level"), [
        ("warn", "warning"), ("warning", "warning"), ("exception", "error"), ("msg", "info"),
        ("fatal", "critical"), ("debug", "debug"), ("critical", "critical"),
    ])
    def test_level_from_method_name(self, method: str, level: str) -> None:
        """structlog method names map to level names when add_log_level did not run."""
        assert event_dict_to_event(method, {"event": "x"})[0]["level"] == level

    def test_existing_level_and_time_win(self) -> None:
        """A `level` or `_time` already in the event dict is kept as it is."""
        event, _ = event_dict_to_event("info", {"event": "x", "level": "notice", "_time": "t"})
        assert event["level"] == "notice"
        assert event["_time"] == "t"

    @pytest.mark.parametrize(("stamp", "expected"), [
        (FIXED_TS, FIXED_TS),
        ("2026-03-04T05:06:07Z", "2026-03-04T05:06:07.000000Z"),
        ("2026-03-04T07:06:07.123456+02:00", FIXED_TS),
        ("2026-03-04T00:06:07.123456-05:00", FIXED_TS),
        (1772600767.123456, FIXED_TS),
        (1772600767123, "2026-03-04T05:06:07.123000Z"),
        (dt.datetime(2026, 3, 4, 6, 6, 7, 123456, tzinfo=dt.timezone(dt.timedelta(hours=1))),
         FIXED_TS),
    ])
    def test_time_from_timestamp(self, stamp: Any, expected: str) -> None:
        """`_time` comes from `timestamp`: ISO with Z or offset, epoch seconds or ms, aware dt."""
        event, _ = event_dict_to_event("info", {"event": "x", "timestamp": stamp})
        assert event["_time"] == expected
        assert event["timestamp"] == (stamp if not isinstance(stamp, dt.datetime)
                                      else stamp.isoformat())

    @pytest.mark.parametrize("stamp", ["2026-03-04T05:06:07.123456", "04/03/2026 05:06",
                                       None, float("nan"), True])
    def test_ambiguous_timestamp_gives_now(self, stamp: Any) -> None:
        """A naive or custom-format timestamp gives now (UTC) instead of a guessed zone."""
        before = dt.datetime.now(dt.timezone.utc)
        got = dt.datetime.fromisoformat(time_from(stamp).replace("Z", "+00:00"))
        after = dt.datetime.now(dt.timezone.utc)
        assert before - dt.timedelta(milliseconds=1) <= got <= after

    def test_exc_info_true_becomes_exception_object(self) -> None:
        """exc_info=True inside an except block gives {type, message, stacktrace}."""
        try:
            raise KeyError("missing")
        except KeyError:
            event, _ = event_dict_to_event("exception", {"event": "x", "exc_info": True})
        assert "exc_info" not in event
        assert event["exception"]["type"] == "KeyError"
        assert event["exception"]["message"] == "'missing'"
        assert event["exception"]["stacktrace"].startswith("Traceback (most recent call last)")
        assert "raise KeyError" in event["exception"]["stacktrace"]

    def test_exc_info_tuple_and_instance(self) -> None:
        """exc_info as a sys.exc_info() tuple or as the exception instance works the same."""
        try:
            raise ValueError("bad")
        except ValueError as exc:
            tup, _ = event_dict_to_event("error", {"event": "x", "exc_info": sys.exc_info()})
            inst, _ = event_dict_to_event("error", {"event": "x", "exc_info": exc})
        assert tup["exception"] == inst["exception"]
        assert tup["exception"]["type"] == "ValueError"
        assert tup["exception"]["message"] == "bad"

    def test_exc_info_false_or_outside_except_adds_nothing(self) -> None:
        """exc_info False, or True with no exception being handled, adds no field."""
        for value in (False, True, None):
            event, _ = event_dict_to_event("info", {"event": "x", "exc_info": value})
            assert "exception" not in event
            assert "exc_info" not in event

    def test_rendered_exception_kept(self) -> None:
        """format_exc_info / dict_tracebacks output is kept exactly as they made it."""
        for renderer in (structlog.processors.format_exc_info,
                         structlog.processors.dict_tracebacks):
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                ed = renderer(None, "error", {"event": "x", "exc_info": True})
            event, _ = event_dict_to_event("error", ed)
            assert event["exception"] == json.loads(json.dumps(ed["exception"], default=repr))

    def test_values_made_json_safe(self) -> None:
        """datetime, set, objects and cycles become JSON-safe; the original is not touched."""
        cyc: list[Any] = [1]
        cyc.append(cyc)
        ed = {"event": "x", "when": dt.date(2026, 1, 2), "tags": {"a"}, "obj": object(),
              "cyc": cyc, 3: "int key"}
        event, _ = event_dict_to_event("info", ed)
        json.dumps(event)  # raises if anything is not JSON-safe
        assert event["when"] == "2026-01-02"
        assert event["tags"] == ["a"]
        assert event["cyc"] == [1, "<cycle>"]
        assert event["3"] == "int key"
        assert ed["tags"] == {"a"}

    def test_processor_formatter_bookkeeping_skipped(self) -> None:
        """Inside ProcessorFormatter's chain, `_record` and `_from_structlog` are not shipped."""
        record = logging.LogRecord("n", logging.INFO, __file__, 1, "m", (), None)
        event, _ = event_dict_to_event("info", {"event": "m", "_record": record,
                                                "_from_structlog": False})
        assert set(event) == {"event", "_time", "level"}


class TestIngestProcessor:
    """The processor inside real structlog configurations, delivering over loopback."""

    def test_returns_same_unmodified_dict(self, processor: IngestProcessor) -> None:
        """__call__ returns the very same event dict, with nothing changed in it."""
        ed = {"event": "x", "nested": {"a": [1, 2]}, "when": dt.datetime(2026, 1, 1),
              "exc_info": False, "timestamp": 1.5}
        before = copy.deepcopy(ed)
        assert processor(None, "info", ed) is ed
        assert ed == before

    def test_bind_contextvars_and_stdlib_processors(
            self, processor: IngestProcessor, receiver: Receiver) -> None:
        """bind(), bind_contextvars, add_logger_name and positional args arrive as fields."""
        base = logging.getLogger("test.processor.stdlib")
        base.propagate = False
        base.addHandler(logging.NullHandler())
        log = structlog.wrap_logger(
            base,
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.stdlib.PositionalArgumentsFormatter(),
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                processor,
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.stdlib.BoundLogger,
        )
        structlog.contextvars.bind_contextvars(request_id="r-1")
        log.bind(user="ann").warning("user %s paid %d", "ann", 5, amount=5.5)
        [event] = delivered(processor, receiver)
        assert event["event"] == "user ann paid 5"
        assert event["request_id"] == "r-1"
        assert event["user"] == "ann"
        assert event["amount"] == 5.5
        assert event["level"] == "warning"
        assert event["logger"] == "test.processor.stdlib"
        assert event["_time"] == event["timestamp"]
        assert "positional_args" not in event

    def test_exception_delivered_structured(
            self, processor: IngestProcessor, receiver: Receiver) -> None:
        """log.exception() arrives with the `exception` object; the console text is unchanged."""
        log = structlog.wrap_logger(
            structlog.ReturnLogger(),
            processors=[structlog.processors.add_log_level, processor,
                        structlog.processors.format_exc_info,
                        structlog.processors.JSONRenderer()],
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        )
        try:
            {}["k"]
        except KeyError:
            rendered = log.exception("lookup failed", key="k")
        [event] = delivered(processor, receiver)
        assert event["event"] == "lookup failed"
        assert event["level"] == "error"
        assert event["key"] == "k"
        assert event["exception"]["type"] == "KeyError"
        assert event["exception"]["message"] == "'k'"
        assert 'File "' in event["exception"]["stacktrace"]
        assert json.loads(rendered)["exception"].startswith("Traceback")

    def test_rendered_output_identical_with_and_without(
            self, processor: IngestProcessor, receiver: Receiver) -> None:
        """The same chain renders the same string with the processor before JSONRenderer."""
        def chain(with_processor: bool) -> Any:
            procs: list[Any] = [structlog.contextvars.merge_contextvars,
                                structlog.processors.add_log_level, fixed_timestamp]
            if with_processor:
                procs.append(processor)
            procs += [structlog.processors.format_exc_info,
                      structlog.processors.JSONRenderer(sort_keys=True)]
            return structlog.wrap_logger(
                structlog.ReturnLogger(), processors=procs,
                wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
            ).bind(svc="api")

        structlog.contextvars.bind_contextvars(request_id="r-9")
        calls = [
            ("info", ("plain",), {"n": 1}),
            ("warning", ("odd values",), {"when": dt.datetime(2026, 1, 2, 3, 4, 5),
                                          "tags": ("a", "b"), "nested": {"x": [1, {"y": 2}]}}),
            ("error", ("unicode ☃",), {"message": "m", "filename": "f.py", "logger": "custom"}),
        ]
        outputs: dict[bool, list[str]] = {}
        for with_processor in (False, True):
            log = chain(with_processor)
            outputs[with_processor] = [getattr(log, m)(*a, **k) for m, a, k in calls]
            try:
                raise OSError("disk")
            except OSError:
                outputs[with_processor].append(log.exception("failed"))
        assert outputs[True] == outputs[False]
        events = delivered(processor, receiver)
        assert [e["event"] for e in events] == ["plain", "odd values", "unicode ☃", "failed"]
        assert events[1]["when"] == "2026-01-02T03:04:05"
        assert events[1]["tags"] == ["a", "b"]
        assert events[1]["nested"] == {"x": [1, {"y": 2}]}
        assert events[2]["logger"] == "custom"
        assert events[2]["filename"] == "f.py"
        assert events[2]["message"] == "m"
        assert all(e["svc"] == "api" and e["request_id"] == "r-9" for e in events)
        assert all(e["_time"] == FIXED_TS for e in events)

    def test_async_filtering_bound_logger(
            self, processor: IngestProcessor, receiver: Receiver) -> None:
        """`await log.ainfo()` / `aexception()` of make_filtering_bound_logger are shipped."""
        log = structlog.wrap_logger(
            structlog.ReturnLogger(),
            processors=[structlog.contextvars.merge_contextvars,
                        structlog.processors.add_log_level, processor,
                        structlog.processors.JSONRenderer()],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        )

        async def main() -> None:
            structlog.contextvars.bind_contextvars(request_id="async-1")
            await log.adebug("filtered out")
            await log.ainfo("async hello", k=1)
            try:
                raise ValueError("async boom")
            except ValueError:
                await log.aexception("async failed")

        asyncio.run(main())
        events = delivered(processor, receiver)
        assert [e["event"] for e in events] == ["async hello", "async failed"]
        assert events[0]["level"] == "info"
        assert events[0]["k"] == 1
        assert all(e["request_id"] == "async-1" for e in events)
        assert events[1]["level"] == "error"
        assert events[1]["exception"]["type"] == "ValueError"
        assert events[1]["exception"]["message"] == "async boom"

    def test_async_stdlib_bound_logger(
            self, processor: IngestProcessor, receiver: Receiver) -> None:
        """`await log.ainfo()` of structlog.stdlib.BoundLogger is shipped with its context."""
        base = logging.getLogger("test.processor.async")
        base.propagate = False
        base.addHandler(logging.NullHandler())
        base.setLevel(logging.INFO)
        log = structlog.wrap_logger(
            base,
            processors=[structlog.stdlib.filter_by_level,
                        structlog.contextvars.merge_contextvars,
                        structlog.stdlib.add_logger_name, processor,
                        structlog.processors.JSONRenderer()],
            wrapper_class=structlog.stdlib.BoundLogger,
        )

        async def main() -> None:
            structlog.contextvars.bind_contextvars(request_id="async-2")
            await log.adebug("filtered out")
            await log.bind(user="u").awarning("careful", n=2)

        asyncio.run(main())
        [event] = delivered(processor, receiver)
        assert event["event"] == "careful"
        assert event["level"] == "warning"
        assert event["user"] == "u"
        assert event["n"] == 2
        assert event["request_id"] == "async-2"
        assert event["logger"] == "test.processor.async"

    def test_never_raises(self, processor: IngestProcessor, receiver: Receiver) -> None:
        """A rendered string is returned as is and counted; a bad repr still ships."""
        class BadRepr:
            def __repr__(self) -> str:
                raise RuntimeError("no repr")

        assert processor(None, "info", '{"event": "x"}') == '{"event": "x"}'
        assert processor(None, "info", {"event": "bad", "v": BadRepr()})["event"] == "bad"
        [event] = delivered(processor, receiver)
        assert event["v"] == "<unrepresentable BadRepr>"
        stats = processor.stats()
        assert stats.dropped_invalid == 1
        assert stats.delivered == 1

    def test_flush_close_stats(self, receiver: Receiver) -> None:
        """flush() delivers at once; close() is idempotent and later events count as dropped."""
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN, flush_interval=60,
                               compression=None)
        for i in range(5):
            proc(None, "info", {"event": "e", "i": i})
        assert proc.flush(timeout=5) is True
        assert [e["i"] for e in receiver.events] == list(range(5))
        assert "Content-Encoding" not in receiver.requests[0]["headers"]
        proc.close(timeout=5)
        proc.close(timeout=5)
        proc(None, "info", {"event": "late"})
        stats = proc.stats()
        assert (stats.submitted, stats.delivered, stats.dropped_closed) == (6, 5, 1)
        assert stats.submitted == (stats.delivered + stats.dropped + stats.failed
                                   + stats.spooled + stats.queued + stats.unconfirmed)

    def test_shared_shipper_is_only_flushed(self, receiver: Receiver) -> None:
        """close() on a processor given shipper= flushes it but leaves it open for its owner."""
        shipper = Shipper(loghandler.Client(TOKEN, url=receiver.url), "ds", flush_interval=60)
        try:
            proc = IngestProcessor(shipper=shipper)
            proc(None, "info", {"event": "one"})
            proc.close(timeout=5)
            assert [e["event"] for e in receiver.events] == ["one"]
            assert shipper.submit({"event": "two"}) is True
            assert shipper.flush(timeout=5) is True
            assert len(receiver.events) == 2
        finally:
            shipper.close(timeout=5)

    def test_context_manager(self, receiver: Receiver) -> None:
        """`with IngestProcessor(...)` delivers and closes on exit."""
        with IngestProcessor("ds", url=receiver.url, token=TOKEN, flush_interval=60) as proc:
            proc(None, "info", {"event": "ctx"})
        assert [e["event"] for e in receiver.events] == ["ctx"]
        assert proc.shipper.closed

    def test_configuration_errors(self, receiver: Receiver,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """A missing dataset or an unknown option is a ConfigurationError; repr hides the token."""
        monkeypatch.delenv("LOGHANDLER_DATASET", raising=False)
        with pytest.raises(ConfigurationError, match="dataset"):
            IngestProcessor(url=receiver.url, token=TOKEN)
        with pytest.raises(ConfigurationError, match="batch_size"):
            IngestProcessor("ds", url=receiver.url, token=TOKEN, batch_sise=3)
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN)
        try:
            assert TOKEN not in repr(proc)
            assert "ds" in repr(proc)
        finally:
            proc.close(timeout=1)


class TestImports:
    """structlog stays optional."""

    def test_import_does_not_load_structlog(self) -> None:
        """`import loghandler` and loghandler.structlog_support leave structlog unimported."""
        code = ("import sys, loghandler, loghandler.structlog_support; "
                "print('structlog' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=ROOT, check=True, timeout=60)
        assert out.stdout.strip() == "False"


class TestExample:
    """examples/structlog_app.py, run as a user would."""

    def test_example_ships_to_env_url(self, receiver: Receiver) -> None:
        """With LOGHANDLER_URL/TOKEN set, the example's events arrive with their context."""
        env = dict(os.environ, LOGHANDLER_URL=receiver.url, LOGHANDLER_TOKEN=TOKEN,
                   LOGHANDLER_DATASET="ds")
        out = subprocess.run([sys.executable, str(ROOT / "examples" / "structlog_app.py")],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr
        assert TOKEN not in out.stdout + out.stderr
        events = receiver.events
        assert [e["event"] for e in events] == [
            "request.start", "request.done", "request.start", "request.failed",
            "async.request.done"]
        assert events[0]["request_id"] == events[1]["request_id"] != events[2]["request_id"]
        assert events[0]["user"] == "alice" and events[0]["path"] == "/orders"
        failed = events[3]
        assert failed["level"] == "error"
        assert failed["status"] == 500
        assert failed["exception"]["type"] == "OrderError"
        assert failed["exception"]["message"] == "order 42 is locked"
        assert events[4]["path"] == "/health"
        assert all(e["_time"] == e["timestamp"] for e in events)

    def test_example_runs_against_local_service(self) -> None:
        """With no LOGHANDLER_URL, the example ships to a LocalService and prints the events."""
        pytest.importorskip("loghandler.testing", reason="LocalService not available")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        out = subprocess.run([sys.executable, str(ROOT / "examples" / "structlog_app.py")],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr
        events = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(events) == 5
        assert events[3]["exception"]["type"] == "OrderError"
