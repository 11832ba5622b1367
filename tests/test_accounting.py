"""Events that used to vanish without account or lose fields (issue 15): odd records on the
careful path, keys that collide once converted to strings."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import TOKEN, without_orjson

from loghandler import Client, IngestHandler, IngestProcessor, Shipper
from loghandler import _encoding as encoding
from loghandler._engine.events import record_to_event


class OddRecord(logging.LogRecord):
    """A LogRecord subclass: always the careful path (record_to_event)."""


class BrokenProperty(logging.LogRecord):
    @property  # type: ignore[override]
    def module(self) -> str:
        raise RuntimeError("no module for you")

    @module.setter
    def module(self, value: str) -> None:
        pass


def make(cls: type[logging.LogRecord] = OddRecord, **attrs: Any) -> logging.LogRecord:
    record = cls("odd", logging.WARNING, "/app/x.py", 7, "hello %s", ("there",), None)
    record.__dict__.update(attrs)
    return record


class TestCarefulPath:
    @pytest.mark.parametrize("created", [math.nan, math.inf, -math.inf, 1e300, -1e20, "soon"])
    def test_created_that_is_no_time_is_now(self, created):
        """created NaN, infinite or out of range: the event ships with _time = now."""
        before = time.time()
        event, size = record_to_event(make(created=created))
        assert event["message"] == "hello there" and size > 0
        assert event["_time"][:4] == time.strftime("%Y", time.gmtime(before))

    def test_property_that_raises_costs_only_its_field(self):
        """A record class whose property raises still gives an event, the rest intact."""
        event, _ = record_to_event(make(BrokenProperty, user=7))
        assert event["message"] == "hello there" and event["user"] == 7
        assert event["module"] == "<module unavailable: RuntimeError>"
        assert event["logger"] == "odd" and event["line"] == 7

    def test_through_the_handler_every_event_is_counted(self, receiver, capsys):
        """Shipped and counted, without a "--- Logging error ---"."""
        h = IngestHandler("ds", token=TOKEN, url=receiver.url, flush_interval=60)
        records = [make(created=math.nan), make(created=math.inf), make(BrokenProperty),
                   make(logging.LogRecord, created=math.nan,
                        exc_info=(ValueError, ValueError("x"), None))]
        for r in records:
            h.handle(r)
        assert h.flush(5)
        h.close()
        st = h.stats()
        assert st.submitted == st.delivered == len(receiver.events) == 4
        assert "Logging error" not in capsys.readouterr().err
        assert receiver.events[3]["exception"]["type"] == "ValueError"


COLLIDING = {1: "a", "1": "b", None: "c", "null": "d"}


def values_of(obj: dict[str, Any]) -> list[Any]:
    return sorted(v for v in obj.values() if isinstance(v, str))


class TestCollidingKeys:
    @pytest.mark.parametrize("fast", [True, False])
    def test_encoder_renames_never_loses(self, fast):
        """1 and "1", None and "null": both kept (the second renamed extra_<key>), on the
        orjson and on the stdlib path."""
        # Not fast: the standard library's encoder in orjson's place (what runs without it).
        with contextlib.nullcontext() if fast else without_orjson():
            decoded = json.loads(encoding.encode({"data": dict(COLLIDING)}))
        assert values_of(decoded["data"]) == ["a", "b", "c", "d"]
        assert set(decoded["data"]) == {"1", "extra_1", "null", "extra_null"}
        assert values_of(encoding.to_jsonable(COLLIDING)) == ["a", "b", "c", "d"]

    def test_submit_top_level_keys(self, receiver):
        """Shipper.submit with colliding top-level keys: all four arrive."""
        s = Shipper(Client(TOKEN, url=receiver.url), "ds", flush_interval=60)
        s.submit(dict(COLLIDING))
        assert s.flush(5)
        s.close()
        assert values_of(receiver.events[0]) == ["a", "b", "c", "d"]

    def test_extra_and_processor(self, receiver):
        """A handler's extra holding such a dict, and a structlog event dict with such keys."""
        h = IngestHandler("ds", token=TOKEN, url=receiver.url, flush_interval=60)
        log = logging.getLogger("test.colliding")
        log.propagate = False
        log.addHandler(h)
        log.warning("x", extra={"data": dict(COLLIDING)})
        log.removeHandler(h)
        p = IngestProcessor(shipper=h.shipper)
        p(None, "info", {"event": "y", **COLLIDING})
        assert h.flush(5)
        h.close()
        first, second = receiver.events
        assert values_of(first["data"]) == ["a", "b", "c", "d"]
        assert sorted(second[k] for k in ("1", "extra_1", "null", "extra_null")) == [
            "a", "b", "c", "d"]


class TrickleServer:
    """A raw-socket service that answers one byte every ``pause`` seconds, for ever."""

    def __init__(self, pause: float = 0.2) -> None:
        import socket
        import threading

        self.pause = pause
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import threading

        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: Any) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        with conn:
            conn.settimeout(1.0)
            try:
                conn.recv(65536)
                for byte in answer:
                    if self.stop.wait(self.pause):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


class TestWholeRequestTimeout:
    def test_trickling_answer_ends_at_timeout(self):
        """Client(timeout=1): a service sending one byte every 0.2 s (each read succeeds) is
        given up after 1 s, with a message saying the whole request is bounded."""
        from loghandler import TransportError

        server = TrickleServer(0.2)
        try:
            client = Client(TOKEN, url=server.url, timeout=1.0)
            t0 = time.monotonic()
            with pytest.raises(TransportError, match="within 1 s"):
                client.send("POST", "/v1/datasets/ds/ingest", b"[]")
            assert time.monotonic() - t0 < 2.0
            client.close()
        finally:
            server.close()

    def test_trickling_service_does_not_hold_the_flusher(self):
        """A shipper facing a trickling service is not held by it: each attempt ends at the
        client's timeout (0.5 s), so two attempts settle the batch in about a second."""
        server = TrickleServer(0.2)
        try:
            s = Shipper(Client(TOKEN, url=server.url, timeout=0.5), "ds", flush_interval=60,
                        max_retries=1, retry_backoff=0.01)
            for i in range(1000):
                s.submit({"i": i})
            t0 = time.monotonic()
            assert not s.flush(10)
            assert time.monotonic() - t0 < 3.0
            st = s.stats()
            assert st.failed_retries_exhausted == 1000 and st.retried == 1 and st.queued == 0
            s.close()
        finally:
            server.close()


class TestSecurityAndNoise:
    def test_repr_never_shows_the_token(self):
        """The token in the URL's path or in the dataset name: no repr shows it."""
        from loghandler import IngestHandler, IngestProcessor

        client = Client(TOKEN, url=f"http://127.0.0.1:9/{TOKEN}/")
        shipper = Shipper(client, f"ds-{TOKEN}")
        handler = IngestHandler(shipper=shipper)
        processor = IngestProcessor(shipper=shipper)
        for obj in (client, client.settings, shipper, handler, processor):
            assert TOKEN not in repr(obj) and "***" in repr(obj), repr(obj)
        shipper.close()

    @pytest.mark.parametrize("name", [".", ".."])
    def test_dot_dataset_names_are_refused(self, name):
        """"." and ".." would change the request path (dot segments are removed): refused."""
        from loghandler import ConfigurationError, IngestHandler

        client = Client(TOKEN, url="http://127.0.0.1:9")
        with pytest.raises(ConfigurationError, match="not a dataset name"):
            Shipper(client, name)
        with pytest.raises(ConfigurationError, match="not a dataset name"):
            IngestHandler(name, client=client)
        with pytest.raises(ConfigurationError, match="not a dataset name"):
            client.ingest(name, [{"a": 1}])
        Shipper(client, "...").close()  # three dots are just a name

    def test_long_names_and_service_messages_are_clipped(self, capsys):
        """A 70,000-character dataset name gives a short stderr line, not a 140 KB one."""
        from helpers import closed_port_url

        s = Shipper(Client(TOKEN, url=closed_port_url()), "n" * 70_000, max_retries=0,
                    flush_interval=60)
        s.submit({"a": 1})
        assert not s.flush(5)
        s.close()
        err = capsys.readouterr().err
        assert err and all(len(line) <= 2000 for line in err.splitlines())
        assert "connection refused" in err

    def test_control_characters_in_service_errors_are_escaped(self, httpserver):
        """An error body with terminal escapes and newlines cannot forge output lines."""
        from loghandler import ApiError

        evil = "bad\x1b[2J\nloghandler: FORGED\u202e" + "x" * 5000
        httpserver.expect_request("/v1/datasets/ds/ingest").respond_with_json(
            {"message": evil}, status=400)
        client = Client(TOKEN, url=httpserver.url_for("").rstrip("/"))
        with pytest.raises(ApiError) as info:
            client.ingest("ds", [{"a": 1}])
        text = str(info.value)
        assert "\x1b" not in text and "\n" not in text and "\u202e" not in text
        assert "\\x1b[2J\\x0aloghandler: FORGED" in text and len(text) < 1000

    def test_serve_request_log_is_escaped(self):
        """`loghandler serve` prints one line per request: a client cannot forge lines or send
        terminal escapes through the path or the dataset name."""
        import socket
        import subprocess
        import sys

        proc = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--port", "0",
                                 "--token", TOKEN], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            url = first.split("listening on ")[1].split()[0]
            host, port = url.removeprefix("http://").split(":")
            for target in (b"/a\x1b[2Jb", b"/v1/datasets/x%1b%5b2J%0aFORGED/ingest"):
                with socket.create_connection((host, int(port))) as sock:
                    sock.sendall(b"POST " + target + b" HTTP/1.1\r\nHost: x\r\n"
                                 b"Authorization: Bearer " + TOKEN.encode() +
                                 b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]")
                    while sock.recv(65536):
                        pass
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=20)
        lines = [line for line in out.splitlines() if line.startswith("POST")]
        assert len(lines) == 2, out
        assert "\x1b" not in out and not any(line.startswith("FORGED") for line in out.splitlines())
        assert "\\x1b[2J" in lines[0] and "\\x0aFORGED" in lines[1]


class TestHangingRepr:
    def test_close_is_bounded_and_only_what_reaches_disk_counts_as_spooled(self, receiver,
                                                                          tmp_path):
        """A value whose __repr__ hangs: the flusher is stuck encoding it. close() still returns
        within shutdown_timeout (+ the grace to encode the rest for the spool); events the
        flusher was encoding count as dropped_shutdown, not spooled (they never reach disk);
        the queued rest is encoded on a helper thread until a second hanging value, and exactly
        what was written counts as spooled."""
        import threading

        from loghandler._engine.spoolfiles import READY, dataset_dir, decode_file

        release = threading.Event()

        class Hang:
            def __repr__(self) -> str:
                release.wait(30)
                return "released"

        s = Shipper(Client(TOKEN, url=receiver.url), "ds", flush_interval=60, batch_size=10,
                    shutdown_timeout=1, spool_dir=str(tmp_path))
        try:
            for i in range(10):
                s.submit({"i": i})
            assert s.flush(5)
            for i in range(10, 20):  # the flusher takes these ten and hangs on one
                s.submit({"i": i, "v": Hang() if i == 15 else i})
            assert not s.flush(0.5)
            for i in range(20, 51):  # queued behind it; one more hanging value among them
                s.submit({"i": i, "v": Hang() if i == 40 else i})
            t0 = time.monotonic()
            s.close()
            took = time.monotonic() - t0
        finally:
            release.set()
        assert took < 1 + 0.2 + 0.5 + 0.5, took
        st = s.stats()
        path = dataset_dir(tmp_path, "ds")
        on_disk = [e for n in sorted(os.listdir(path)) if n.endswith(READY)
                   for e in decode_file(Path(path, n).read_bytes())]
        assert [json.loads(e)["i"] for e in on_disk] == list(range(20, 40)), (st, on_disk)
        assert (st.submitted, st.delivered, st.spooled, st.dropped_shutdown, st.queued) == (
            51, 10, 20, 21, 0)

    def test_exit_is_bounded(self, receiver, tmp_path):
        """Through atexit too: the process ends within shutdown_timeout and the grace, not
        when the __repr__ returns (never), and the exit line accounts for every event."""
        import subprocess
        import sys
        import textwrap

        code = textwrap.dedent(f"""
            import threading, time, loghandler
            class Hang:
                def __repr__(self):
                    threading.Event().wait()
            s = loghandler.Shipper(loghandler.Client({TOKEN!r}, url={receiver.url!r}), "ds",
                                   flush_interval=60, batch_size=10, shutdown_timeout=1,
                                   spool_dir={str(tmp_path)!r})
            for i in range(30):
                s.submit({{"i": i, "v": Hang() if i == 5 else i}})
            s.flush(0.3)
            print("LAST", time.monotonic(), flush=True)
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        ended = time.monotonic()
        assert proc.returncode == 0, proc.stderr
        # From the script's last line (the same monotonic clock) to the process's end: the
        # exit's shutdown_timeout (1 s) and encoding grace (0.5 s), and the slack there was;
        # the interpreter's start and imports (slow on a busy host) are not the exit's.
        last = float(proc.stdout.split("LAST")[1])
        assert ended - last < 1 + 0.5 + 2.0
        assert "0 of 30 delivered, 10 dropped (10 at exit), 20 spooled" in proc.stderr


class TestOutageWithSpool:
    @pytest.mark.slow
    def test_fifteen_second_outage_at_full_speed_loses_nothing(self, tmp_path):
        """With spool_dir, a 15 s outage while the application logs 13,000 events/s: nothing is
        dropped (the queue spills to disk as fast as events come), and once the service is back
        every event is delivered, the spooled ones in order."""
        import sys

        sys.path.insert(0, str(Path(__file__).parent))
        from faultserver import FaultServer

        srv = FaultServer(keep_field="i").start()
        srv.stop()  # down: connections refused, on a port we can listen on again
        h = IngestHandler("ds", token=TOKEN, url=srv.url, spool_dir=str(tmp_path))
        log = logging.getLogger("test.outage")
        log.propagate = False
        log.setLevel(logging.INFO)
        log.addHandler(h)
        rate, seconds = 13_000, 15
        total = rate * seconds
        try:
            start = time.monotonic()
            for i in range(total):
                if i % 130 == 0:  # pace: 130 events every 10 ms
                    ahead = start + i / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                log.info("event %d", i, extra={"i": i, "user": "u-%d" % (i % 977)})
            st = h.stats()
            assert st.dropped == 0 and st.failed == 0, st
            assert st.spooled > total // 2  # it did go to disk
            srv.start()
            assert srv.wait_events(total, timeout=120), "the spool was not delivered"
        finally:
            log.removeHandler(h)
            h.close()
            srv.stop()
        got = list(srv.events)
        assert sorted(got) == list(range(total))  # each event once
        st = h.stats()
        assert st.dropped == 0 and st.failed == 0 and st.replayed == st.spooled
        # Two streams, each in order: the spool (the oldest events, all to disk while the
        # service was down), oldest first, and what was still queued when the service came
        # back. A replay round sends at most 8 files and live batches go out between rounds
        # (docs/reliability.md, "Replay"), so the queued events may arrive between two rounds:
        # the order asked is that of each stream, not one run after the other.
        spooled = [i for i in got if i < st.spooled]
        assert spooled == list(range(st.spooled)), "the spool was not replayed in order"
        queued = [i for i in got if i >= st.spooled]
        assert queued == list(range(st.spooled, total)), "the queued events came out of order"


# --------------------------------------------------------------------------- in memory

class TestInMemoryTransport:
    """The engine's accounting against an in-memory transport (no sockets): every answer the
    policy knows, in a seeded random order, and the invariant after each flush."""

    FAST = {"flush_interval": 0.05, "retry_backoff": 0.001, "max_retry_delay": 0.002,
            "max_retries": 2}

    @staticmethod
    def _shipper(transport: Any, **options: Any) -> Shipper:
        opts = {**TestInMemoryTransport.FAST, **options}
        return Shipper(dataset="ds", transport=transport, **opts)

    @staticmethod
    def _balanced(st: Any) -> bool:
        return st.submitted == (st.delivered + st.dropped + st.failed + st.spooled + st.queued
                                + st.unconfirmed)

    @pytest.mark.parametrize("seed", range(6))
    def test_random_answers_keep_the_invariant(self, seed: int, capfd: Any) -> None:
        """Each request gets a random answer (2xx, a partial status, a cut 2xx, 400, 413, 401,
        404, 307, 422, 500, 503, a limit of ~0 s, no answer): the invariant holds, what is
        counted delivered was stored, and nothing counted delivered was not."""
        import random

        from loghandler import TransportError
        from loghandler._wire.answer import Answer
        from loghandler.testing import MemoryTransport

        rng = random.Random(seed)

        def rule(request: Any) -> Any:
            events = request.events
            k = rng.randrange(14)
            if k < 4:
                return 200, {}, {"ingested": len(events), "failed": 0, "failures": []}
            if k == 4:
                bad = min(len(events), 1)
                return 200, {}, {"ingested": len(events) - bad, "failed": bad,
                                 "failures": [{"error": "bad"}]}
            if k == 5:
                return Answer(200, {}, '{"ingested": 0, "fa', complete=False)
            if k == 6:
                raise TransportError("connection reset (scripted)")
            if k == 7:
                return 429, {"Retry-After": "0"}, None
            statuses = (400, 413, 401, 404, 307, 422, 500, 503)
            return statuses[rng.randrange(len(statuses))], {}, {"message": "scripted"}

        transport = MemoryTransport(rule)
        s = self._shipper(transport, batch_size=16, auth_retry_delay=0.001)
        sent = 0
        for round_ in range(5):
            for _ in range(40):
                s.submit({"i": sent})
                sent += 1
            s.flush(10)
            st = s.stats()
            assert self._balanced(st), (round_, st)
            assert st.submitted == sent and st.queued == 0
        s.close(2)
        st = s.stats()
        assert self._balanced(st) and st.submitted == sent
        stored = {e["i"] for e in transport.events()}
        # Delivered means stored, once: a cut 2xx is never retried (it may have been stored),
        # and every stored event was counted delivered.
        assert st.delivered == len(transport.events()) == len(stored)
        assert st.failed_by_service >= 0 and st.retried > 0

    def test_cut_2xx_counts_nothing_delivered(self, capfd: Any) -> None:
        """A 2xx whose body was cut at the bound: failed_by_service, flush False, one line,
        never retried."""
        from loghandler._wire.answer import Answer
        from loghandler.testing import MemoryTransport

        transport = MemoryTransport(lambda request: Answer(200, {}, '{"ingested": 0, "failed": 1',
                                                           complete=False))
        errors: list[BaseException] = []
        s = self._shipper(transport, on_error=errors.append)
        for i in range(10):
            s.submit({"i": i})
        assert s.flush(5) is False
        st = s.stats()
        assert (st.delivered, st.failed_by_service, st.retried) == (0, 10, 0)
        assert [r.status for r in transport.requests] == [200]
        s.close(1)
        err = capfd.readouterr().err
        assert err == ("loghandler: dataset 'ds': the service's answer (HTTP 200) is longer than "
                       "an ingest status can be: 10 events may or may not be stored, counted "
                       "failed (stats().failed_by_service)\n")
        assert len(errors) == 1 and str(errors[0]) == err[26:err.index(" (stats()")]

    def test_413_to_everything_costs_log_n_requests(self, capfd: Any) -> None:
        """A service answering 413 to every request: a batch of 5,000 costs O(log n) requests,
        not 2n - 1; every event counted dropped_too_large; one line.

        What it measures is the bisection of one batch: the interval is long, so the batch is
        cut when full (or at flush()), not when the interval passes while the loop submits (on
        a loaded host that cut the 5,000 events into two batches, each bisected: 50 requests,
        a count of the host's timing, not of the bisection)."""
        from loghandler._engine.policy import give_up_after
        from loghandler.testing import MemoryTransport

        transport = MemoryTransport(lambda request: (413, {}, {"message": "too big"}))
        s = self._shipper(transport, batch_size=5000, flush_interval=60)
        for i in range(5000):
            s.submit({"i": i})
        assert s.flush(10) is False
        st = s.stats()
        assert st.dropped_too_large == 5000 and self._balanced(st)
        assert len(transport.requests[0].events) == 5000  # one batch, bisected
        assert len(transport.requests) <= give_up_after(5000) <= 30
        s.close(1)
        lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("loghandler:")]
        assert lines == ["loghandler: dataset 'ds': a batch of 5,000 events was refused whole "
                         "(HTTP 413: too big): check for a proxy in front of the service; 5,000 "
                         "not delivered (stats().dropped_too_large)"]

    def test_one_event_too_large_is_still_isolated(self) -> None:
        """413 only for requests holding the big event: it alone is dropped."""
        from loghandler.testing import MemoryTransport

        def rule(request: Any) -> Any:
            if any(e.get("big") for e in request.events):
                return 413, {}, None
            return 200, {}, None

        transport = MemoryTransport(rule)
        s = self._shipper(transport, batch_size=1000)
        for i in range(1000):
            s.submit({"i": i, "big": i == 777})
        assert s.flush(10) is False
        st = s.stats()
        assert (st.delivered, st.dropped_too_large) == (999, 1)
        assert len(transport.requests) <= 2 * 10 + 2
        s.close(1)
