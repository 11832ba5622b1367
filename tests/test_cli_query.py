"""``loghandler query`` and ``loghandler tail [-f]``, in subprocesses against the local service."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from loghandler.cli import _Follower, format_event_line, parse_span
from loghandler.testing import LocalService

pytestmark = pytest.mark.slow

TOKEN = "TOPSECRET-query-cli-0a1b2c"


def iso(dt: datetime) -> str:
    # As the service answers times: no trailing zeros in the fraction.
    text = dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


NOW = datetime.now(timezone.utc)
EVENTS = [
    {"_time": iso(NOW - timedelta(hours=3)), "level": "info", "message": "old news", "n": 0},
    {"_time": iso(NOW - timedelta(minutes=3)), "level": "warning", "message": "disk 91%",
     "n": 1, "host": "a"},
    {"_time": iso(NOW - timedelta(minutes=2)), "level": "error", "message": "payment\nfailed",
     "n": 2, "order": {"id": 7}},
    {"_time": iso(NOW - timedelta(minutes=1)), "level": "info", "message": "ok", "n": 3},
]


@pytest.fixture
def svc(svc: LocalService) -> LocalService:
    """conftest's, with EVENTS in "app"."""
    svc.client().ingest("app", EVENTS)
    return svc


def env_for(svc: LocalService) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN, PYTHONUNBUFFERED="1")
    return env


def run(svc: LocalService, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "loghandler", *args], capture_output=True,
                          text=True, env=env_for(svc), timeout=60)
    assert TOKEN not in proc.stdout and TOKEN not in proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


class TestQuery:
    def test_table(self, svc: LocalService) -> None:
        """Rows print as an aligned table with a header and a row count."""
        proc = run(svc, "query", "['app'] | where n >= 1 | sort by n asc | project n, level")
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].split() == ["n", "level"]
        assert [line.split() for line in lines[1:4]] == [["1", "warning"], ["2", "error"],
                                                         ["3", "info"]]
        assert lines[-1] == "(3 rows)"

    def test_whole_events_leave_out_sys_time_and_row_id(self, svc: LocalService) -> None:
        """Whole events in the table: _time and their fields, not _sysTime and _rowId."""
        proc = run(svc, "query", "['app'] | where n == 1")
        header = proc.stdout.splitlines()[0].split()
        assert header == ["_time", "level", "message", "n", "host"]
        assert "disk 91%" in proc.stdout

    def test_json_lines(self, svc: LocalService) -> None:
        """--json prints one JSON object per row."""
        proc = run(svc, "query", "['app'] | where n == 2", "--json")
        assert proc.returncode == 0, proc.stderr
        [row] = [json.loads(line) for line in proc.stdout.splitlines()]
        assert row["order.id"] == 7 and row["message"] == "payment\nfailed"  # dotted, as served
        assert {"_time", "_sysTime"} <= set(row) and "_rowId" not in row

    def test_since(self, svc: LocalService) -> None:
        """--since 1h leaves out the event of three hours ago."""
        proc = run(svc, "query", "['app'] | count", "--since", "1h", "--json")
        assert json.loads(proc.stdout) == {"count": 3}

    def test_unsupported_query_is_one_line_exit_1(self, svc: LocalService) -> None:
        """A query outside the subset: exit 1 and the service's explanation."""
        proc = run(svc, "query", "['app'] | mv-expand tags")
        assert proc.returncode == 1
        assert "unsupported operator 'mv-expand'" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1

    def test_bad_since_is_a_usage_error(self, svc: LocalService) -> None:
        proc = run(svc, "query", "['app']", "--since", "yesterday")
        assert proc.returncode == 2 and "time span" in proc.stderr

    def test_no_rows(self, svc: LocalService) -> None:
        proc = run(svc, "query", "['app'] | where n > 100")
        assert proc.returncode == 0 and proc.stdout.strip() == "no rows"


class TestTail:
    def test_newest_oldest_first(self, svc: LocalService) -> None:
        """tail -n 2 shows the two newest events, oldest first: time, level, message, fields."""
        proc = run(svc, "tail", "app", "-n", "2")
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert len(lines) == 2
        assert lines[0].startswith(EVENTS[2]["_time"])
        assert "ERROR" in lines[0] and "payment failed" in lines[0]
        assert "order.id=7" in lines[0] and "n=2" in lines[0]
        assert "_rowId" not in lines[0] and "host" not in lines[0]  # no nulls of other events
        assert lines[1].split()[1:3] == ["INFO", "ok"]

    def test_json(self, svc: LocalService) -> None:
        proc = run(svc, "tail", "app", "--json")
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [r["n"] for r in rows] == [0, 1, 2, 3]
        flat = [{("order.id" if k == "order" else k): (v["id"] if k == "order" else v)
                 for k, v in e.items()} for e in EVENTS]
        assert [{k: v for k, v in r.items() if k not in ("_sysTime", "_rowId")}
                for r in rows] == flat

    def test_search_is_the_pages(self, svc: LocalService) -> None:
        """tail --search takes the web page's search (the same translation to APL)."""
        proc = run(svc, "tail", "app", "--json", "--search", "level:error")
        assert proc.returncode == 0, proc.stderr
        assert [json.loads(line)["n"] for line in proc.stdout.splitlines()] == [
            e["n"] for e in EVENTS if str(e.get("level", "")).lower() == "error"]
        proc = run(svc, "tail", "app", "--search", "n>=oops")
        assert proc.returncode == 2
        assert "--search: 'n>=oops': a comparison needs a number" in proc.stderr

    def test_missing_dataset(self, svc: LocalService) -> None:
        """A dataset with no events is said so (tests/test_first_hour.py has the words)."""
        proc = run(svc, "tail", "nothing-here")
        assert proc.returncode == 1 and proc.stdout == ""
        assert "dataset 'nothing-here' does not exist" in proc.stderr

    def test_follow_sees_new_events_once_and_stops_cleanly_on_ctrl_c(
            self, svc: LocalService) -> None:
        """tail -f prints events ingested while it runs, each once, then exits 0 on SIGINT."""
        # Ctrl+C's signal as a terminal delivers it: a run started in the background by a
        # shell inherits SIGINT ignored, which the child would keep (and never stop).
        proc = subprocess.Popen(
            [sys.executable, "-m", "loghandler", "tail", "app", "-f", "-n", "1", "--json",
             "--interval", "0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(svc),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            def take(n: int) -> list[dict[str, Any]]:
                return [json.loads(lines.get(timeout=15)) for _ in range(n)]

            assert [r["n"] for r in take(1)] == [3]
            client = svc.client()
            last = EVENTS[-1]["_time"]
            # Same _time as the one shown, older and newer: all new rows, none seen before.
            client.ingest("app", [{"_time": last, "n": 4}, {"_time": iso(NOW), "n": 5}])
            got = take(2)
            client.ingest("app", [{"_time": iso(NOW + timedelta(seconds=1)), "n": 6 + i}
                                  for i in range(30)])
            got += take(30)
            assert sorted(r["n"] for r in got) == list(range(4, 36))
            ids = [r["_rowId"] for r in got]
            assert len(set(ids)) == len(ids)
            # Nothing more arrives: no duplicates come later either.
            client.ingest("app", [{"_time": iso(NOW + timedelta(seconds=2)), "n": 99}])
            assert take(1)[0]["n"] == 99
            assert lines.empty()
            client.close()
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
        assert proc.returncode == 0, err
        assert "Traceback" not in err and TOKEN not in err


class TestFollower:
    def test_late_events_within_the_look_back_are_shown_once(self, svc: LocalService) -> None:
        """An event stamped before the newest one shown, arriving later (another process's
        batch), still shows, once; older events present at the start never do."""
        client = svc.client()
        base = NOW + timedelta(minutes=10)
        client.ingest("late", [{"_time": iso(base - timedelta(seconds=s)), "n": s}
                               for s in (3, 2, 1)])
        follower = _Follower(client, "late", lookback=5.0)
        assert [r["n"] for r in follower.newest(1)] == [1]
        assert follower.poll() == []  # n=3 and n=2 were there before: old news
        client.ingest("late", [{"_time": iso(base + timedelta(seconds=1)), "n": -1}])
        assert [r["n"] for r in follower.poll()] == [-1]
        client.ingest("late", [{"_time": iso(base - timedelta(seconds=2.5)), "n": 25},
                               {"_time": iso(base - timedelta(seconds=60)), "n": 600}])
        assert [r["n"] for r in follower.poll()] == [25]  # 60 s late: beyond the look-back
        assert follower.poll() == []
        client.close()

    def test_more_than_a_page_at_one_instant(self, svc: LocalService) -> None:
        """Over a page of events at the very same _time: all shown, once, no endless loop."""
        svc.clear()
        t = iso(NOW)
        client = svc.client()
        follower = _Follower(client, "burst")
        follower.PAGE = 5
        assert follower.newest(3) == []
        client.ingest("burst", [{"_time": t, "n": i} for i in range(12)])
        got = follower.poll()
        assert sorted(r["n"] for r in got) == list(range(12))
        assert follower.poll() == []
        # Pages chain by time: a backlog of many instants, several pages long, comes whole.
        client.ingest("burst", [{"_time": iso(NOW + timedelta(milliseconds=i)), "n": 100 + i}
                                for i in range(23)])
        assert [r["n"] for r in follower.poll()] == [100 + i for i in range(23)]
        client.close()


def test_parse_span() -> None:
    assert parse_span("90s") == 90 and parse_span("1.5h") == 5400 and parse_span("2d") == 172800
    with pytest.raises(Exception, match="time span"):
        parse_span("1w")


def test_format_event_line() -> None:
    """time, level, message on one line; other fields key=value; colour only when asked;
    control characters from the event are shown escaped, never sent to the terminal."""
    event = {"_time": "T", "_rowId": "1", "level": "error", "message": "a\nb", "k": [1]}
    assert format_event_line(event) == "T  ERROR    a b  k=[1]"
    assert "\x1b[31m" in format_event_line(event, colour=True)
    hostile = {"_time": "T", "level": "\x1b[2J", "message": "x\x1b]0;pwned\x07",
               "k": "line\nbreak\x9b"}
    line = format_event_line(hostile)
    assert "\x1b" not in line and "\x07" not in line and "\n" not in line and "\x9b" not in line
    assert "\\x1b]0;pwned\\x07" in line and "k=line\\nbreak\\x9b" in line


def test_serve_prints_the_page_and_keeps_its_reads_out_of_the_log() -> None:
    """serve prints the page's URL (never a token it was given); successful queries, which
    the page makes several times a second, are not logged; failed ones and ingests are."""
    import re

    from loghandler._errors import ApiError
    from loghandler._wire.client import Client

    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--port", "0",
                             "--token", TOKEN, "--dataset", "app"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        head = [proc.stdout.readline() for _ in range(3)]
        url = re.search(r"listening on (http://\S+)", head[0])
        assert url is not None
        assert head[2].strip() == (f"web page: {url.group(1)}/    (it asks for the token: the "
                                   "--token you passed)")
        with Client(TOKEN, url=url.group(1)) as client:
            client.ingest("app", [{"n": 1}])
            assert client.query("['app'] | count") == [{"count": 1}]
            with pytest.raises(ApiError):
                client.query("['app'] | mv-expand tags")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "POST /v1/datasets/app/ingest dataset=app events=1 -> 200" in out
    assert "POST /v1/datasets/_apl -> 400 (unsupported operator 'mv-expand'" in out
    assert "_apl -> 200" not in out
    assert TOKEN not in out + err
