"""The first hour, round two (issue 28): each friction a new user met, with the exact words
they now get. Real command line in a subprocess, against the local service."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import loghandler
from loghandler.testing import LocalService

TOKEN = "first-hour-token-4e5f"


@pytest.fixture
def svc(svc: LocalService) -> LocalService:
    """conftest's, with one event in "app" and one in "cli"."""
    loghandler.Client(token=TOKEN, url=svc.url).ingest(
        "app", [{"message": "hello", "level": "info"}])
    loghandler.Client(token=TOKEN, url=svc.url).ingest(
        "cli", [{"event": "order.placed", "level": "error", "exception": {
            "type": "ValueError", "message": "bad",
            "stacktrace": "Traceback (most recent call last):\n  File \"a.py\", line 3, "
                          "in f\nValueError: bad"}}])
    return svc


def run(svc: LocalService | None, *args: str, env: dict[str, str] | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    if svc is not None:
        full.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "loghandler", *args], capture_output=True,
                          text=True, env=full, timeout=timeout)
    assert TOKEN not in proc.stdout + proc.stderr and "Traceback (most recent" not in (
        proc.stderr)
    return proc


class TestWordsOfTheCommandLine:
    def test_no_token(self, svc):
        proc = run(None, "tail", "app", env={"LOGHANDLER_URL": svc.url})
        assert proc.returncode == 2
        assert proc.stderr == (
            "loghandler: no token: pass --token or set LOGHANDLER_TOKEN (an API token, or a "
            "personal access token together with --org-id / LOGHANDLER_ORG_ID)\n")

    def test_no_address(self):
        proc = run(None, "tail", "app", env={"LOGHANDLER_TOKEN": TOKEN})
        assert proc.returncode == 2
        assert proc.stderr == (
            "loghandler: no address of the service: pass --url or set LOGHANDLER_URL (e.g. "
            "https://api.example.com; `loghandler serve` prints one)\n")

    def test_plain_http(self):
        proc = run(None, "tail", "app", "--url", "http://example.com",
                   env={"LOGHANDLER_TOKEN": TOKEN})
        assert proc.returncode == 2
        assert proc.stderr == (
            "loghandler: refusing plain http:// to example.com (--url, which overrides "
            "LOGHANDLER_URL), where the token would travel in clear text: use https://, or pass "
            "--allow-http\n")

    def test_python_keeps_its_own_words(self, monkeypatch):
        monkeypatch.delenv("LOGHANDLER_TOKEN", raising=False)
        with pytest.raises(loghandler.ConfigurationError, match=r"pass token=\.\.\. or set"):
            loghandler.Client(url="http://127.0.0.1:1")

    def test_mistyped_command(self):
        proc = run(None, "taill", "app")
        assert proc.returncode == 2
        assert proc.stderr == "loghandler: unknown command 'taill' (did you mean tail?)\n"


class TestMistypedDataset:
    def test_tail(self, svc):
        proc = run(svc, "tail", "clii")
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr == ("loghandler: dataset 'clii' does not exist: check the name (the "
                               "datasets here: app, cli), or create it with loghandler datasets "
                               "create clii\n")

    def test_query(self, svc):
        proc = run(svc, "query", "['nosuch'] | take 3")
        assert proc.returncode == 1
        assert proc.stderr == ("loghandler: dataset 'nosuch' does not exist: check the name in "
                               "the query (the datasets here: app, cli), or create it with "
                               "loghandler datasets create nosuch\n")

    def test_an_empty_result_of_a_real_dataset_is_no_error(self, svc):
        proc = run(svc, "query", "['app'] | where level == 'fatal'")
        assert proc.returncode == 0 and proc.stdout == "no rows\n"


class TestAplErrors:
    @pytest.mark.parametrize(("apl", "said"), [
        ("['app'] | where level = 'error'",
         "'=' does not compare in APL: use '==', as in where level == 'error', at line 1, "
         "column 23"),
        ("take 5",
         "the query starts with the operator 'take': name the dataset first, as in ['logs'] | "
         "take ..., at line 1, column 1"),
        ("['app'] | summarize count() by bin(_time, 1x)",
         "unknown timespan unit 'x' in 1x: use w, d, h, m, s, ms or us, as in 5m, at line 1, "
         "column 43"),
    ])
    def test_points_the_right_way(self, svc, apl, said):
        proc = run(svc, "query", apl)
        assert proc.returncode == 1
        assert said in proc.stderr


class TestBareWord:
    def test_a_bare_word_compared_is_pointed_out(self, svc):
        """`level == error` reads a field named error: no rows, and a note says so."""
        proc = run(svc, "query", "['app'] | where level == error")
        assert proc.returncode == 0 and proc.stdout == "no rows\n"
        assert proc.stderr == (
            "loghandler: note: in `level == error`, error is read as a field name, not as "
            "text; to compare with the text, quote it: level == 'error'\n")

    def test_no_note_for_quoted_text(self, svc):
        proc = run(svc, "query", "['app'] | where level == 'fatal'")
        assert proc.stderr == ""


class TestTail:
    def test_structlog_event_and_traceback(self, svc):
        proc = run(svc, "tail", "cli")
        assert proc.returncode == 0
        lines = proc.stdout.splitlines()
        assert lines[0].endswith("ERROR    order.placed")
        assert lines[1:] == ["    Traceback (most recent call last):",
                             "      File \"a.py\", line 3, in f", "    ValueError: bad"]


class TestServe:
    def test_port_in_use_suggests_port_0(self):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = str(busy.getsockname()[1])
            proc = run(None, "serve", "--port", port, env={"LOGHANDLER_TOKEN": TOKEN})
        assert proc.returncode == 2
        assert proc.stderr == (
            f"loghandler: cannot listen on 127.0.0.1:{port}: Address already in use: another "
            "program uses that port; pick another with --port, or --port 0 for any free one\n")

    def test_token_from_the_environment_prints_lines_that_paste(self):
        """With LOGHANDLER_TOKEN set, every printed line works as it is pasted into a shell,
        and the token itself is never printed."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_TOKEN=TOKEN, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        try:
            assert proc.stdout is not None
            head = [proc.stdout.readline().rstrip("\n") for _ in range(3)]
        finally:
            proc.terminate()
            proc.wait(10)
        url = head[0].split("listening on ")[1].split()[0]
        assert head[1] == f"  export LOGHANDLER_URL={url}    # LOGHANDLER_TOKEN is set already"
        # One address that works pasted into a browser: the page asks for the token.
        assert head[2] == (f"web page: {url}/    (it asks for the token: the value of "
                           "LOGHANDLER_TOKEN)")
        assert TOKEN not in "\n".join(head)

    def test_help_names_the_query_api_and_the_page(self):
        out = run(None, "serve", "--help").stdout
        assert "POST /v1/datasets/_apl" in out and "web page" in out


def test_library_lines_say_the_cause_once(svc):
    """A refused token: one line saying so once, with what to do; the exit line names the
    cause and does not send the reader to stats(), which nobody can call at exit."""
    code = (f"import logging, loghandler\n"
            f"h = loghandler.IngestHandler('app', url={svc.url!r}, token='wrong-token-77',"
            f" shutdown_timeout=1)\n"
            f"logging.getLogger('x').addHandler(h)\n"
            f"logging.getLogger('x').warning('hello')\n"
            f"h.flush(2)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    lines = proc.stderr.splitlines()
    assert lines == [
        "loghandler: dataset 'app': the service refused the token (HTTP 403: authentication "
        "failed: send Authorization: Bearer <token>…): check token=... or LOGHANDLER_TOKEN; "
        "sending resumes in 60 s",
        "loghandler: at exit: dataset 'app': 0 of 1 delivered, 1 failed (1 token refused)",
    ]
    assert "wrong-token-77" not in proc.stderr


class TestDoctor:
    def test_all_well(self, svc):
        proc = run(svc, "doctor", "-d", "app")
        assert proc.returncode == 0, proc.stdout
        lines = proc.stdout.splitlines()
        assert lines[0].startswith(f"ok: the service answers at {svc.url} (from LOGHANDLER_URL)")
        hot = "compiled"  # run() leaves the LOGHANDLER_ variables out, so in both runs
        # (isal: the test extra installs the [fast] extra's gzip)
        assert lines[1:] == ["ok: the token (from LOGHANDLER_TOKEN) is accepted",
                             "ok: dataset 'app' exists",
                             "ok: the clock agrees with the service's (within 1 s)",
                             f"(the logging call's hot path: {hot}; gzip: ISA-L (isal))"]

    def test_each_problem_says_what_to_do(self, svc):
        proc = run(svc, "doctor", "-d", "nope", "--token", "bad-token-x")
        assert proc.returncode == 1
        assert ("problem: the service refused the token from --token (HTTP 403): check it (a "
                "personal access token also needs --org-id)") in proc.stdout.splitlines()
        proc = run(svc, "doctor", "-d", "nope")
        assert ("problem: dataset 'nope' does not exist (there are app, cli): create it "
                "(loghandler datasets create nope) or check the name") in proc.stdout.splitlines()

    def test_nothing_listens(self):
        proc = run(None, "doctor", "--url", "http://127.0.0.1:9", env={"LOGHANDLER_TOKEN": TOKEN})
        assert proc.returncode == 1
        assert proc.stdout.splitlines() == [
            "problem: cannot connect to http://127.0.0.1:9 (connection refused): check --url, "
            "and that the service is up",
            "(the token, the dataset and the clock need an answer: not checked)"]

    def test_skew(self):
        from email.utils import formatdate

        from loghandler.cli.doctor import _skew

        assert _skew(formatdate(1_000_000, usegmt=True), 1_000_000.4) == 0.0
        assert _skew(formatdate(1_000_000, usegmt=True), 1_000_090.0) == 90.0
        assert _skew("not a date", 0) is None


class TestIngestCsv:
    def test_csv_by_name_with_a_timestamp_field(self, svc, tmp_path):
        path = tmp_path / "orders.csv"
        path.write_text('ts,level,message\n2024-05-01T12:00:00Z,info,"paid, twice"\n'
                        '2024-05-01T12:00:01Z,error,"multi\nline"\n3,4,5,6\n')
        proc = run(svc, "ingest", "-d", "orders", str(path), "--timestamp-field", "ts")
        assert proc.stdout == ("2 events read, 2 delivered to 'orders', 1 bad input line "
                               "skipped\n")
        assert f"loghandler: reading {path} (CSV, by its name)" in proc.stderr
        assert f"{path}:5: 4 cells for 3 columns; row skipped" in proc.stderr  # 3-4: one row
        events = svc.events("orders")
        assert [(e["message"], e["level"], e["_time"]) for e in events] == [
            ("paid, twice", "info", "2024-05-01T12:00:00.000000Z"),
            ("multi\nline", "error", "2024-05-01T12:00:01.000000Z")]

    def test_timestamp_format_is_a_go_layout(self, svc, tmp_path):
        """--timestamp-format goes to the service, which reads the field in that layout."""
        path = tmp_path / "access.csv"
        path.write_text("when,path\n01/May/2024:12:00:00 +0200,/a\n")
        proc = run(svc, "ingest", "-d", "access", str(path), "--timestamp-field", "when",
                   "--timestamp-format", "02/Jan/2006:15:04:05 -0700")
        assert proc.returncode == 0, proc.stderr
        (e,) = svc.events("access")
        assert e["_time"] == "2024-05-01T10:00:00.000000Z" and e["path"] == "/a"
        assert svc.requests[-1].path.startswith("/v1/datasets/access/ingest")

    def test_format_csv_on_stdin(self, svc):
        full = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        full.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)
        proc = subprocess.run([sys.executable, "-m", "loghandler", "ingest", "-d", "s",
                               "--format", "csv"], input="a,b\n1,2\n", capture_output=True,
                              text=True, env=full, timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert [{k: v for k, v in e.items() if k != "_time"} for e in svc.events("s")] == [
            {"a": "1", "b": "2"}]
