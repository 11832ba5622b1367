"""``loghandler ingest --timestamp-format``: a strftime format or a Go layout, and a line saying
which it was read as; the service then reads each event's time with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loghandler.cli._layout import LayoutError, to_go_layout
from loghandler.testing import LocalService

TOKEN = "timestamp-format-token-3a9c"


@pytest.mark.parametrize(("given", "layout"), [
    ("%Y-%m-%d %H:%M:%S", "2006-01-02 15:04:05"),
    ("%d/%b/%Y:%H:%M:%S %z", "02/Jan/2006:15:04:05 -0700"),
    ("%Y-%m-%dT%H:%M:%S.%f%:z", "2006-01-02T15:04:05.000000-07:00"),
    ("%a, %d %b %Y %H:%M:%S %Z", "Mon, 02 Jan 2006 15:04:05 MST"),
    ("%m/%d/%y %I:%M %p", "01/02/06 03:04 PM"),
    ("%A %e %B %Y", "Monday _2 January 2006"),
    ("%F %T,%f", "2006-01-02 15:04:05,000000"),
    ("%-d.%-m.%Y", "2.1.2006"),
    ("%Y%m%d%H%M%S", "20060102150405"),
    ("at %H:%M%%", "at 15:04%"),
])
def test_strftime_is_translated(given: str, layout: str) -> None:
    assert to_go_layout(given) == (layout, True)


@pytest.mark.parametrize("given", ["2006-01-02 15:04:05", "02/Jan/2006:15:04:05 -0700",
                                   "2/Jan/2006:15:04:05 +0000"])
def test_a_go_layout_is_passed_on(given: str) -> None:
    assert to_go_layout(given) == (given, False)


@pytest.mark.parametrize(("given", "message"), [
    ("%Y-%m-%d %H:%M:%S%f", "--timestamp-format '%Y-%m-%d %H:%M:%S%f': %f must follow the "
                            "seconds and a dot or comma ('%S.%f'), as the service reads "
                            "fractions"),
    ("%Y week %U", "--timestamp-format '%Y week %U': %U has no equivalent in the service's "
                   "layout; use %Y %m %d %H %M %S %f %z (or a Go layout)"),
    ("%Y-%m-%d 00:00", "--timestamp-format '%Y-%m-%d 00:00': the text '0' would be read as part "
                       "of a time by the service's layout; leave it out"),
    ("Mon %d", "--timestamp-format 'Mon %d': the text 'Mon' would be read as part of a time by "
               "the service's layout; leave it out"),
    ("YYYY-MM-DD HH:mm:ss", "--timestamp-format 'YYYY-MM-DD HH:mm:ss' is neither a strftime "
                            "format ('%Y-%m-%d %H:%M:%S') nor a Go layout ('2006-01-02 "
                            "15:04:05'): write it as one of those"),
])
def test_what_cannot_be_said_is_refused_with_the_reason(given: str, message: str) -> None:
    with pytest.raises(LayoutError) as info:
        to_go_layout(given)
    assert str(info.value) == message


def ingest(svc: LocalService, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "events.ndjson"
    data.write_text('{"ts": "2024-05-01 12:30:45", "message": "one"}\n'
                    '{"ts": "2024-05-01 12:31:00", "message": "two"}\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)
    return subprocess.run([sys.executable, "-m", "loghandler", "ingest", "-d", "logs",
                           str(data), "--timestamp-field", "ts", *args],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.slow
@pytest.mark.parametrize(("given", "said"), [
    ("%Y-%m-%d %H:%M:%S", "loghandler: --timestamp-format '%Y-%m-%d %H:%M:%S' read as strftime: "
                          "the service gets the Go layout '2006-01-02 15:04:05'\n"),
    ("2006-01-02 15:04:05", "loghandler: --timestamp-format '2006-01-02 15:04:05' read as a Go "
                            "layout (strftime works too: '%Y-%m-%d %H:%M:%S')\n"),
])
def test_ingest_reads_the_times_either_way(given: str, said: str, tmp_path: Path) -> None:
    with LocalService(token=TOKEN) as svc:
        proc = ingest(svc, tmp_path, "--timestamp-format", given)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.splitlines(keepends=True) == [
            said, f"loghandler: reading {tmp_path / 'events.ndjson'} (NDJSON)\n"]
        assert [e["_time"] for e in svc.events("logs")] == ["2024-05-01T12:30:45.000000Z",
                                                           "2024-05-01T12:31:00.000000Z"]


@pytest.mark.slow
def test_ingest_refuses_a_format_it_cannot_translate(tmp_path: Path) -> None:
    with LocalService(token=TOKEN) as svc:
        proc = ingest(svc, tmp_path, "--timestamp-format", "%Y-%m-%d %H:%M:%S%f")
        assert proc.returncode == 2
        assert proc.stderr == ("loghandler: --timestamp-format '%Y-%m-%d %H:%M:%S%f': %f must "
                               "follow the seconds and a dot or comma ('%S.%f'), as the service "
                               "reads fractions\n")
        assert svc.events("logs") == []
