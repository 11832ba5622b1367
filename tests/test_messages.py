"""Every line loghandler prints on stderr, in its exact words (issue 39): one cause, one action,
about 160 characters at most, correct plurals, and the words of the interface in use: Python
arguments and ``stats()`` for the library, flags for the command line, which never sends its
user to ``stats()``.

Lines tested elsewhere, exactly: the wrong token (test_first_hour), 404 (test_shipper), a batch
refused whole and poison events (test_contract), too large as a whole and an unreadable answer
(test_accounting, test_answers), the ingest limit and redirects (test_answers), the queue full
and on_error raising (test_bounds), the flusher stopped by a bug (test_faults), the exit line
(test_lifecycle), the spool full and damaged files (test_spool), the command line's
configuration errors and doctor (test_first_hour), --timestamp-format
(test_cli_timestamp_format).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer, retry_after, sleep, status
from helpers import TOKEN, closed_port_url

from loghandler import IngestHandler
from loghandler._output import captured_lines
from loghandler.testing import LocalService

LONGEST = 160


def lines_of(script: list[Any], n: int = 1, *, flush: float = 5, url: str | None = None,
             **options: Any) -> list[str]:
    """What a handler of dataset 'app' prints while ``n`` warnings meet ``script``."""
    opts: dict[str, Any] = {"flush_interval": 60, "retry_backoff": 0.01,
                            "max_retry_delay": 0.02, "shutdown_timeout": 0.5, **options}
    with FaultServer(script) as srv, captured_lines() as lines:
        handler = IngestHandler("app", url=url or srv.url, token=TOKEN, **opts)
        log = logging.getLogger("test.messages")
        log.handlers[:] = [handler]
        log.propagate = False
        try:
            for i in range(n):
                log.warning("event %d", i)
            handler.flush(flush)
        finally:
            handler.close()
    for line in lines:
        assert len(line) <= LONGEST, line
    return list(lines)


class TestTheLibrarysLines:
    def test_retries_used_up_one_event_one_attempt(self):
        assert lines_of([status(500)] * 3, max_retries=0) == [
            "loghandler: dataset 'app': gave up on 1 event after 1 attempt (HTTP 500): set "
            "spool_dir to keep such batches for later"]

    def test_retries_used_up_events_and_attempts(self):
        assert lines_of([status(503, {"message": "overloaded"})] * 5, n=3, max_retries=2) == [
            "loghandler: dataset 'app': gave up on 3 events after 3 attempts (HTTP 503: "
            "overloaded): set spool_dir to keep such batches for later"]

    def test_retries_used_up_with_a_spool(self, tmp_path: Path):
        assert lines_of([status(500)] * 3, max_retries=0, spool_dir=str(tmp_path)) == [
            "loghandler: dataset 'app': gave up on 1 event after 1 attempt (HTTP 500): it goes "
            "to the spool"]

    def test_rate_limited(self):
        assert lines_of([retry_after(1)]) == [
            "loghandler: dataset 'app': the service's rate limit was reached (HTTP 429): "
            "sending pauses 1 s; new events wait in the queue"]

    def test_another_client_error(self):
        assert lines_of([status(422, {"message": "unprocessable entity"})], n=2) == [
            "loghandler: dataset 'app': the service refused 2 events (HTTP 422: unprocessable "
            "entity), not sent again (stats().failed_client_error): see its message"]

    def test_one_event_too_large(self):
        assert lines_of([status(413)] * 3) == [
            "loghandler: dataset 'app': the service refused 1 event as too large (HTTP 413): "
            "log smaller events (stats().dropped_too_large)"]

    def test_turned_down_in_the_ingest_status(self):
        body = {"ingested": 1, "failed": 1,
                "failures": [{"timestamp": "2024-05-01T00:00:00Z", "error": "invalid _time"}]}
        assert lines_of([status(200, body)], n=2) == [
            "loghandler: dataset 'app': the service turned down 1 event (invalid _time): check "
            "what it holds (stats().failed_by_service)"]

    def test_delivering_again_after_an_outage(self):
        with FaultServer([status(500)]) as srv, captured_lines() as lines:
            handler = IngestHandler("app", url=srv.url, token=TOKEN, flush_interval=60,
                                    max_retries=0)
            log = logging.getLogger("test.messages.again")
            log.handlers[:] = [handler]
            log.propagate = False
            try:
                log.warning("lost")
                assert handler.flush(5) is False
                log.warning("delivered")
                assert handler.flush(5) is True
            finally:
                handler.close()
        assert lines == [
            "loghandler: dataset 'app': gave up on 1 event after 1 attempt (HTTP 500): set "
            "spool_dir to keep such batches for later",
            "loghandler: dataset 'app': delivering again"]

    def test_down_with_a_spool(self, tmp_path: Path):
        url = closed_port_url()
        assert lines_of([], n=3, url=url, max_retries=0, spool_dir=str(tmp_path), flush=2) == [
            f"loghandler: dataset 'app': gave up on 3 events after 1 attempt (cannot connect to "
            f"{url} (connection refused)): they go to the spool"]

    def test_a_full_queue_with_a_spool(self, tmp_path: Path):
        """With a spool a full queue drops nothing (the caller writes to disk when the flusher is
        behind): no line about the queue."""
        got = lines_of([], n=60, url=closed_port_url(), max_retries=3, spool_dir=str(tmp_path),
                       flush=2, max_queue_size=20, batch_size=5)
        assert not [x for x in got if "the queue is full" in x], got
        # The outage is told if the flusher tried the service before the callers' writes to
        # disk took every event: either way, it says where the events went.
        assert all(x.endswith(": they go to the spool") for x in got), got

    def test_closed_with_events_undelivered(self):
        """close() on a service that does not answer: the loss is told when it happens."""
        got = lines_of([sleep(3, then=200)], flush=0, max_retries=3, shutdown_timeout=0.3)
        assert got == [
            "loghandler: dataset 'app': closed with 1 event not answered within "
            "shutdown_timeout (0.3 s): maybe stored (stats().unconfirmed): raise "
            "shutdown_timeout"]

    def test_the_plural_helper(self):
        from loghandler._engine.reporter import plural

        assert [plural(n, "event") for n in (0, 1, 2, 10_000)] == [
            "0 events", "1 event", "2 events", "10,000 events"]
        assert plural(1, "batch", "batches") == "1 batch"
        assert plural(3, "batch", "batches") == "3 batches"


CLI_TOKEN = "messages-cli-token-6b2e"


def cli(svc_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env.update(LOGHANDLER_URL=svc_url, LOGHANDLER_TOKEN=CLI_TOKEN)
    proc = subprocess.run([sys.executable, "-m", "loghandler", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=60)
    for line in proc.stderr.splitlines():
        assert len(line) <= LONGEST, line
    assert CLI_TOKEN not in proc.stdout + proc.stderr
    return proc


@pytest.mark.slow
class TestTheCommandLinesLines:
    def test_ingest_tells_a_rejected_event_in_its_own_words(self):
        """The engine's line, without stats(), which a command line user cannot call."""
        with FaultServer([status(400, {"message": "invalid event"})] * 4) as srv:
            proc = cli(srv.url, "ingest", "-d", "app", "--no-progress",
                       stdin='{"message": "one"}\n')
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            "loghandler: reading <stdin> (NDJSON)",
            "loghandler: dataset 'app': the service rejected 1 of 1 event (HTTP 400: invalid "
            "event): check what it holds"]
        assert proc.stdout == "1 event read, 0 delivered to 'app', 1 rejected by the service\n"

    def test_ingest_gives_up_in_its_own_words(self):
        with FaultServer([status(500)] * 10) as srv:
            proc = cli(srv.url, "ingest", "-d", "app", "--no-progress", "--max-retries", "1",
                       stdin='{"message": "one"}\n')
        assert proc.returncode == 1
        assert proc.stderr.splitlines()[1:] == [
            "loghandler: ingest into dataset 'app' failed with HTTP 500: run again later, or "
            "with a higher --max-retries"]

    def test_ingest_with_nothing_listening(self):
        url = closed_port_url()
        proc = cli(url, "ingest", "-d", "app", "--no-progress", stdin='{"message": "one"}\n')
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            f"loghandler: nothing is listening at {url} (connection refused, 3 tries in "
            + proc.stderr.split(" tries in ")[1].split(" s)")[0]
            + " s): start the service, or check --url or LOGHANDLER_URL"]

    def test_a_refused_token(self):
        with LocalService(token="the-right-token") as svc:
            proc = cli(svc.url, "datasets", "list")
        assert proc.returncode == 1
        assert proc.stderr == ("loghandler: the service refused the token (HTTP 403): check "
                               "--token or LOGHANDLER_TOKEN (a personal access token also needs "
                               "--org-id)\n")
