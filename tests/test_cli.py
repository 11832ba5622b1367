"""The command line, end to end in subprocesses against the local service."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import closed_port_url

import loghandler
from loghandler.testing import LocalService

pytestmark = pytest.mark.slow

TOKEN = "TOPSECRET-cli-9f8e7d6c"
VIEW = {"id": "v1", "name": "Errors", "aplQuery": "['app'] | where level == 'error'",
        "datasets": ["app"], "description": "", "sharedByOrg": "o", "sharedByOrgName": "Org"}


@pytest.fixture
def svc_options() -> dict[str, Any]:
    return {"token": TOKEN, "views": [VIEW]}


def run(svc: LocalService | None, *args: str, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m loghandler ARGS` with the service's url/token in the environment."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    if svc is not None:
        full_env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "loghandler", *args], input=stdin,
                          capture_output=True, text=True, env=full_env, timeout=60)
    # Whatever happened, the token never shows.
    assert TOKEN not in proc.stdout and TOKEN not in proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def sent(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as they were sent: without the ``_time`` the service gave them."""
    return [{k: v for k, v in e.items() if k != "_time"} for e in events]


def errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The error lines on stderr (the lines saying which input is read and how left out)."""
    return [line.removeprefix("loghandler: ") for line in proc.stderr.splitlines()
            if not line.startswith("loghandler: reading ")]


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


class TestIngest:
    def test_ndjson(self, svc: LocalService, tmp_path: Path) -> None:
        """NDJSON lines become events, in order, with a summary and exit 0."""
        f = write(tmp_path / "a.ndjson", '{"n": 1}\n\n{"n": 2, "s": "x"}\n')
        proc = run(svc, "ingest", "app", f)
        assert proc.returncode == 0, proc.stderr
        assert "2 events read" in proc.stdout and "2 delivered" in proc.stdout
        assert sent(svc.events("app")) == [{"n": 1}, {"n": 2, "s": "x"}]

    def test_json_array(self, svc: LocalService, tmp_path: Path) -> None:
        """A JSON array file (over several lines, big numbers) is read element by element."""
        f = write(tmp_path / "a.json", ' [ {"n": 1},\n{"n": 12345678901234567890},\n {"n": 3}]\n')
        proc = run(svc, "ingest", "app", f)
        assert proc.returncode == 0, proc.stderr
        assert [e["n"] for e in svc.events("app")] == [1, 12345678901234567890, 3]

    def test_large_json_array_streams(self, svc: LocalService, tmp_path: Path) -> None:
        """An array bigger than the read chunk is parsed across chunk boundaries intact."""
        events = [{"i": i, "pad": "z" * 200} for i in range(3000)]
        f = write(tmp_path / "big.json", json.dumps(events, indent=1))
        proc = run(svc, "ingest", "big", f)
        assert proc.returncode == 0, proc.stderr
        assert sent(svc.events("big")) == events

    def test_plain_text(self, svc: LocalService, tmp_path: Path) -> None:
        """Plain text lines each become {"message": line}."""
        f = write(tmp_path / "app.log", "server started\nGET / 200\n")
        proc = run(svc, "ingest", "app", f)
        assert proc.returncode == 0, proc.stderr
        assert sent(svc.events("app")) == [{"message": "server started"}, {"message": "GET / 200"}]

    def test_bad_line_is_reported_and_the_rest_ships(self, svc: LocalService,
                                                     tmp_path: Path) -> None:
        """A bad JSON line is reported as file:line, the others are delivered, exit 1."""
        f = write(tmp_path / "mixed.ndjson", '{"n": 1}\n{"n": oops}\n{"n": 3}\n[4]\n')
        proc = run(svc, "ingest", "app", f)
        assert proc.returncode == 1
        assert f"{f}:2: not JSON" in proc.stderr
        assert f"{f}:4: not a JSON object" in proc.stderr
        assert "2 bad input lines" in proc.stdout
        assert sent(svc.events("app")) == [{"n": 1}, {"n": 3}]

    def test_broken_array_keeps_what_was_read(self, svc: LocalService, tmp_path: Path) -> None:
        """A JSON array that breaks off: elements before the break ship, the error has a line."""
        f = write(tmp_path / "broken.json", '[{"n": 1},\n{"n": 2},\n{"n": ')
        proc = run(svc, "ingest", "app", f)
        assert proc.returncode == 1
        assert f"{f}:3:" in proc.stderr
        assert sent(svc.events("app")) == [{"n": 1}, {"n": 2}]

    def test_stdin(self, svc: LocalService) -> None:
        """With no file (or '-') events come from stdin."""
        assert run(svc, "ingest", "app", stdin='{"from": "stdin"}\n').returncode == 0
        assert run(svc, "ingest", "app", "-", stdin="a text line\n").returncode == 0
        assert sent(svc.events("app")) == [{"from": "stdin"}, {"message": "a text line"}]

    def test_several_files_and_options_after_files(self, svc: LocalService,
                                                   tmp_path: Path) -> None:
        """Files may come before and after options; they ship in the order given."""
        a = write(tmp_path / "a.log", "one\n")
        b = write(tmp_path / "b.log", "two\n")
        proc = run(svc, "ingest", "app", a, "--batch-size", "1", b)
        assert proc.returncode == 0, proc.stderr
        assert sent(svc.events("app")) == [{"message": "one"}, {"message": "two"}]

    def test_wrong_token_exits_1(self, svc: LocalService, tmp_path: Path) -> None:
        """A rejected token is a service error: exit 1, a clear message, nothing stored."""
        f = write(tmp_path / "a.log", "x\n")
        proc = run(svc, "ingest", "app", f, env={"LOGHANDLER_TOKEN": "not-the-token"})
        assert proc.returncode == 1
        assert errors(proc) == [
            f"the service at {svc.url} refused the token (HTTP 403): check --token or "
            "LOGHANDLER_TOKEN (a personal access token also needs --org-id)"]
        assert "0 delivered" in proc.stdout
        assert svc.events("app") == []

    def test_unreachable_service_exits_1(self, tmp_path: Path) -> None:
        """Nothing listening: exit 1 after the stated budget (2 retries), one line saying so."""
        url = closed_port_url()
        f = write(tmp_path / "a.log", "x\n")
        proc = run(None, "ingest", "app", f,
                   env={"LOGHANDLER_URL": url, "LOGHANDLER_TOKEN": TOKEN})
        assert proc.returncode == 1
        [line] = errors(proc)
        assert line.startswith(f"nothing is listening at {url} (connection refused, 3 tries in ")
        assert line.endswith("s): start the service, or check --url or LOGHANDLER_URL")
        assert proc.stdout == ""

    def test_missing_file_is_usage_error(self, svc: LocalService) -> None:
        """A file that does not exist: exit 2 before anything is sent."""
        proc = run(svc, "ingest", "app", "/nonexistent/file.log")
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and "no such file" in proc.stderr


class TestConfigurationAndUsage:
    def test_no_url_is_exit_2_one_line(self) -> None:
        """Missing configuration: exit 2, one line naming the variable."""
        proc = run(None, "views", "list", env={"LOGHANDLER_TOKEN": TOKEN})
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and "LOGHANDLER_URL" in proc.stderr

    def test_bad_command_is_exit_2(self) -> None:
        """An unknown command: exit 2, one line; an unknown option: one line and the usage."""
        proc = run(None, "frobnicate")
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1
        proc = run(None, "views", "list", "--bogus")
        assert proc.returncode == 2
        assert proc.stderr.splitlines()[0] == (
            "loghandler: unknown option --bogus (see: loghandler views list --help)")
        assert proc.stderr.splitlines()[1].startswith("usage: loghandler views list ")

    def test_mistyped_flag_suggests_and_shows_the_command_usage(self) -> None:
        """--batchsize: "did you mean --batch-size?" and ingest's usage, not the top-level help."""
        proc = run(None, "ingest", "app", "--batchsize", "10")
        assert proc.returncode == 2
        first, usage = proc.stderr.splitlines()
        assert first == "loghandler: unknown option --batchsize (did you mean --batch-size?)"
        assert usage.startswith("usage: loghandler ingest ")
        assert "serve" not in proc.stderr

    def test_flags_override_environment(self, svc: LocalService) -> None:
        """--url and --token win over the environment (and the token still never shows)."""
        proc = run(None, "views", "list", "--url", svc.url, "--token", TOKEN,
                   env={"LOGHANDLER_URL": "http://127.0.0.1:9", "LOGHANDLER_TOKEN": "other"})
        assert proc.returncode == 0, proc.stderr
        assert "Errors" in proc.stdout

    def test_plain_http_elsewhere_is_refused(self) -> None:
        """http:// to a non-loopback host is a configuration error unless --allow-http."""
        proc = run(None, "views", "list", "--url", "http://example.invalid",
                   env={"LOGHANDLER_TOKEN": TOKEN})
        assert proc.returncode == 2 and "http" in proc.stderr

    def test_import_does_not_load_the_cli(self) -> None:
        """`import loghandler` loads neither the CLI nor tqdm."""
        code = ("import loghandler, sys; "
                "assert 'loghandler.cli' not in sys.modules; assert 'tqdm' not in sys.modules")
        assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0


class TestViews:
    def test_list_table(self, svc: LocalService) -> None:
        """views list prints a table with id, name, datasets and query."""
        proc = run(svc, "views", "list")
        assert proc.returncode == 0, proc.stderr
        header, row = proc.stdout.splitlines()
        assert header.split() == ["ID", "NAME", "DATASETS", "QUERY"]
        assert row.split()[:3] == ["v1", "Errors", "app"]
        assert "where level == 'error'" in row

    def test_list_json(self, svc: LocalService) -> None:
        """views list --json prints the service's JSON."""
        proc = run(svc, "views", "list", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == [VIEW]

    def test_update_merges_flags(self, svc: LocalService) -> None:
        """views update changes the given fields and keeps the others."""
        proc = run(svc, "views", "update", "v1", "--description", "new text",
                   "--datasets", "a, b")
        assert proc.returncode == 0, proc.stderr
        assert "new text" in proc.stdout
        view = svc.views[0]
        assert (view.description, view.datasets, view.name) == ("new text", ["a", "b"], "Errors")

    def test_update_from_json(self, svc: LocalService, tmp_path: Path) -> None:
        """--from-json takes service JSON; flags win over it; --json prints the result."""
        f = write(tmp_path / "v.json", json.dumps({"name": "From file", "aplQuery": "q"}))
        proc = run(svc, "views", "update", "v1", "--from-json", f, "--apl-query", "flag",
                   "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["name"] == "From file"
        assert (svc.views[0].name, svc.views[0].apl_query) == ("From file", "flag")

    def test_update_errors(self, svc: LocalService, tmp_path: Path) -> None:
        """Unknown id: exit 1; nothing to change or a bad --from-json: exit 2."""
        missing = run(svc, "views", "update", "nope", "--name", "x")
        assert missing.returncode == 1 and "nope" in missing.stderr
        assert run(svc, "views", "update", "v1").returncode == 2
        bad = write(tmp_path / "bad.json", json.dumps({"nmae": "typo"}))
        proc = run(svc, "views", "update", "v1", "--from-json", bad)
        assert proc.returncode == 2 and "nmae" in proc.stderr
        assert svc.views[0].to_dict() == VIEW

    def test_get(self, svc: LocalService) -> None:
        """views get ID prints one view; --json its JSON; an unknown id is exit 1."""
        proc = run(svc, "views", "get", "v1")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[0] == "view v1:" and "Errors" in proc.stdout
        assert json.loads(run(svc, "views", "get", "v1", "--json").stdout) == VIEW
        missing = run(svc, "views", "get", "nope")
        assert missing.returncode == 1 and "nope" in missing.stderr

    def test_create_and_delete(self, svc: LocalService) -> None:
        """views create makes a view with the service's id; views delete removes it."""
        proc = run(svc, "views", "create", "--name", "Slow", "--apl-query", "['web']",
                   "--datasets", "web, api", "--description", "d", "--json")
        assert proc.returncode == 0, proc.stderr
        created = json.loads(proc.stdout)
        assert created["id"] and created["id"] != "v1"
        assert (created["name"], created["datasets"]) == ("Slow", ["web", "api"])
        assert [v.name for v in svc.views] == ["Errors", "Slow"]
        gone = run(svc, "views", "delete", created["id"])
        assert gone.returncode == 0 and f"deleted view {created['id']}" in gone.stdout
        assert [v.id for v in svc.views] == ["v1"]
        again = run(svc, "views", "delete", created["id"])
        assert again.returncode == 1 and created["id"] in again.stderr

    def test_create_needs_name_and_query(self, svc: LocalService) -> None:
        """views create without --apl-query (or with an empty one) is a usage error."""
        assert run(svc, "views", "create", "--name", "x").returncode == 2
        assert run(svc, "views", "create", "--name", "x", "--apl-query", " ").returncode == 2
        assert len(svc.views) == 1


class TestServe:
    def start(self, *args: str, env: dict[str, str] | None = None) -> tuple[Any, str, list[str]]:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        full_env.update(env or {})
        proc = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--port", "0",
                                 *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=full_env)
        assert proc.stdout is not None
        lines = [proc.stdout.readline()]  # blocks until the readiness line, no sleep
        assert "listening on http://127.0.0.1:" in lines[0], lines
        url = lines[0].split("listening on ")[1].split()[0]
        lines.append(proc.stdout.readline())
        return proc, url, lines

    def stop(self, proc: Any) -> tuple[str, str]:
        proc.send_signal(signal.SIGTERM)
        # read() rather than communicate(): it also returns what readline() already buffered.
        out, err = proc.stdout.read(), proc.stderr.read()
        assert proc.wait(timeout=20) == 0, err
        return out, err

    def test_serve_logs_requests_and_stops_on_sigterm(self, tmp_path: Path) -> None:
        """serve answers, prints one line per request, and exits 0 on SIGTERM."""
        views = write(tmp_path / "views.json", json.dumps([VIEW]))
        # LOGHANDLER_DATASET names the dataset serve creates at start.
        proc, url, lines = self.start("--views", views, env={"LOGHANDLER_TOKEN": TOKEN,
                                                              "LOGHANDLER_DATASET": "web"})
        assert "datasets: web; create others with `loghandler datasets create NAME`" in (
            lines[0])
        try:
            ingest = run(None, "ingest", "web", env={"LOGHANDLER_URL": url,
                                                     "LOGHANDLER_TOKEN": TOKEN},
                         stdin="hello\n")
            assert ingest.returncode == 0, ingest.stderr
            listed = run(None, "views", "list", "--json",
                         env={"LOGHANDLER_URL": url, "LOGHANDLER_TOKEN": TOKEN})
            assert json.loads(listed.stdout) == [VIEW]
        finally:
            out, err = self.stop(proc)
        assert "POST /v1/datasets/web/ingest dataset=web events=1 -> 200" in out
        assert "GET /v2/views -> 200" in out
        assert out.rstrip().endswith("stopped")
        assert TOKEN not in out and TOKEN not in err

    def test_serve_generates_and_prints_its_own_token(self) -> None:
        """Without a token, serve makes one up and prints it once with an export hint."""
        proc, url, lines = self.start("--quiet")
        try:
            assert lines[1].startswith("token: ")
            token = lines[1].split()[1]
            with loghandler.Client(token, url=url) as client:
                assert client.views.list() == []
        finally:
            out, _ = self.stop(proc)
        assert f"export LOGHANDLER_URL={url} LOGHANDLER_TOKEN={token}" in out
        assert "GET" not in out  # --quiet

    def test_serve_db_persists(self, tmp_path: Path) -> None:
        """--db FILE keeps the events across restarts."""
        db = str(tmp_path / "data.sqlite")
        env = {"LOGHANDLER_TOKEN": TOKEN}
        for text in ("first", "second"):
            proc, url, _ = self.start("--db", db, "--quiet", "--dataset", "app", env=env)
            try:
                run(None, "ingest", "app", env={"LOGHANDLER_URL": url, **env},
                    stdin=text + "\n")
            finally:
                self.stop(proc)
        with LocalService(token=TOKEN, db=db) as svc:
            assert sent(svc.events("app")) == [{"message": "first"}, {"message": "second"}]

    def test_serve_port_in_use_is_exit_2(self, svc: LocalService) -> None:
        """A port already taken: one line, exit 2."""
        port = svc.url.rsplit(":", 1)[1]
        proc = subprocess.run([sys.executable, "-m", "loghandler", "serve", "--port", port,
                               "--token", TOKEN], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2
        assert "cannot listen" in proc.stderr and TOKEN not in proc.stderr + proc.stdout

    def test_serve_on_every_interface(self) -> None:
        """--host 0.0.0.0 prints a loopback URL the client accepts, and a warning."""
        proc, url, lines = self.start("--host", "0.0.0.0", "--quiet",
                                      env={"LOGHANDLER_TOKEN": TOKEN})
        try:
            assert url.startswith("http://127.0.0.1:")
            assert f"export LOGHANDLER_URL={url}" in lines[1]
            with loghandler.Client(TOKEN, url=url) as client:
                assert client.views.list() == []
        finally:
            _, err = self.stop(proc)
        assert "reachable from other machines" in err

    def test_serve_strict_datasets_and_rate_limit(self) -> None:
        """--dataset makes only those datasets exist; --rate-limit answers 429 past it."""
        proc, url, _ = self.start("--dataset", "app", "--dataset", "web", "--rate-limit", "3",
                                  env={"LOGHANDLER_TOKEN": TOKEN})
        try:
            with loghandler.Client(TOKEN, url=url) as client:
                assert client.ingest("web", [{"a": 1}])["ingested"] == 1
                with pytest.raises(loghandler.NotFoundError):
                    client.ingest("other", [{"a": 1}])
                client.views.list()
                with pytest.raises(loghandler.RateLimitError):
                    client.views.list()
        finally:
            out, _ = self.stop(proc)
        assert "POST /v1/datasets/other/ingest dataset=other events=0 -> 404" in out
        assert "-> 429 (rate limit exceeded" in out

    @pytest.mark.parametrize("args", [["--rate-limit", "0"], ["--dataset", " "]])
    def test_serve_bad_options(self, args: list[str]) -> None:
        """A rate limit below 1 or an empty dataset name is exit 2."""
        proc = subprocess.run([sys.executable, "-m", "loghandler", "serve", "--port", "0",
                               *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and args[0] in proc.stderr


class TestDatasetAndInput:
    """Where the dataset comes from, and how each input is read (issue: the first five minutes)."""

    def test_dataset_from_the_environment_and_a_file(self, svc: LocalService,
                                                      tmp_path: Path) -> None:
        """LOGHANDLER_DATASET=d ingest events.ndjson: the file is read, d is the dataset."""
        f = write(tmp_path / "events.ndjson", '{"n": 1}\n')
        proc = run(svc, "ingest", f, env={"LOGHANDLER_DATASET": "d"})
        assert proc.returncode == 0, proc.stderr
        assert "1 event read, 1 delivered to 'd'" in proc.stdout
        assert svc.datasets() == {"d": 1}

    def test_a_file_is_never_a_dataset(self, svc: LocalService, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        """An input-looking name is a file even when missing; without a dataset: exit 2."""
        f = write(tmp_path / "events.ndjson", '{"n": 1}\n')
        proc = run(svc, "ingest", f)
        assert proc.returncode == 2
        assert errors(proc) == [f"{f} is an input file, not a dataset: give the dataset with "
                                "-d NAME or LOGHANDLER_DATASET"]
        monkeypatch.chdir(tmp_path)  # a bare name with an input suffix, that does not exist
        proc = run(svc, "ingest", "evnts.ndjson", env={"LOGHANDLER_DATASET": "d"})
        assert proc.returncode == 2
        assert errors(proc) == ["cannot read evnts.ndjson: no such file"]
        assert svc.datasets() == {}

    def test_dash_d_and_the_positional_form(self, svc: LocalService, tmp_path: Path) -> None:
        """-d NAME takes every argument as a file; `ingest DATASET FILE` still works; both
        win over LOGHANDLER_DATASET."""
        f = write(tmp_path / "a.log", "one\n")
        assert run(svc, "ingest", "-d", "x", f, env={"LOGHANDLER_DATASET": "env"}
                   ).returncode == 0
        assert run(svc, "ingest", "y", f, env={"LOGHANDLER_DATASET": "env"}).returncode == 0
        assert svc.datasets() == {"x": 1, "y": 1}

    def test_stdin_with_the_dataset_from_the_environment(self, svc: LocalService) -> None:
        """`loghandler ingest < events.ndjson` with LOGHANDLER_DATASET set; no prompt on a pipe."""
        proc = run(svc, "ingest", stdin='{"n": 1}\n{"n": 2}\n', env={"LOGHANDLER_DATASET": "d"})
        assert proc.returncode == 0, proc.stderr
        assert sent(svc.events("d")) == [{"n": 1}, {"n": 2}]
        assert "Ctrl-D" not in proc.stderr

    def test_no_dataset_at_all(self, svc: LocalService) -> None:
        """No -d, no argument, no variable: exit 2, one line saying what to give."""
        proc = run(svc, "ingest", stdin="x\n")
        assert proc.returncode == 2
        assert errors(proc) == ["no dataset: give it with -d NAME or set LOGHANDLER_DATASET"]

    def test_terminal_stdin_says_how_to_end(self, svc: LocalService) -> None:
        """Reading a terminal, ingest says so (and how to end); Ctrl-D ends the input."""
        import pty

        master, slave = pty.openpty()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)
        proc = subprocess.Popen([sys.executable, "-m", "loghandler", "ingest", "tty"],
                                stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, text=True)
        os.close(slave)
        try:
            assert proc.stderr is not None
            # The line comes before anything is read: wait for it (with a deadline).
            ready, _, _ = select.select([proc.stderr], [], [], 30)
            assert ready, "no prompt on stderr within 30 s"
            assert proc.stderr.readline() == (
                "loghandler: reading from standard input (Ctrl-D to end)\n")
            os.write(master, b"typed line\n\x04")
            out, err = proc.communicate(timeout=30)
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert "1 event read, 1 delivered to 'tty'" in out
        assert sent(svc.events("tty")) == [{"message": "typed line"}]

    def test_gzip_is_decompressed_and_named(self, svc: LocalService, tmp_path: Path) -> None:
        """A .gz file ships its decompressed events, and the detected format is said."""
        import gzip

        path = tmp_path / "events.ndjson.gz"
        path.write_bytes(gzip.compress(b'{"n": 1}\n{"n": 2}\n'))
        proc = run(svc, "ingest", "app", str(path))
        assert proc.returncode == 0, proc.stderr
        assert f"loghandler: reading {path} (gzip, NDJSON)" in proc.stderr
        assert sent(svc.events("app")) == [{"n": 1}, {"n": 2}]

    def test_brace_text_is_text(self, svc: LocalService, tmp_path: Path) -> None:
        """A log whose first line starts with { or [ but is not JSON is read as text lines."""
        f = write(tmp_path / "a.log", "{worker-1} started\n[INFO] ready\n")
        g = write(tmp_path / "b.log", "[2026-01-02 10:00:00] up\n")
        proc = run(svc, "ingest", "app", f, g)
        assert proc.returncode == 0, proc.stderr
        assert f"reading {f} (text lines)" in proc.stderr
        assert [e["message"] for e in svc.events("app")] == [
            "{worker-1} started", "[INFO] ready", "[2026-01-02 10:00:00] up"]

    def test_format_option(self, svc: LocalService, tmp_path: Path) -> None:
        """--format text ships JSON lines as text; --format json reads pretty-printed objects."""
        f = write(tmp_path / "a.ndjson", '{"n": 1}\n')
        g = write(tmp_path / "b.txt", '{\n  "n": 2\n}\n{"n": 3}\n')
        assert run(svc, "ingest", "t", f, "--format", "text").returncode == 0
        proc = run(svc, "ingest", "j", g, "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert "(JSON (--format))" in proc.stderr
        assert sent(svc.events("t")) == [{"message": '{"n": 1}'}]
        assert sent(svc.events("j")) == [{"n": 2}, {"n": 3}]
        bad = run(svc, "ingest", "t", f, "--format", "xml")
        assert bad.returncode == 2 and "invalid choice: 'xml'" in bad.stderr

    def test_pretty_printed_objects_are_detected(self, svc: LocalService, tmp_path: Path) -> None:
        """auto: JSON objects over several lines, one after the other, are JSON, not text."""
        f = write(tmp_path / "a.json", '{\n  "n": 1\n}\n{\n  "n": 2\n}\n')
        proc = run(svc, "ingest", "app", f)
        assert proc.returncode == 0, proc.stderr
        assert sent(svc.events("app")) == [{"n": 1}, {"n": 2}]

    def test_single_line_array_across_chunks(self, svc: LocalService, tmp_path: Path) -> None:
        """An array on one line, far longer than a read chunk, arrives whole and in order."""
        events = [{"i": i, "pad": "z" * 300} for i in range(3000)]  # ~1 MB, one line
        f = write(tmp_path / "one-line.json", json.dumps(events))
        proc = run(svc, "ingest", "big", f)
        assert proc.returncode == 0, proc.stderr
        assert f"reading {f} (JSON)" in proc.stderr
        assert sent(svc.events("big")) == events

    def test_directory(self, svc: LocalService, tmp_path: Path) -> None:
        """A directory is named as one, exit 2."""
        proc = run(svc, "ingest", "app", str(tmp_path))
        assert proc.returncode == 2
        assert errors(proc) == [f"cannot read {tmp_path}: is a directory (give the files in it)"]


class TestWording:
    """The five most common failures, each one line that says what to do."""

    def test_bad_json_line(self, svc: LocalService, tmp_path: Path) -> None:
        """file:line, what is wrong where, and that the line was skipped; the rest ships."""
        f = write(tmp_path / "a.ndjson", '{"n": 1}\n{"n": oops}\n')
        proc = run(svc, "ingest", "app", f)
        assert proc.returncode == 1
        assert errors(proc) == [f"{f}:2: not JSON (Expecting value at column 7); line skipped"]
        assert proc.stdout == "1 event read, 1 delivered to 'app', 1 bad input line skipped\n"

    def test_unknown_dataset(self, tmp_path: Path) -> None:
        """A 404 for the dataset: says it does not exist and what to check, once."""
        from pytest_httpserver import HTTPServer

        server = HTTPServer(host="127.0.0.1", port=0)
        server.start()
        try:
            server.expect_request("/v1/datasets/nosuch/ingest", method="POST").respond_with_json(
                {"code": 404, "message": "dataset not found"}, status=404)
            url = server.url_for("").rstrip("/")
            f = write(tmp_path / "a.log", "x\n")
            proc = run(None, "ingest", "nosuch", f,
                       env={"LOGHANDLER_URL": url, "LOGHANDLER_TOKEN": TOKEN})
        finally:
            server.clear()
            server.stop()
        assert proc.returncode == 1
        assert errors(proc) == [
            f"dataset 'nosuch' does not exist at {url} (HTTP 404): create it (loghandler "
            "datasets create nosuch) or check -d"]
        assert proc.stdout == "1 event read, 0 delivered to 'nosuch', 1 not delivered\n"

    def test_wrong_token_for_views(self, svc: LocalService) -> None:
        """views list with a refused token: the same one line, "authentication failed" not twice."""
        proc = run(svc, "views", "list", env={"LOGHANDLER_TOKEN": "not-the-token"})
        assert proc.returncode == 1
        assert errors(proc) == [
            "the service refused the token (HTTP 403): check --token or LOGHANDLER_TOKEN (a "
            "personal access token also needs --org-id)"]


class TestStreaming:
    def test_ingest_ships_lines_as_they_come(self, svc: LocalService) -> None:
        """A pipe that stays open (`tail -f | loghandler ingest`): each line ships while the
        input goes on, not at its end."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)
        proc = subprocess.Popen([sys.executable, "-m", "loghandler", "ingest", "live"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, text=True)
        try:
            assert proc.stdin is not None
            proc.stdin.write('{"n": 1}\n')
            proc.stdin.flush()
            # stdin still open
            assert sent(svc.wait_for_events("live", 1, timeout=20)) == [{"n": 1}]
            proc.stdin.write('{"n": 2}\n')
            proc.stdin.flush()
            assert sent(svc.wait_for_events("live", 2, timeout=20)) == [{"n": 1}, {"n": 2}]
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert out == "2 events read, 2 delivered to 'live'\n"
