"""structlog -> stdlib logging -> IngestHandler: ProcessorFormatter and render_to_log_kwargs."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from helpers import TOKEN, Receiver

from loghandler import IngestHandler
from loghandler.structlog_support import REFUSED_EXTRA_KEYS, render_to_log_kwargs

Chain = Callable[..., Any]


@pytest.fixture(autouse=True)
def _clean_contextvars() -> Iterator[None]:
    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


@pytest.fixture
def handler(receiver: Receiver) -> Iterator[IngestHandler]:
    h = IngestHandler("ds", url=receiver.url, token=TOKEN, flush_interval=60)
    yield h
    h.close()


@pytest.fixture
def make_logger(request: pytest.FixtureRequest, handler: IngestHandler) -> Iterator[Chain]:
    """A structlog BoundLogger over a fresh stdlib logger (structlog's LoggerFactory) that has
    the IngestHandler, plus a console StreamHandler the test may give a formatter."""
    made: list[logging.Logger] = []

    def make(processors: list[Any], console: logging.Formatter | None = None,
             stream: io.StringIO | None = None, level: int = logging.DEBUG) -> Any:
        previous = logging.getLoggerClass()
        try:
            base = structlog.stdlib.LoggerFactory()(f"test.sl.{request.node.name}.{len(made)}")
        finally:
            logging.setLoggerClass(previous)
        base.propagate = False
        base.setLevel(level)
        base.addHandler(handler)
        if console is not None:
            sh = logging.StreamHandler(stream)
            sh.setFormatter(console)
            base.addHandler(sh)
        made.append(base)
        return structlog.wrap_logger(base, processors=processors,
                                     wrapper_class=structlog.stdlib.BoundLogger)

    yield make
    for base in made:
        base.handlers.clear()


def delivered(handler: IngestHandler, receiver: Receiver) -> list[dict[str, Any]]:
    assert handler.flush(timeout=5) is True
    return receiver.events


class TestProcessorFormatterPath:
    """wrap_for_formatter: record.msg is the event dict; its keys become the fields."""

    def chain(self) -> list[Any]:
        return [
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ]

    def test_fields_and_record_context(self, make_logger: Chain, handler: IngestHandler,
                                       receiver: Receiver) -> None:
        """Dict keys arrive top-level as they are, with the record's source context."""
        stream = io.StringIO()
        console = structlog.stdlib.ProcessorFormatter(
            processor=structlog.processors.JSONRenderer(sort_keys=True))
        log = make_logger(self.chain(), console, stream)
        structlog.contextvars.bind_contextvars(request_id="req-7")
        log.bind(user="ann").warning("paid %s", "ann", amount=3, filename="invoice.pdf",
                                     message="a field called message", lineno="not a line")
        [event] = delivered(handler, receiver)
        name = log.name
        assert event["event"] == "paid ann"
        assert event["request_id"] == "req-7"
        assert event["user"] == "ann"
        assert event["amount"] == 3
        assert event["filename"] == "invoice.pdf"
        assert event["message"] == "a field called message"
        assert event["lineno"] == "not a line"
        assert event["level"] == "warning"
        assert event["logger"] == name
        assert event["timestamp"].endswith("Z")
        # from the record: structlog's LoggerFactory points it at this test, not at structlog
        assert event["function"] == "test_fields_and_record_context"
        assert event["module"] == "test_structlog_stdlib"
        assert event["file"] == __file__
        assert isinstance(event["line"], int)
        assert isinstance(event["process"], int)
        assert event["thread"] == "MainThread"
        assert event["_time"].endswith("Z")
        assert not {"_logger", "_name", "_record", "_from_structlog", "exc_info",
                    "positional_args"} & set(event)
        # the console handler, formatting the same record, is not disturbed
        console_event = json.loads(stream.getvalue())
        assert console_event["filename"] == "invoice.pdf"
        assert console_event["event"] == "paid ann"

    def test_level_and_logger_from_record_when_absent(
            self, make_logger: Chain, handler: IngestHandler, receiver: Receiver) -> None:
        """Without add_log_level / add_logger_name, level and logger come from the record."""
        log = make_logger([structlog.stdlib.ProcessorFormatter.wrap_for_formatter])
        log.error("bare")
        [event] = delivered(handler, receiver)
        assert event["event"] == "bare"
        assert event["level"] == "error"
        assert event["logger"] == log.name

    def test_exception(self, make_logger: Chain, handler: IngestHandler,
                       receiver: Receiver) -> None:
        """log.exception() gives the structured `exception` object."""
        log = make_logger(self.chain())
        try:
            int("x")
        except ValueError:
            log.exception("parse failed")
        [event] = delivered(handler, receiver)
        assert event["level"] == "error"
        assert event["exception"]["type"] == "ValueError"
        assert "invalid literal" in event["exception"]["message"]
        assert 'int("x")' in event["exception"]["stacktrace"]

    def test_format_exc_info_output_kept(self, make_logger: Chain, handler: IngestHandler,
                                         receiver: Receiver) -> None:
        """An exception already rendered by format_exc_info arrives as that text."""
        log = make_logger([structlog.processors.format_exc_info,
                           structlog.stdlib.ProcessorFormatter.wrap_for_formatter])
        try:
            raise KeyError("gone")
        except KeyError:
            log.error("lookup", exc_info=True)
        [event] = delivered(handler, receiver)
        assert isinstance(event["exception"], str)
        assert event["exception"].startswith("Traceback")
        assert "KeyError: 'gone'" in event["exception"]

    def test_async_ainfo(self, make_logger: Chain, handler: IngestHandler,
                         receiver: Receiver) -> None:
        """`await log.ainfo()` travels through the executor thread with its contextvars."""
        log = make_logger(self.chain(), level=logging.INFO)

        async def main() -> None:
            structlog.contextvars.bind_contextvars(request_id="async-9")
            await log.adebug("filtered by the stdlib level")
            await log.ainfo("async event", k="v")
            try:
                raise RuntimeError("async boom")
            except RuntimeError:
                await log.aexception("async failure")

        asyncio.run(main())
        events = delivered(handler, receiver)
        assert [e["event"] for e in events] == ["async event", "async failure"]
        assert all(e["request_id"] == "async-9" for e in events)
        assert events[0]["k"] == "v"
        assert events[0]["level"] == "info"
        assert events[1]["exception"]["type"] == "RuntimeError"
        assert events[1]["exception"]["message"] == "async boom"


class TestRenderToLogKwargs:
    """loghandler.structlog_support.render_to_log_kwargs: fields arrive as extras, no KeyError."""

    def chain(self, renderer: Any = render_to_log_kwargs) -> list[Any]:
        return [
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.PositionalArgumentsFormatter(),
            renderer,
        ]

    def test_structlogs_own_renderer_crashes_on_collisions(self, make_logger: Chain) -> None:
        """The problem solved here: structlog's render_to_log_kwargs + filename= raises."""
        log = make_logger(self.chain(structlog.stdlib.render_to_log_kwargs))
        with pytest.raises(KeyError, match="Attempt to overwrite 'filename'"):
            log.info("upload", filename="a.txt")

    def test_fields_as_extras_with_colliding_keys_renamed(
            self, make_logger: Chain, handler: IngestHandler, receiver: Receiver) -> None:
        """Plain keys arrive as they are; keys logging refuses arrive as extra_<key>."""
        stream = io.StringIO()
        log = make_logger(self.chain(), logging.Formatter("%(levelname)s %(message)s "
                                                          "%(extra_filename)s"), stream)
        structlog.contextvars.bind_contextvars(request_id="req-1")
        log.bind(user="bo").info("uploaded %s", "a.txt", size=10, filename="a.txt",
                                 message="shadow", name="n", lineno=7, asctime="t",
                                 module="m", process="p")
        [event] = delivered(handler, receiver)
        name = log.name
        assert event["message"] == "uploaded a.txt"
        assert event["level"] == "info"
        assert event["logger"] == name
        assert event["request_id"] == "req-1"
        assert event["user"] == "bo"
        assert event["size"] == 10
        assert event["extra_filename"] == "a.txt"
        assert event["extra_message"] == "shadow"
        assert event["extra_name"] == "n"
        assert event["extra_lineno"] == 7
        assert event["extra_asctime"] == "t"
        # "module" and "process" are LogRecord attributes too; the event keeps the record's
        assert event["extra_module"] == "m"
        assert event["extra_process"] == "p"
        assert event["module"] == "test_structlog_stdlib"
        assert event["function"] == "test_fields_as_extras_with_colliding_keys_renamed"
        assert not {"extra_level", "extra_logger", "event"} & set(event)
        assert stream.getvalue() == "INFO uploaded a.txt a.txt\n"

    def test_exception_and_stack_info_passed_as_kwargs(
            self, make_logger: Chain, handler: IngestHandler, receiver: Receiver) -> None:
        """exc_info and stack_info reach the record, not the extras."""
        log = make_logger(self.chain())
        try:
            raise LookupError("nope")
        except LookupError:
            log.exception("failed", stack_info=True)
        [event] = delivered(handler, receiver)
        assert event["level"] == "error"
        assert event["exception"]["type"] == "LookupError"
        assert event["exception"]["message"] == "nope"
        assert "Stack (most recent call last)" in event["stack"]
        assert not {"exc_info", "stack_info", "extra_exc_info"} & set(event)

    def test_renamed_level_and_logger_kept_when_different(self) -> None:
        """level/logger are left out only when the record carries the same value."""
        logger = logging.getLogger("test.sl.render.unit")
        same = render_to_log_kwargs(logger, "warn", {"event": "e", "level": "warning",
                                                     "logger": "test.sl.render.unit"})
        assert same == {"msg": "e", "extra": {}}
        other = render_to_log_kwargs(logger, "info", {"event": "e", "level": "notice",
                                                      "logger": "other"})
        assert other["extra"] == {"level": "notice", "logger": "other"}

    def test_rename_never_overwrites(self) -> None:
        """extra_<key> already in use pushes the rename further; nothing is overwritten."""
        kwargs = render_to_log_kwargs(None, "info", {"event": "e", "filename": "a",
                                                     "extra_filename": "b"})
        assert kwargs["extra"] == {"extra_extra_filename": "a", "extra_filename": "b"}

    def test_every_refused_key_is_accepted_by_logging(
            self, make_logger: Chain, handler: IngestHandler, receiver: Receiver) -> None:
        """No LogRecord attribute name makes logging raise, and none is lost."""
        log = make_logger(self.chain())
        fields = {key: f"v-{key}" for key in sorted(REFUSED_EXTRA_KEYS)}
        fields.pop("exc_info")
        fields.pop("stack_info")
        log.info("all of them", **fields)
        [event] = delivered(handler, receiver)
        for key in fields:
            assert event[f"extra_{key}"] == f"v-{key}", key

    def test_async(self, make_logger: Chain, handler: IngestHandler,
                   receiver: Receiver) -> None:
        """`await log.ainfo()` through render_to_log_kwargs keeps context and fields."""
        log = make_logger(self.chain())

        async def main() -> None:
            structlog.contextvars.bind_contextvars(request_id="async-3")
            await log.ainfo("async kw", filename="f")

        asyncio.run(main())
        [event] = delivered(handler, receiver)
        assert event["message"] == "async kw"
        assert event["request_id"] == "async-3"
        assert event["extra_filename"] == "f"
