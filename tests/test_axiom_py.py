"""The service's official Python SDK (axiom-py 0.15.0, written elsewhere) against the local one.

What it sends (read from its source): NDJSON compressed with gzip to
``/v1/datasets/{name}/ingest``, ``Content-Encoding: 1`` for an uncompressed body, the
``timestamp-field`` / ``timestamp-format`` / ``csv-delimiter`` query parameters; what it needs
back: the whole ingest status (it fails on a missing ``blocksCreated`` or ``walLength``) and
errors as ``{"message": ...}``. Its ``AxiomHandler`` ships ``record.__dict__`` of each record.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import axiom_py
import pytest
from axiom_py.logging import AxiomHandler

from loghandler.testing import LocalService

TOKEN = "xaat-local-axiom-py-3c1d"


@pytest.fixture
def ax(svc: LocalService) -> axiom_py.Client:
    return axiom_py.Client(token=TOKEN, url=svc.url)


class TestIngestEvents:
    def test_events_arrive_exactly_once(self, svc: LocalService, ax: axiom_py.Client) -> None:
        """ingest_events (NDJSON + gzip): one request, every event once, the status parsed."""
        when = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
        events = [{"i": i, "msg": f"event {i}"} for i in range(250)]
        events[0]["_time"] = when
        status = ax.ingest_events("app", events)
        assert (status.ingested, status.failed, status.failures) == (250, 0, [])
        assert status.blocks_created == 0 and status.wal_length == 250
        assert status.processed_bytes > 0
        stored = svc.events("app")
        assert [e["i"] for e in stored] == list(range(250))
        assert stored[0]["_time"] == "2024-05-01T12:00:00.000000Z"
        (request,) = svc.requests
        assert (request.method, request.path, request.status) == (
            "POST", "/v1/datasets/app/ingest", 200)

    def test_failures_are_parsed(self, svc: LocalService, ax: axiom_py.Client) -> None:
        """A bad _time comes back as an IngestFailure with a datetime timestamp."""
        status = ax.ingest_events("app", [{"_time": "later"}, {"ok": True}])
        assert (status.ingested, status.failed) == (1, 1)
        assert isinstance(status.failures[0].timestamp, dt.datetime)
        assert "later" in status.failures[0].error
        assert [e.get("ok") for e in svc.events("app")] == [True]

    def test_timestamp_options(self, svc: LocalService, ax: axiom_py.Client) -> None:
        """IngestOptions' timestamp-field and timestamp-format reach the service."""
        opts = axiom_py.IngestOptions(timestamp_field="ts",
                                      timestamp_format="2006-01-02 15:04:05")
        status = ax.ingest_events("app", [{"ts": "2024-05-01 08:30:00"}], opts)
        assert status.ingested == 1
        assert svc.events("app")[0]["_time"] == "2024-05-01T08:30:00.000000Z"

    def test_timestamp_format_with_literal_text(self, svc: LocalService,
                                               ax: axiom_py.Client) -> None:
        """A Go layout holding literal text, as axiom-py's own integration test sends it
        (2/Jan/2006:15:04:05 +0000: " +0000" is text the value holds, not a zone directive):
        accepted, not a 400."""
        opts = axiom_py.IngestOptions(timestamp_field="date",
                                      timestamp_format="2/Jan/2006:15:04:05 +0000")
        status = ax.ingest_events("app", [{"date": "1/May/2024:08:30:05 +0000"}], opts)
        assert (status.ingested, status.failed) == (1, 0)
        assert svc.events("app")[0]["_time"] == "2024-05-01T08:30:05.000000Z"

    def test_csv_uncompressed(self, svc: LocalService, ax: axiom_py.Client) -> None:
        """Client.ingest with CSV and ContentEncoding.IDENTITY (sent as "1")."""
        status = ax.ingest("app", b"level;msg\ninfo;hello\n", axiom_py.ContentType.CSV,
                           axiom_py.ContentEncoding.IDENTITY,
                           axiom_py.IngestOptions(CSV_delimiter=";"))
        assert status.ingested == 1
        assert svc.events("app")[0]["msg"] == "hello"

    def test_errors_carry_the_message(self) -> None:
        """A dataset that does not exist: AxiomError 404 with the real service's message."""
        with LocalService(token=TOKEN, datasets=["app"]) as svc:
            ax = axiom_py.Client(token=TOKEN, url=svc.url)
            with pytest.raises(axiom_py.AxiomError) as info:
                ax.ingest_events("nope", [{"a": 1}])
            assert info.value.status == 404
            assert info.value.message.startswith("dataset 'nope' not found: create it first")
            bad = axiom_py.Client(token="xaat-wrong-token", url=svc.url)
            with pytest.raises(axiom_py.AxiomError) as info:
                bad.ingest_events("app", [{"a": 1}])
            assert info.value.status == 403 and "token" in info.value.message
            assert svc.events("app") == []


class TestAxiomHandler:
    def test_handler_against_loghandler_serve(self, tmp_path: Path) -> None:
        """AxiomHandler's records reach `loghandler serve`, each once."""
        db = str(tmp_path / "svc.sqlite")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGHANDLER_", "AXIOM_"))}
        proc = subprocess.Popen(
            [sys.executable, "-m", "loghandler", "serve", "--port", "0", "--db", db,
             "--token", TOKEN, "--quiet", "--dataset", "app"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        try:
            line = proc.stdout.readline()  # the readiness line: no sleep
            url = line.split("listening on ")[1].split()[0]
            handler = AxiomHandler(axiom_py.Client(token=TOKEN, url=url), "app", interval=60)
            log = logging.getLogger("test_axiom_py.handler")
            log.propagate = False
            log.setLevel(logging.INFO)
            log.addHandler(handler)
            try:
                for i in range(30):
                    log.info("order %d paid", i, extra={"order": i})
                handler.flush()
            finally:
                handler.timer.cancel()  # its flush timer is not a daemon thread
                log.removeHandler(handler)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=20)
        assert proc.returncode == 0
        with LocalService(token=TOKEN, db=db) as svc:
            events = svc.events("app")
        assert [e["order"] for e in events] == list(range(30))
        assert events[3]["msg"] == "order %d paid" and events[3]["args"] == [3]
        assert all(e["_time"].endswith("Z") for e in events)
