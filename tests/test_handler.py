"""IngestHandler: event shape, extras, exceptions, dictConfig, recursion, deadlocks."""

from __future__ import annotations

import copy
import datetime
import importlib
import importlib.util
import io
import logging
import logging.config
import re
import subprocess
import sys
import textwrap
import threading
import weakref

import pytest
from helpers import TOKEN

import loghandler
from loghandler import ConfigurationError, IngestHandler, Shipper, flushing


@pytest.fixture
def logger_options():
    """make_logger's handlers (conftest.py) send at once and retry fast."""
    return {"flush_interval": 0.05, "retry_backoff": 0.01}


class TestEventShape:
    def test_fields(self, receiver, make_logger):
        """_time, level, message, logger and source context are all there."""
        log, h = make_logger()
        log.info("user %s logged in", "ada")
        assert h.flush(5)
        ev = receiver.events[0]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", ev["_time"])
        assert ev["level"] == "info" and ev["message"] == "user ada logged in"
        assert ev["logger"] == log.name and ev["module"] == "test_handler"
        assert ev["function"] == "test_fields" and isinstance(ev["line"], int)
        assert ev["file"].endswith("test_handler.py")
        assert ev["process"] > 0 and ev["thread"] == threading.current_thread().name

    def test_an_events_own_field_wins_over_fields_of_the_same_name(self, receiver):
        """One rule for every front end, on both paths: an event's own field named like a
        fields= key ships its own value (written into the wire item on the compiled path), and
        fields= adds what the event lacks (tests/test_speedups.py holds the bytes equal).
        loguru's part runs where loguru is installed (the README's command, not the matrix's
        engine-only venvs)."""
        from loghandler import IngestProcessor, IngestSink

        loguru = importlib.import_module("loguru") if importlib.util.find_spec("loguru") \
            else None
        shipper = Shipper(loghandler.Client(TOKEN, url=receiver.url), "ds", flush_interval=60,
                          fields={"region": "static", "service": "static"})
        log = logging.getLogger("test_handler.own_field_wins")
        log.propagate = False
        log.setLevel(logging.INFO)
        handler, proc = IngestHandler(shipper=shipper), IngestProcessor(shipper=shipper)
        log.addHandler(handler)
        sink_id = None if loguru is None else loguru.logger.add(IngestSink(shipper=shipper),
                                                                format="{message}")
        try:
            log.info("stdlib", extra={"region": "own"})
            proc(None, "info", {"event": "structlog", "region": "own"})
            if loguru is not None:
                loguru.logger.bind(region="own").info("loguru")
            assert shipper.flush(5)
        finally:
            if loguru is not None:
                loguru.logger.remove(sink_id)
            log.removeHandler(handler)
            shipper.close()
        events = receiver.events
        assert len(events) == (2 if loguru is None else 3)
        for event in events:
            assert (event["region"], event["service"]) == ("own", "static"), event

    def test_time_is_the_record_time_in_utc(self, receiver, make_logger):
        """_time comes from record.created, in UTC with microseconds."""
        log, h = make_logger()
        rec = log.makeRecord(log.name, logging.INFO, "f.py", 1, "m", (), None)
        rec.created = 1_700_000_000.123456
        log.handle(rec)
        assert h.flush(5)
        assert receiver.events[0]["_time"] == "2023-11-14T22:13:20.123456Z"

    def test_extras_at_top_level(self, receiver, make_logger):
        """extra= fields arrive as top-level fields with their JSON types."""
        log, h = make_logger()
        log.warning("slow", extra={"request_id": "r1", "latency_ms": 12.5, "n": 3, "ok": True})
        assert h.flush(5)
        ev = receiver.events[0]
        assert (ev["request_id"], ev["latency_ms"], ev["n"], ev["ok"]) == ("r1", 12.5, 3, True)
        assert ev["level"] == "warning"

    def test_clashing_extra_is_renamed_not_dropped(self, receiver, make_logger):
        """An extra named like an event key survives as extra_<key>."""
        log, h = make_logger()
        log.info("m", extra={"level": "custom", "logger": "mine", "line": "x"})
        assert h.flush(5)
        ev = receiver.events[0]
        assert ev["level"] == "info" and ev["extra_level"] == "custom"
        assert ev["extra_logger"] == "mine" and ev["extra_line"] == "x"

    def test_formatter_attributes_are_not_extras(self, receiver, make_logger):
        """A handler before ours whose Formatter set record.message / asctime adds no fields."""
        log, h = make_logger()
        out = io.StringIO()
        first = logging.StreamHandler(out)
        first.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.handlers.insert(0, first)
        try:
            log.info("hello %s", "there", extra={"k": 1})
        finally:
            log.removeHandler(first)
        assert out.getvalue().endswith("hello there\n")  # the formatter did run first
        assert h.flush(5)
        ev = receiver.events[0]
        assert ev["message"] == "hello there" and ev["k"] == 1
        assert "asctime" not in ev and "extra_message" not in ev

    def test_record_changed_after_the_call_does_not_change_the_event(self, receiver,
                                                                      make_logger):
        """What a later handler (a colouring formatter) does to the record is not shipped:
        the event's values are taken at the call, even though it is finished on the flusher."""
        log, h = make_logger()

        class Colouring(logging.Handler):
            def emit(self, record):
                record.levelname = "\x1b[32mINFO\x1b[0m"
                record.created = 0.0
                record.request_id = "changed"

        log.addHandler(Colouring())
        log.info("m", extra={"request_id": "r1"})
        assert h.flush(5)
        ev = receiver.events[0]
        assert ev["level"] == "info" and ev["request_id"] == "r1"
        assert not ev["_time"].startswith("1970")

    def test_custom_level_name(self, receiver, make_logger):
        """A level added with addLevelName is shipped lower-cased."""
        logging.addLevelName(25, "NOTICE")
        log, h = make_logger()
        log.log(25, "m")
        log.log(26, "n")
        assert h.flush(5)
        assert [e["level"] for e in receiver.events] == ["notice", "level 26"]

    def test_odd_record_values_from_a_filter_still_ship(self, receiver, make_logger):
        """A filter that puts odd values in the record (a created that is no number, an
        object as line number) costs nothing but those values' shape."""
        log, h = make_logger()

        def odd(record):
            record.created = "yesterday"
            record.lineno = object()
            record.levelname = ["list"]
            return True

        h.addFilter(odd)
        log.info("m")
        assert h.flush(5)
        ev = receiver.events[0]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", ev["_time"])
        assert ev["message"] == "m" and ev["line"].startswith("<object object")
        assert h.stats().delivered == 1

    def test_big_message_takes_the_locked_path(self, receiver, make_logger):
        """A message bigger than the fast path's limit is queued, counted and delivered too."""
        from loghandler._engine.shipper import FAST_ITEM_BYTES

        log, h = make_logger()
        log.info("x" * FAST_ITEM_BYTES)
        log.info("small")
        assert h.flush(5)
        assert [len(e["message"]) for e in receiver.events] == [FAST_ITEM_BYTES, 5]

    def test_exception(self, receiver, make_logger):
        """log.exception gives {type, message, stacktrace}."""
        log, h = make_logger()
        try:
            raise KeyError("missing")
        except KeyError:
            log.exception("failed")
        assert h.flush(5)
        exc = receiver.events[0]["exception"]
        assert exc["type"] == "KeyError" and exc["message"] == "'missing'"
        assert "Traceback" in exc["stacktrace"] and 'raise KeyError("missing")' in exc["stacktrace"]
        assert receiver.events[0]["level"] == "error"

    def test_stack_info(self, receiver, make_logger):
        """stack_info=True gives a stack field."""
        log, h = make_logger()
        log.info("here", stack_info=True)
        assert h.flush(5)
        assert "Stack (most recent call last)" in receiver.events[0]["stack"]

    def test_message_formatted_at_emit(self, receiver, make_logger):
        """Arguments changed after the call do not change the message."""
        log, h = make_logger()
        data = ["before"]
        log.info("value %s", data)
        data[0] = "after"
        assert h.flush(5)
        assert receiver.events[0]["message"] == "value ['before']"

    def test_record_is_not_modified(self, receiver, make_logger):
        """emit() leaves the LogRecord exactly as it was."""
        log, h = make_logger()
        rec = log.makeRecord(log.name, logging.INFO, "f.py", 1, "x %s", ("y",), None,
                             extra={"k": {"a": 1}})
        before = copy.copy(rec.__dict__)
        h.handle(rec)
        assert rec.__dict__ == before
        assert h.flush(5)

    def test_non_json_extras(self, receiver, make_logger):
        """datetime, sets, objects, cycles, NaN in extras become JSON-safe values."""
        log, h = make_logger()
        cyc: dict = {}
        cyc["self"] = cyc
        log.info("m", extra={"when": datetime.date(2026, 1, 2), "tags": {"b"}, "obj": object(),
                             "cyc": cyc, "nan": float("nan"),
                             "nested": {"d": datetime.date(2026, 1, 3)}})
        assert h.flush(5)
        ev = receiver.events[0]
        assert ev["when"] == "2026-01-02" and ev["tags"] == ["b"] and ev["nan"] is None
        assert ev["cyc"] == {"self": "<cycle>"} and ev["nested"] == {"d": "2026-01-03"}
        assert ev["obj"].startswith("<object object")

    def test_mutable_extra_is_snapshotted(self, receiver, make_logger):
        """A dict passed as an extra is copied at emit time."""
        log, h = make_logger()
        ctx = {"user": "ada"}
        log.info("m", extra={"ctx": ctx})
        ctx["user"] = "bob"
        assert h.flush(5)
        assert receiver.events[0]["ctx"] == {"user": "ada"}

    def test_broken_args_still_ship(self, receiver, make_logger, capfd):
        """A format error ships the template and args instead of a traceback storm."""
        log, h = make_logger()
        log.info("two %s %s", "only-one")
        log.info("%d", "not a number")
        assert h.flush(5)
        assert len(receiver.events) == 2
        assert "two %s %s" in receiver.events[0]["message"]
        assert "formatting failed" in receiver.events[1]["message"]
        assert "Traceback" not in capfd.readouterr().err

    @pytest.mark.parametrize("msg", [42, None, b"bytes", ("a", 1), object()])
    def test_msg_of_any_type(self, receiver, make_logger, msg):
        """Non-string messages are shipped as their str()."""
        log, h = make_logger()
        log.info(msg)
        assert h.flush(5)
        assert receiver.events[0]["message"] == str(msg)

    def test_dict_msg_contributes_keys(self, receiver, make_logger):
        """A record whose msg is a dict (structlog via stdlib) gives its keys as fields."""
        log, h = make_logger()
        log.info({"event": "login", "user": "ada", "filename": "x.py", "message": "m"})
        assert h.flush(5)
        ev = receiver.events[0]
        assert ev["event"] == "login" and ev["user"] == "ada"
        assert ev["filename"] == "x.py" and ev["message"] == "m" and ev["level"] == "info"


class TestConfiguration:
    def test_dict_config(self, receiver):
        """dictConfig builds the handler from plain keyword arguments."""
        logging.config.dictConfig({
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"ingest": {
                "class": "loghandler.IngestHandler", "level": "INFO", "dataset": "ds",
                "token": TOKEN, "url": receiver.url, "flush_interval": 0.05,
            }},
            "loggers": {"dc": {"handlers": ["ingest"], "level": "DEBUG", "propagate": False}},
        })
        log = logging.getLogger("dc")
        handler = log.handlers[0]
        try:
            log.debug("filtered by the handler level")
            log.info("configured")
            assert handler.flush(5)
            assert [e["message"] for e in receiver.events] == ["configured"]
        finally:
            log.removeHandler(handler)
            handler.close()

    def test_missing_dataset(self, receiver, monkeypatch):
        """No dataset anywhere is a ConfigurationError naming LOGHANDLER_DATASET."""
        monkeypatch.delenv("LOGHANDLER_DATASET", raising=False)
        with pytest.raises(ConfigurationError, match="LOGHANDLER_DATASET"):
            IngestHandler(token=TOKEN, url=receiver.url)

    def test_dataset_from_environment(self, receiver, monkeypatch):
        """dataset, token and url can all come from the environment."""
        monkeypatch.setenv("LOGHANDLER_DATASET", "ds")
        monkeypatch.setenv("LOGHANDLER_TOKEN", TOKEN)
        monkeypatch.setenv("LOGHANDLER_URL", receiver.url)
        h = IngestHandler(flush_interval=0.05)
        h.handle(logging.makeLogRecord({"msg": "env", "levelno": 20, "levelname": "INFO"}))
        assert h.flush(5)
        assert receiver.events[0]["message"] == "env"
        h.close()

    def test_handlers_share_one_client(self, receiver):
        """Handlers configured the same way share one Client (one connection pool)."""
        a = IngestHandler("a", token=TOKEN, url=receiver.url)
        b = IngestHandler("b", token=TOKEN, url=receiver.url)
        assert a.shipper.client is b.shipper.client and a.shipper is not b.shipper
        a.close()
        b.close()

    def test_shipper_and_options_are_exclusive(self, receiver):
        """shipper= with other options is a ConfigurationError."""
        s = Shipper(loghandler.Client(TOKEN, url=receiver.url), "ds")
        with pytest.raises(ConfigurationError, match="shipper"):
            IngestHandler("ds", shipper=s)
        h = IngestHandler(shipper=s)
        assert h.shipper is s
        h.close()
        s.close()

    def test_repr_has_no_token(self, receiver):
        """repr shows the dataset, never the token."""
        h = IngestHandler("ds", token=TOKEN, url=receiver.url)
        assert "ds" in repr(h) and TOKEN not in repr(h)
        h.close()


class TestSafety:
    def test_own_http_logs_are_not_shipped(self, receiver):
        """Root at DEBUG with urllib3 debug logs on: requests stay bounded, no feedback loop."""
        root = logging.getLogger()
        old_level, old_handlers = root.level, root.handlers[:]
        h = IngestHandler("ds", token=TOKEN, url=receiver.url, flush_interval=0.05)
        root.handlers[:] = [h]
        root.setLevel(logging.DEBUG)
        logging.getLogger("urllib3").setLevel(logging.DEBUG)
        # The test's own HTTP server logs each request on its own thread (that is the
        # application's log, legitimately shipped); keep it out of this count.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        try:
            for i in range(5):
                logging.getLogger("app").info("event %d", i)
                assert h.flush(5)
            assert [e["message"] for e in receiver.events] == [f"event {i}" for i in range(5)]
            assert len(receiver.requests) == 5
            assert h.stats().suppressed > 0  # urllib3 did log, on the flusher thread
        finally:
            root.handlers[:] = old_handlers
            root.setLevel(old_level)
            logging.getLogger("urllib3").setLevel(logging.WARNING)
            logging.getLogger("werkzeug").setLevel(logging.NOTSET)
            h.close()

    def test_another_threads_sending_keeps_this_thread_compiled(self, receiver, make_logger,
                                                                 monkeypatch):
        """While the flusher is inside a request, an application thread's call keeps the
        compiled path (issue 49: it took the Python path for as long as any request was in
        flight); on the sending thread itself, urllib3's records are still suppressed."""
        from loghandler._engine import compiled
        from loghandler._engine.guard import HTTP, sending

        if not compiled.ACTIVE:
            pytest.skip("the compiled path is not active")
        calls: list[str] = []
        # the compiled path's hand-off to Python, counted: its name is the contract
        # (fastpath.FastPath).
        python_path = IngestHandler._handle_python  # noqa: SLF001

        def counting(self, record):
            calls.append(record.name)
            return python_path(self, record)

        # The compiled handle() is told its Python twin when it is made (as the class does).
        monkeypatch.setattr(IngestHandler, "handle", compiled.front_method("handle", counting))
        log, h = make_logger()
        inside, leave = threading.Event(), threading.Event()

        def sender() -> None:
            with sending(HTTP):
                inside.set()
                leave.wait(30)

        t = threading.Thread(target=sender)
        t.start()
        try:
            assert inside.wait(30)
            for i in range(5):
                log.info("event %d", i)
            assert calls == []  # all five on the compiled path
        finally:
            leave.set()
            t.join(30)
        own = logging.getLogger("urllib3.connectionpool")
        own.addHandler(h)
        try:
            with sending(HTTP):
                own.warning("ours")
        finally:
            own.removeHandler(h)
        assert calls == ["urllib3.connectionpool"]
        assert h.flush(10)
        assert [e["message"] for e in receiver.events] == [f"event {i}" for i in range(5)]
        assert h.stats().suppressed == 1

    def test_app_urllib3_logs_are_shipped(self, receiver, make_logger):
        """The guard is per thread: urllib3 logs of the application itself still ship."""
        _log, h = make_logger()
        logging.getLogger("urllib3.connectionpool").addHandler(h)
        try:
            logging.getLogger("urllib3.connectionpool").warning("app's own request")
            assert h.flush(5)
            assert receiver.events[0]["logger"] == "urllib3.connectionpool"
        finally:
            logging.getLogger("urllib3.connectionpool").removeHandler(h)

    def test_flush_under_logging_lock_does_not_deadlock(self, receiver):
        """flush() while holding logging's module lock returns while the flusher logs."""
        h = IngestHandler("ds", token=TOKEN, url=receiver.url, flush_interval=0.05)
        root = logging.getLogger()
        root.addHandler(h)
        logging.getLogger("urllib3").setLevel(logging.DEBUG)
        try:
            for i in range(50):
                logging.getLogger("busy").warning("e %d", i)
            done = threading.Event()

            def under_lock() -> None:
                # logging's module lock, as dictConfig holds it: the deadlock checked for.
                with logging._lock:  # what dictConfig and _clearExistingHandlers hold  # noqa: SLF001
                    h.flush()
                    logging.shutdown([weakref.ref(h)])  # as _clearExistingHandlers does
                done.set()

            t = threading.Thread(target=under_lock)
            t.start()
            assert done.wait(10), "flush/close under logging's lock deadlocked"
            st = h.stats()
            assert st.submitted == 50
        finally:
            root.removeHandler(h)
            logging.getLogger("urllib3").setLevel(logging.WARNING)
            h.close()

    def test_emit_never_raises(self, receiver, make_logger, capfd):
        """An extra whose repr raises still ships; nothing reaches the caller."""
        class Evil:
            def __repr__(self) -> str:
                raise RuntimeError("no repr")

        log, h = make_logger()
        log.info("m", extra={"evil": Evil()})
        assert h.flush(5)
        assert receiver.events[0]["evil"] == "<unrepresentable Evil>"
        assert capfd.readouterr().err == ""  # no handleError traceback either

    @pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
    def test_an_interrupt_from_the_application_propagates_at_once(self, receiver, make_logger,
                                                                  interrupt):
        """Issue 35.3: only an Exception is caught on the caller's path. An argument whose
        __str__ raises KeyboardInterrupt (a Ctrl+C landing there) or SystemExit reaches the
        caller every time, on either path; the application's code runs once per call, and
        nothing is queued or counted for the interrupted call. The next call ships."""
        calls = []

        class Interrupting:
            def __str__(self) -> str:
                calls.append(1)
                raise interrupt()

        log, h = make_logger()
        raised = 0
        for _ in range(5):
            try:
                log.info("value %s", Interrupting())
            except interrupt:
                raised += 1
        assert (raised, len(calls)) == (5, 5)
        st = h.stats()
        assert st.submitted == st.dropped == 0
        log.info("after")
        assert h.flush(5)
        assert [e["message"] for e in receiver.events] == ["after"]


class TestServerless:
    def test_flushing_decorator(self, receiver, make_logger):
        """@flushing(handler) delivers everything before the function returns."""
        log, h = make_logger(flush_interval=60)

        @flushing(h, timeout=5)
        def invocation() -> str:
            log.info("in lambda")
            return "ok"

        assert invocation() == "ok"
        assert [e["message"] for e in receiver.events] == ["in lambda"]

    def test_flushing_context_manager(self, receiver):
        """with flushing(): flushes every live shipper and reports success. In a process of
        its own: flushing() reads every shipper of the process, and in the test process others'
        leftovers (a shipper kept alive a while by the collector) may fairly not deliver."""
        code = textwrap.dedent(f"""
            import logging, loghandler
            h = loghandler.IngestHandler("ds", url={receiver.url!r}, token={TOKEN!r},
                                         flush_interval=60)
            log = logging.getLogger("app")
            log.addHandler(h)
            log.propagate = False
            with loghandler.flushing(timeout=5) as f:
                log.warning("a")
            print("delivered", f.delivered, flush=True)
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert proc.stdout.strip() == "delivered True", proc.stdout + proc.stderr
        assert len(receiver.events) == 1

    def test_stats_delegates(self, receiver, make_logger):
        """handler.stats() is the shipper's."""
        log, h = make_logger()
        log.info("x")
        h.flush(5)
        assert h.stats().delivered == 1 == h.shipper.stats().delivered


class TestResources:
    def test_close_releases_the_shared_pool_with_the_last_handler(self):
        """Handlers built from arguments share a pool (one connection for both), closed when
        the last of them closes."""
        from faultserver import FaultServer

        record = logging.makeLogRecord({"msg": "x", "levelname": "INFO", "levelno": 20})
        with FaultServer() as srv:
            a = IngestHandler("ds", token=TOKEN, url=srv.url, flush_interval=0.05)
            b = IngestHandler("ds", token=TOKEN, url=srv.url, flush_interval=0.05)
            assert a.shipper.client is b.shipper.client
            a.handle(record)
            assert a.flush(5)
            a.close()
            b.handle(record)  # b still uses the pool: the same connection
            assert b.flush(5)
            assert srv.accepted == 1 and srv.open_connections() == 1
            b.close()
            assert srv.wait_connections(0, 5), "the last close() left the pool's connection open"

    def test_a_users_client_stays_open(self):
        """A Client passed in by the user is not closed by the handler."""
        from faultserver import FaultServer

        with FaultServer() as srv:
            client = loghandler.Client(TOKEN, url=srv.url)
            h = IngestHandler("ds", client=client, flush_interval=0.05)
            h.handle(logging.makeLogRecord({"msg": "x", "levelname": "INFO", "levelno": 20}))
            assert h.flush(5)
            h.close()
            client.ingest("ds", [{"after": "close"}])  # on the connection the handler used
            assert srv.accepted == 1
            client.close()
