"""Two shipping options of what ships (docs/what-ships.md): ``sample_keep_level`` (errors are
never sampled away unless asked) and ``field_names`` (the event's fields under the names a
user's dashboards read), on the compiled path and the pure-Python one."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys

import pytest
from helpers import TOKEN

import loghandler
from loghandler import ConfigurationError, IngestHandler, Shipper
from loghandler._engine import compiled as _compiled
from loghandler._engine.sampling import Sampler


def invariant(st: loghandler.Stats) -> None:
    assert st.submitted == (st.delivered + st.dropped + st.failed + st.spooled + st.queued
                            + getattr(st, "unconfirmed", 0)), st


def traces(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)  # W3C trace ids are random 128-bit numbers
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


class TestSampleKeepLevel:
    def test_errors_are_never_sampled_away_by_default(self, make_logger, receiver):
        """Rate 0 for every level: errors and criticals still ship, the rest is counted."""
        log, h = make_logger(sample_levels={"debug": 0.0, "info": 0.0, "warning": 0.0,
                                            "error": 0.0, "critical": 0.0})
        for i in range(20):
            log.debug("d%d", i)
            log.info("i%d", i)
            log.warning("w%d", i)
        log.error("card declined")
        log.critical("disk full")
        assert h.flush(5)
        assert [e["message"] for e in receiver.events] == ["card declined", "disk full"]
        st = h.stats()
        assert st.dropped_sampled == 60 and st.delivered == 2
        invariant(st)

    def test_also_against_logger_sampling(self, make_logger, receiver):
        log, h = make_logger("keepnames", sample_loggers={"test.keepnames": 0.0})
        log.info("chatter")
        log.exception("failed", exc_info=ValueError("x"))
        assert h.flush(5)
        assert [(e["level"], e["message"]) for e in receiver.events] == [("error", "failed")]

    def test_a_lower_keep_level(self, make_logger, receiver):
        log, h = make_logger(sample_levels={"info": 0.0, "warning": 0.0},
                             sample_keep_level="WARNING")
        log.info("dropped")
        log.warning("kept")
        assert h.flush(5)
        assert [e["message"] for e in receiver.events] == ["kept"]

    def test_none_samples_every_level_as_configured(self, make_logger, receiver):
        log, h = make_logger(sample_levels={"error": 0.0}, sample_keep_level=None)
        log.error("sampled away")
        log.warning("unlisted: kept")
        assert h.flush(5)
        assert [e["message"] for e in receiver.events] == ["unlisted: kept"]
        assert h.stats().dropped_sampled == 1

    def test_with_the_trace_consistent_rule(self, receiver):
        """A trace's events below the keep level are kept or dropped together (by the trace
        id); its errors always ship, alone when the trace is sampled out. With None, an error
        is part of its trace's verdict like every other event."""
        client = loghandler.Client(url=receiver.url, token=TOKEN)
        ids = traces(200)
        for keep in ("error", None):
            receiver.events.clear()
            s = Shipper(client, "ds", sample_levels={"info": 0.5, "error": 0.5},
                        sample_keep_level=keep)
            try:
                for t in ids:
                    s.submit({"level": "info", "message": "start", "trace_id": t})
                    s.submit({"level": "error", "message": "failed", "trace_id": t})
                    s.submit({"level": "info", "message": "end", "trace_id": t})
                assert s.flush(5)
                invariant(s.stats())
            finally:
                s.close()
            by_trace: dict[str, list[str]] = {}
            for e in receiver.events:
                by_trace.setdefault(e["trace_id"], []).append(e["message"])
            whole = [t for t in ids if by_trace.get(t) == ["start", "failed", "end"]]
            assert 40 <= len(whole) <= 160  # about half of the traces kept whole
            if keep == "error":
                # Every trace's error arrived; the others' info events were dropped together.
                assert set(by_trace) == set(ids)
                assert all(by_trace[t] == ["failed"] for t in ids if t not in whole)
            else:
                assert set(by_trace) == set(whole)

    def test_the_sampler_keeps_by_the_level_number(self):
        """Names of any case, loguru's and structlog's, numbers on logging's scale."""
        sampler = Sampler({"warn": 0.0, "success": 0.0, "exception": 0.0, "fatal": 0.0,
                           "error": 0.0}, None, keep_level=30)
        names = ("warn", "success", "exception", "fatal", "ERROR")
        kept = [name for name in names if sampler.decide(name, None)]
        assert kept == ["warn", "exception", "fatal", "ERROR"]

    @pytest.mark.parametrize(("value", "message"), [
        ("loud", "sample_keep_level must be a level name (\"warning\", \"error\", \"critical\"), "
                 "a logging level number, or None (sample every level), not 'loud'"),
        (True, "sample_keep_level must be a level name (\"warning\", \"error\", \"critical\"), "
               "a logging level number, or None (sample every level), not True"),
    ])
    def test_a_wrong_value_says_what_is_expected(self, value, message):
        with pytest.raises(ConfigurationError) as info:
            IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN, sample_keep_level=value)
        assert str(info.value) == message


NAMES = {"message": "msg", "level": "severity", "logger": "logger.name"}


class TestFieldNames:
    def test_the_events_fields_ship_under_the_names_given(self, make_logger, receiver):
        log, h = make_logger(field_names=NAMES, fields={"service": "checkout"})
        log.warning("paid %s", "A-1", extra={"order_id": "A-1"})
        assert h.flush(5)
        (e,) = receiver.events
        assert (e["msg"], e["severity"], e["logger.name"]) == (
            "paid A-1", "warning", log.name)
        assert not {"message", "level", "logger"} & set(e)
        assert e["order_id"] == "A-1" and e["service"] == "checkout" and "_time" in e

    def test_a_field_already_under_a_new_name_is_kept(self, make_logger, receiver):
        log, h = make_logger(field_names=NAMES)
        log.info("the message", extra={"severity": "the user's own"})
        assert h.flush(5)
        (e,) = receiver.events
        assert e["severity"] == "info" and e["extra_severity"] == "the user's own"

    def test_shipper_and_structlog_style_events(self, receiver):
        s = Shipper(loghandler.Client(url=receiver.url, token=TOKEN), "ds",
                    field_names={"event": "msg", "user_id": "user.id"})
        try:
            s.submit({"event": "order.placed", "user_id": 7, "level": "info"})
            assert s.flush(5)
        finally:
            s.close()
        (e,) = receiver.events
        assert (e["msg"], e["user.id"], e["level"]) == ("order.placed", 7, "info")

    def test_scrubbing_exclusions_and_policies_read_the_usual_names(self, make_logger,
                                                                    receiver):
        """Secrets are found under their own names, exclusions name the default fields, and
        sampling, the keep level and repeats read the event's level, logger and message."""
        log, h = make_logger(field_names={**NAMES, "password": "pw"},
                             exclude_fields=["module"], sample_levels={"debug": 0.0},
                             repeat_limit=2)
        log.debug("sampled away")
        for _ in range(5):
            log.error("retrying", extra={"password": "hunter2"})
        h.close()  # the repeat window's summary ships at close, after the last batch
        got = receiver.events
        assert [e["msg"] for e in got] == [
            "retrying", "retrying", "retrying (repeated 3 more times in 60 s, suppressed)"]
        assert all(e["severity"] == "error" and "module" not in e for e in got)
        assert [e.get("pw") for e in got[:2]] == ["[redacted]", "[redacted]"]
        st = h.stats()
        assert (st.dropped_sampled, st.dropped_repeat) == (1, 3)

    def test_wire_items_under_the_new_names(self):
        """The compiled fast path writes events' final JSON on the caller's thread under the
        new names, each renamed field last, in the mapping's order, as the flusher renames the
        dicts (tests/test_speedups.py holds the two equal byte for byte)."""
        h = IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN, flush_interval=3600,
                          batch_size=10_000, field_names=NAMES, handle_sigterm=False)
        try:
            assert h.shipper.item_plan() is not None
            record = logging.LogRecord("app", logging.INFO, "/app.py", 1, "m %s", ("x",), None)
            h.handle(record)
            item = h.shipper.intake.queue[-1]
            if _compiled.ACTIVE:
                event = json.loads(item)
                assert list(event)[-3:] == list(NAMES.values())
                assert (event["msg"], event["severity"], event["logger.name"]) == (
                    "m x", "info", "app")
        finally:
            h.close()

    @pytest.mark.parametrize(("value", "message"), [
        ({"_time": "timestamp"}, "field_names cannot rename _time: the service reads each "
                                 "event's time from it"),
        ({"message": "text", "event": "text"}, "field_names gives two fields the name 'text': "
                                               "each needs a name of its own"),
        (["message"], "field_names must map the event's field names to the names to ship them "
                      "under, e.g. {'message': 'msg', 'level': 'severity'}, not ['message']"),
        ({"message": ""}, "field_names must map the event's field names to the names to ship "
                          "them under, e.g. {'message': 'msg', 'level': 'severity'}, not "
                          "{'message': ''}"),
    ])
    def test_a_wrong_mapping_says_what_is_wrong(self, value, message):
        with pytest.raises(ConfigurationError) as info:
            IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN, field_names=value)
        assert str(info.value) == message


BOTH_PATHS = """
import json, logging
from loghandler._engine import compiled as _compiled
from loghandler.testing import LocalService
import loghandler
with LocalService(token="t0") as svc:
    h = loghandler.IngestHandler("ds", url=svc.url, token="t0", identity=False,
                                 field_names={"message": "msg", "level": "severity",
                                              "logger": "logger.name", "i": "n"})
    log = logging.getLogger("both")
    log.addHandler(h)
    for i in range(3):
        log.warning("n %d", i, extra={"i": i})
    assert h.flush(10)
    print(json.dumps([_compiled.ACTIVE, [{k: v for k, v in e.items() if k in
          ("msg", "severity", "logger.name", "n", "message", "level", "logger", "i")}
          for e in svc.events("ds")]]))
"""


@pytest.mark.slow
def test_field_names_on_both_paths() -> None:
    """The same events whether the compiled path is on (its wire items off) or not."""
    expected = [{"msg": f"n {i}", "severity": "warning", "logger.name": "both", "n": i}
                for i in range(3)]
    active = []
    for pure in ("1", "0"):
        env = {**os.environ, "LOGHANDLER_PURE_PYTHON": pure}
        proc = subprocess.run([sys.executable, "-c", BOTH_PATHS], capture_output=True,
                              text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        compiled, events = json.loads(proc.stdout)
        active.append(compiled)
        assert events == expected, (pure, events)
    assert active[0] is False  # the pure-Python run; the other is compiled where it is built


def test_renames_that_chain_are_applied_as_one_step() -> None:
    """A new name that is also an old one: each field goes to its own new name."""
    from loghandler._engine.shaping import make_finisher

    finish = make_finisher((), False, (), (), {"message": "level", "level": "severity"})
    assert finish is not None
    event = {"message": "m", "level": "info", "x": 1}
    finish(event)
    assert event == {"x": 1, "level": "m", "severity": "info"}
