"""Issue 47, what a newcomer met on the first day: an application that starts without a token
(``send="if-token-present"``), tests of the application's real logging configuration
(``loghandler.testing.capture()`` and the ``loghandler_capture`` fixture), and a light
``import loghandler.testing``."""

from __future__ import annotations

import logging
import logging.config
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import loghandler
from loghandler.testing import LocalService, MemoryTransport, capture

ROOT = Path(__file__).resolve().parent.parent
NOT_SENT = "send nothing in this process"


def run_python(code: str, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=clean, cwd=cwd or ROOT)


def guide_logging(page: str) -> str:
    """The ``LOGGING = {...}`` excerpt of a guide, as the user copies it into settings.py."""
    text = (ROOT / "docs" / "guides" / page).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if b.startswith("LOGGING = {")]
    return block


class TestSendIfTokenPresent:
    def test_the_django_guides_settings_start_without_a_token(self, tmp_path: Path) -> None:
        """The Django guide's LOGGING, with no LOGHANDLER_TOKEN (a CI job, a new clone):
        ``manage.py check`` passes with no traceback and one line saying nothing is sent."""
        pytest.importorskip("django")
        (tmp_path / "settings.py").write_text(
            guide_logging("django.md") + textwrap.dedent("""
                SECRET_KEY = "not-secret"
                INSTALLED_APPS = []
                ROOT_URLCONF = "settings"
                urlpatterns = []
                """), encoding="utf-8")
        proc = run_python("""
            import sys
            import logging
            from django.core.management import execute_from_command_line
            execute_from_command_line(["manage.py", "check"])
            logging.getLogger("shop").error("not shipped, and nothing breaks")
            """, env={"DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": str(tmp_path)},
            cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "System check identified no issues" in proc.stdout
        assert proc.stderr.count(NOT_SENT) == 1, proc.stderr
        assert "LOGHANDLER_TOKEN is not set" in proc.stderr

    def test_every_front_end_is_built_and_sends_nothing_one_line_once(self) -> None:
        proc = run_python("""
            import logging
            import loghandler
            from loghandler.opentelemetry import IngestLogRecordProcessor
            fronts = [loghandler.IngestHandler("a", send="if-token-present"),
                      loghandler.IngestHandler("b", send="if-token-present", level="info"),
                      loghandler.IngestProcessor("c", send="if-token-present"),
                      loghandler.IngestSink("d", send="if-token-present"),
                      IngestLogRecordProcessor("e", send="if-token-present")]
            log = logging.getLogger("x")
            log.addHandler(fronts[0])
            log.warning("nowhere")
            fronts[2](None, "info", {"event": "nowhere"})
            assert fronts[0].flush(1) and fronts[2].flush(1)
            print(fronts[0].stats().delivered, fronts[0].stats().batches)
            """)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["0", "0"]
        assert proc.stderr.count(NOT_SENT) == 1, proc.stderr
        assert "Traceback" not in proc.stderr

    def test_the_default_keeps_the_clear_error(self) -> None:
        with pytest.raises(loghandler.ConfigurationError, match="LOGHANDLER_TOKEN"):
            loghandler.IngestHandler("app", url="http://127.0.0.1:9")

    def test_with_a_token_it_ships(self) -> None:
        with LocalService(token="tok-1") as svc:
            handler = loghandler.IngestHandler("app", url=svc.url, token="tok-1",
                                               send="if-token-present")
            handler.emit(logging.makeLogRecord({"msg": "shipped"}))
            assert handler.flush(10)
            handler.close()
            assert [e["message"] for e in svc.events("app")] == ["shipped"]

    def test_send_false_and_the_variable_ship_nothing(self, monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
        with LocalService(token="tok-2") as svc:
            monkeypatch.setenv("LOGHANDLER_SEND", "0")
            off_by_env = loghandler.IngestHandler("app", url=svc.url, token="tok-2")
            monkeypatch.delenv("LOGHANDLER_SEND")
            off = loghandler.IngestProcessor("app", url=svc.url, token="tok-2", send=False)
            off_by_env.emit(logging.makeLogRecord({"msg": "not shipped"}))
            off(None, "info", {"event": "not shipped"})
            assert off_by_env.flush(2) and off.flush(2)
            off_by_env.close()
            off.close()
            assert svc.requests == [] and svc.events("app") == []
            assert off_by_env.stats().delivered == 0

    @pytest.mark.parametrize("value", ["sometimes", 1, "yes please"])
    def test_a_wrong_value_is_named(self, value: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        with pytest.raises(loghandler.ConfigurationError, match="send="):
            loghandler.IngestHandler("app", send=value, transport=MemoryTransport())
        monkeypatch.setenv("LOGHANDLER_SEND", "maybe")
        with pytest.raises(loghandler.ConfigurationError, match="LOGHANDLER_SEND"):
            loghandler.IngestHandler("app", transport=MemoryTransport())

    def test_a_bad_option_still_fails_without_a_token(self) -> None:
        with pytest.raises(loghandler.ConfigurationError, match="batch_sise"):
            loghandler.IngestHandler("app", send="if-token-present", batch_sise=3)


DICT_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"ingest": {"class": "loghandler.IngestHandler", "dataset": "app-logs",
                            "send": "if-token-present", "fields": {"service": "shop"},
                            "scrub_keys": ["card"], "flush_interval": 60}},
    "loggers": {"shop": {"handlers": ["ingest"], "level": "INFO", "propagate": False}},
}


@pytest.fixture
def shop_logger() -> Any:
    logging.config.dictConfig(DICT_CONFIG)
    log = logging.getLogger("shop")
    yield log
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()


class TestCapture:
    def test_the_apps_dictconfig_built_before_ships_into_memory(self, shop_logger: Any) -> None:
        """A handler the application's dictConfig built (no token: it sends nothing) is
        captured with its options: dataset, fields, scrubbing."""
        with capture() as shipped:
            shop_logger.info("paid", extra={"order": 7, "card": "4111"})
            events = shipped.events()
        assert [(e["message"], e["order"], e["service"], e["card"]) for e in events] == [
            ("paid", 7, "shop", "[redacted]")]
        assert shipped.events("app-logs") == events and shipped.events("other") == []
        assert [r.path for r in shipped.requests] == ["/v1/datasets/app-logs/ingest"]
        shop_logger.info("after")  # back to sending nothing
        assert [e["message"] for e in shipped.events()] == ["paid"]
        assert shop_logger.handlers[0].stats().delivered == 0

    def test_front_ends_built_during_it_and_each_goes_back(self) -> None:
        with LocalService(token="tok-3") as svc:
            before = loghandler.IngestProcessor("real", url=svc.url, token="tok-3")
            with capture() as shipped:
                logging.config.dictConfig(DICT_CONFIG)
                during = loghandler.IngestHandler("during", url=svc.url, token="tok-3")
                logging.getLogger("shop").warning("from the config")
                during.emit(logging.makeLogRecord({"msg": "built during"}))
                before(None, "info", {"event": "captured, not sent", "k": 1})
                got = {(e.get("message") or e.get("event")) for e in shipped.events()}
                assert got == {"from the config", "built during", "captured, not sent"}
                assert svc.requests == []
            before(None, "info", {"event": "sent again"})
            during.emit(logging.makeLogRecord({"msg": "sent after"}))
            assert before.flush(10) and during.flush(10)
            assert [e["event"] for e in svc.events("real")] == ["sent again"]
            assert [e["message"] for e in svc.events("during")] == ["sent after"]
            assert len(shipped.events()) == 3
            before.close()
            during.close()
            for handler in list(logging.getLogger("shop").handlers):
                logging.getLogger("shop").removeHandler(handler)
                handler.close()

    def test_loguru_and_opentelemetry_front_ends_are_captured(self) -> None:
        loguru = pytest.importorskip("loguru")
        sdk = pytest.importorskip("opentelemetry.sdk._logs")
        try:
            from opentelemetry._logs import LogRecord  # the API's record (SDK 1.35 and later)
        except ImportError:
            from opentelemetry.sdk._logs import LogRecord  # type: ignore[no-redef]
        from loghandler.opentelemetry import IngestLogRecordProcessor

        sink = loghandler.IngestSink("loguru-ds", send="if-token-present")
        otel = IngestLogRecordProcessor("otel-ds", send="if-token-present")
        provider = sdk.LoggerProvider()
        provider.add_log_record_processor(otel)
        sink_id = loguru.logger.add(sink)
        try:
            with capture() as shipped:
                loguru.logger.info("from loguru")
                provider.get_logger("otel-test").emit(LogRecord(body="from otel"))
                assert [e["message"] for e in shipped.events("loguru-ds")] == ["from loguru"]
                assert [e["message"] for e in shipped.events("otel-ds")] == ["from otel"]
        finally:
            loguru.logger.remove(sink_id)
            sink.close()
            provider.shutdown()

    def test_the_fixture_in_another_project(self, tmp_path: Path) -> None:
        """``loghandler_capture`` in a project whose conftest configures logging from its
        settings (no token anywhere)."""
        (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
            import logging.config
            logging.config.dictConfig({DICT_CONFIG!r})
            """), encoding="utf-8")
        (tmp_path / "test_app.py").write_text(textwrap.dedent("""
            import logging

            def test_ships_the_order(loghandler_capture):
                logging.getLogger("shop").info("paid", extra={"order": 9})
                (event,) = loghandler_capture.events("app-logs")
                assert (event["message"], event["order"]) == ("paid", 9)
            """), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGHANDLER_", "PYTEST_"))}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "test_app.py"], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 passed" in proc.stdout


class TestLightImport:
    def test_import_loghandler_testing_leaves_the_local_service_out(self) -> None:
        proc = run_python("""
            import sys
            import loghandler.testing as t
            heavy = sorted(m for m in sys.modules
                           if m.startswith("loghandler._local") or m == "sqlite3")
            print(heavy)
            t.MemoryTransport(); t.capture()
            print(sorted(m for m in sys.modules if m.startswith("loghandler._local")) == [])
            svc = t.LocalService()
            svc.stop()
            print("loghandler._local.service" in sys.modules, "LocalService" in dir(t))
            from loghandler.testing import RequestRecord
            """)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split("\n")[:3] == ["[]", "True", "True True"]


def cli(svc: LocalService | None, *args: str, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m loghandler ARGS`` pointed at ``svc``; never a traceback."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    if svc is not None:
        full.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=svc.token)
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "loghandler", *args], input=stdin,
                          capture_output=True, text=True, env=full, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


class TestIngestTimes:
    @pytest.mark.parametrize("field", ["timestamp", "@timestamp", "time", "ts"])
    def test_a_common_time_field_gives_each_events_time(self, field: str) -> None:
        """100 events spanning 50 minutes keep their times (epoch seconds, milliseconds, RFC
        3339), and one line says which field was read."""
        start = 1_714_564_800  # 2024-05-01T12:00:00Z
        values: list[Any] = [start + 30 * i for i in range(100)]
        values[1] = (start + 30) * 1000                          # milliseconds
        values[2] = "2024-05-01T12:01:00.5+00:00"                # RFC 3339
        lines = "".join(f'{{"{field}": {json_value(v)}, "n": {i}}}\n'
                        for i, v in enumerate(values))
        with LocalService(token="t-ingest") as svc:
            proc = cli(svc, "ingest", "times", stdin=lines)
            assert proc.returncode == 0, proc.stderr
            events = sorted(svc.events("times"), key=lambda e: e["n"])
        assert [e["_time"][:19] for e in events[:3]] == [
            "2024-05-01T12:00:00", "2024-05-01T12:00:30", "2024-05-01T12:01:00"]
        assert events[-1]["_time"][:19] == "2024-05-01T12:49:30"
        assert events[0][field] == values[0]  # the field itself is kept
        assert proc.stderr.count(f"read from its {field!r} field") == 1, proc.stderr

    def test_a_field_that_is_no_time_is_named_once(self) -> None:
        lines = "".join(f'{{"time": 0.{i + 1}, "n": {i}}}\n' for i in range(5))
        with LocalService(token="t-ingest") as svc:
            proc = cli(svc, "ingest", "durations", stdin=lines)
            assert proc.returncode == 0, proc.stderr
            assert len(svc.events("durations")) == 5
        assert proc.stderr.count("'time' field is not a time") == 1, proc.stderr
        assert "--timestamp-field time" in proc.stderr

    def test_time_and_timestamp_field_flags_and_time_win(self) -> None:
        lines = ('{"_time": "2024-05-01T12:00:00Z", "timestamp": 1000000000}\n'
                 '{"_time": "2024-05-01T12:00:01Z", "timestamp": 1000000000}\n')
        with LocalService(token="t-ingest") as svc:
            proc = cli(svc, "ingest", "own", stdin=lines)
            assert proc.returncode == 0, proc.stderr
            assert [e["_time"][:19] for e in svc.events("own")] == [
                "2024-05-01T12:00:00", "2024-05-01T12:00:01"]
        assert "read from" not in proc.stderr

    def test_text_lines_get_their_leading_time_and_level(self, tmp_path: Path) -> None:
        log = tmp_path / "app.log"
        log.write_text("2024-05-01 12:00:00,123 INFO shop: paid\n"
                       "2024-05-01T12:05:00Z [ERROR] payment refused\n"
                       "2024-05-01 12:10:00 just a time\n"
                       "no time at all\n", encoding="utf-8")
        with LocalService(token="t-ingest") as svc:
            proc = cli(svc, "ingest", "text", str(log))
            assert proc.returncode == 0, proc.stderr
            events = svc.events("text")
        by_message = {e["message"]: e for e in events}
        paid = by_message["2024-05-01 12:00:00,123 INFO shop: paid"]
        assert (paid["_time"][:23], paid["level"]) == ("2024-05-01T12:00:00.123", "info")
        refused = by_message["2024-05-01T12:05:00Z [ERROR] payment refused"]
        assert (refused["_time"][:19], refused["level"]) == ("2024-05-01T12:05:00", "error")
        assert by_message["2024-05-01 12:10:00 just a time"]["_time"][:19] == \
            "2024-05-01T12:10:00"
        assert "level" not in by_message["no time at all"]


def json_value(value: Any) -> str:
    import json

    return json.dumps(value)


class TestTypedOptions:
    def test_the_typed_options_are_the_one_list(self) -> None:
        """``ShippingOptions`` is ``ShipperOptions``'s fields; the front ends' add the Client's
        arguments, ``transport`` and ``send``."""
        from loghandler._config import SHIPPER_OPTION_NAMES
        from loghandler._options import FrontEndOptions, ShippingOptions
        from loghandler._wire.settings import CLIENT_ARG_NAMES

        assert set(ShippingOptions.__annotations__) == SHIPPER_OPTION_NAMES
        assert set(FrontEndOptions.__annotations__) | set(ShippingOptions.__annotations__) == (
            SHIPPER_OPTION_NAMES | CLIENT_ARG_NAMES | {"transport", "send"})

    def test_every_option_is_in_the_configuration_table(self) -> None:
        """docs/configuration.md has a row for every option (issue 47: ten were missing)."""
        from loghandler._options import FrontEndOptions, ShippingOptions

        text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
        named: set[str] = set()
        for line in text.splitlines():
            if line.startswith("| `"):
                named |= set(re.findall(r"`(\w+)`", line.split("|")[1]))
        options = set(FrontEndOptions.__annotations__) | set(ShippingOptions.__annotations__)
        assert options - named == set()

    def test_front_ends_signatures_name_the_typed_options(self) -> None:
        from loghandler.opentelemetry import IngestLogRecordProcessor

        for cls, typed in ((loghandler.IngestHandler, "FrontEndOptions"),
                           (loghandler.IngestProcessor, "FrontEndOptions"),
                           (loghandler.IngestSink, "FrontEndOptions"),
                           (IngestLogRecordProcessor, "FrontEndOptions"),
                           (loghandler.Shipper, "ShippingOptions")):
            annotation = cls.__init__.__annotations__["options"]
            assert annotation == f"Unpack[{typed}]", cls

    @pytest.mark.slow
    def test_mypy_checks_the_options(self, tmp_path: Path) -> None:
        pytest.importorskip("mypy")
        use = tmp_path / "use.py"
        use.write_text(textwrap.dedent("""
            import loghandler
            from loghandler.opentelemetry import IngestLogRecordProcessor

            loghandler.IngestHandler("x", batch_sise=3)
            loghandler.IngestProcessor("x", overflow="nope")
            loghandler.IngestSink("x", send="maybe")
            IngestLogRecordProcessor("x", flush_interval="1")
            loghandler.Shipper(None, "x", token="t")
            loghandler.IngestHandler("x", level="info", batch_size=10, send="if-token-present",
                                     fields={"service": "shop"}, hold_level="info")
            """), encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                               "--cache-dir", os.devnull, str(use)], capture_output=True,
                              text=True, timeout=600, cwd=ROOT)
        errors = sorted(int(m) for m in re.findall(r"use\.py:(\d+): error", proc.stdout))
        assert errors == [5, 6, 7, 8, 9], proc.stdout


class TestLevelNames:
    @pytest.mark.parametrize("level", ["info", "INFO", "Info", logging.INFO])
    def test_a_level_name_in_any_case(self, level: Any) -> None:
        handler = loghandler.IngestHandler("app", transport=MemoryTransport(), level=level)
        assert handler.level == logging.INFO
        handler.setLevel("warning")
        assert handler.level == logging.WARNING
        handler.close()

    @pytest.mark.parametrize("options", [{"sample_keep_level": "ERROR"}, {"hold_level": "INFO"},
                                         {"sample_levels": {"DEBUG": 0.5}}])
    def test_the_options_that_take_a_level_take_its_name_in_any_case(
            self, options: dict[str, Any]) -> None:
        handler = loghandler.IngestHandler("app", transport=MemoryTransport(), **options)
        handler.close()

    def test_an_unknown_level_is_still_an_error(self) -> None:
        with pytest.raises(ValueError, match="loud"):
            loghandler.IngestHandler("app", transport=MemoryTransport(), level="loud")


class TestCommandLine:
    @pytest.fixture
    def svc_options(self) -> dict[str, Any]:
        return {"token": "t-cli", "datasets": ["app", "big"]}

    def test_query_says_it_stopped_at_the_row_limit(self, svc: LocalService) -> None:
        svc.client().ingest("big", [{"n": i} for i in range(1200)])
        proc = cli(svc, "query", "['big']")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.endswith("(1000 rows)\n")
        assert proc.stderr.count("stopped at the service's default of 1,000 rows") == 1
        assert "| take N" in proc.stderr
        proc = cli(svc, "query", "['big'] | take 1200")
        assert proc.returncode == 0 and proc.stdout.endswith("(1200 rows)\n")
        assert "stopped" not in proc.stderr

    @pytest.mark.parametrize("args", [("tail", "nosuch"), ("query", "['nosuch'] | take 3")])
    def test_a_missing_datasets_message_is_whole(self, svc: LocalService,
                                                 args: tuple[str, ...]) -> None:
        proc = cli(svc, *args)
        assert proc.returncode == 1
        line = proc.stderr.strip()
        assert line.startswith("loghandler: dataset 'nosuch' does not exist: check the name")
        assert line.endswith("or create it with loghandler datasets create nosuch")
        assert "app, big" in line and "--url" not in line and "…" not in line

    def test_doctor_takes_the_dataset_positionally(self, svc: LocalService) -> None:
        proc = cli(svc, "doctor", "app")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "ok: dataset 'app' exists" in proc.stdout
        proc = cli(svc, "doctor", "nosuch")
        assert proc.returncode == 1 and "dataset 'nosuch' does not exist" in proc.stdout
        proc = cli(svc, "doctor", "app", "-d", "big")
        assert proc.returncode == 2 and "two datasets" in proc.stderr

    def test_tail_fields_and_no_color_message(self, svc: LocalService) -> None:
        svc.client().ingest("app", [{"message": "GET / 200", "level": "info", "status": 200,
                                     "path": "/", "color_message": "\x1b[1mGET / 200\x1b[0m"}])
        plain = cli(svc, "tail", "app").stdout
        assert "status=200" in plain and "path=/" in plain and "color_message" not in plain
        chosen = cli(svc, "tail", "app", "--fields", "status").stdout
        assert "status=200" in chosen and "path=" not in chosen and "GET / 200" in chosen
        as_json = cli(svc, "tail", "app", "--json", "--fields", "path,color_message").stdout
        import json

        assert set(json.loads(as_json)) == {"_time", "path", "color_message"}

    def test_sigterm_ends_tail_follow_at_once(self, svc: LocalService) -> None:
        import signal
        import time

        svc.client().ingest("app", [{"message": "one"}])
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
        env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=svc.token)
        proc = subprocess.Popen([sys.executable, "-m", "loghandler", "tail", "-f",
                                 "--interval", "60", "app"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None and "one" in proc.stdout.readline()
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
            # Far under the 60 s poll interval it was sleeping in (a loaded machine: 10 s).
            assert time.monotonic() - started < 10
            assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def test_serve_keeps_its_token_beside_its_db(self, tmp_path: Path) -> None:
        import stat

        db = tmp_path / "local.db"
        tokens = []
        for _ in range(2):
            env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
            proc = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--port", "0",
                                     "--db", str(db)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env)
            try:
                assert proc.stdout is not None
                for _ in range(10):
                    line = proc.stdout.readline()
                    if line.startswith("token: "):
                        tokens.append(line.split()[1])
                        break
            finally:
                proc.terminate()
                proc.wait(30)
        kept = tmp_path / "local.db.token"
        assert len(tokens) == 2 and tokens[0] == tokens[1], tokens
        assert kept.read_text(encoding="utf-8").strip() == tokens[0]
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600


class TestIngestParams:
    def test_a_public_option_sends_the_ingest_query(self) -> None:
        transport = MemoryTransport()
        shipper = loghandler.Shipper(None, "app", transport=transport,
                                     ingest_params={"timestamp-field": "ts"})
        shipper.submit({"ts": "2024-05-01T12:00:00Z"})
        assert shipper.flush(10)
        shipper.close()
        assert transport.requests[0].path == "/v1/datasets/app/ingest?timestamp-field=ts"

    def test_a_bad_value_is_named(self) -> None:
        with pytest.raises(loghandler.ConfigurationError, match="ingest_params"):
            loghandler.Shipper(None, "app", transport=MemoryTransport(), ingest_params={"a": 1})

    def test_the_command_line_uses_no_private_call(self) -> None:
        source = (ROOT / "loghandler" / "cli" / "ingest.py").read_text(encoding="utf-8")
        assert "._ingest_query" not in source and "ingest_params=" in source


class TestOpenTelemetry:
    @pytest.mark.parametrize("where", ["opentelemetry.instrumentation.logging.handler",
                                       "opentelemetry.sdk._logs"])
    def test_both_logging_handlers_ship_through_the_processor(self, where: str) -> None:
        """The current stdlib handler (opentelemetry-instrumentation-logging) and the SDK's
        deprecated one, under the same processor: message, level, extras, exception and the
        Resource's service."""
        import importlib
        import warnings

        pytest.importorskip("opentelemetry.sdk._logs")
        handler_class = importlib.import_module(pytest.importorskip(where).__name__).LoggingHandler
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk.resources import Resource

        from loghandler.opentelemetry import IngestLogRecordProcessor

        transport = MemoryTransport()
        provider = LoggerProvider(resource=Resource.create({"service.name": "checkout"}))
        processor = IngestLogRecordProcessor("otel", transport=transport)
        provider.add_log_record_processor(processor)
        log = logging.getLogger(f"first-day.{where}")
        log.propagate = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            handler = handler_class(logger_provider=provider)
        log.addHandler(handler)
        try:
            log.warning("paid %s", 7, extra={"order": 9})
            try:
                raise ZeroDivisionError("division by zero")
            except ZeroDivisionError:
                log.exception("boom")
            assert processor.force_flush(10_000)
            paid, boom = transport.events("otel")
            assert (paid["message"], paid["level"], paid["order"], paid["service"]) == (
                "paid 7", "warning", 9, "checkout")
            assert boom["level"] == "error"
            assert boom["exception"]["type"] == "ZeroDivisionError"
        finally:
            log.removeHandler(handler)
            provider.shutdown()

    def test_the_handler_takes_service_from_the_resource(self) -> None:
        """A stdlib IngestHandler built after the app set up OpenTelemetry ships the Resource's
        service.name (the SDK's processor path did; issue 47)."""
        proc = run_python("""
            import logging
            from opentelemetry import trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            trace.set_tracer_provider(TracerProvider(resource=Resource.create(
                {"service.name": "checkout", "service.version": "1.2"})))
            import loghandler, structlog
            from loghandler.testing import MemoryTransport
            t = MemoryTransport()
            h = loghandler.IngestHandler("app", transport=t)
            p = loghandler.IngestProcessor("app", transport=t)
            h.emit(logging.makeLogRecord({"msg": "x"}))
            p(None, "info", {"event": "y"})
            assert h.flush(10) and p.flush(10)
            print(sorted((e["service"], e["version"]) for e in t.events()))
            """)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "[('checkout', '1.2'), ('checkout', '1.2')]"

    def test_the_service_variable_still_wins(self) -> None:
        proc = run_python("""
            import logging
            from opentelemetry import trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            trace.set_tracer_provider(TracerProvider(resource=Resource.create(
                {"service.name": "checkout"})))
            import loghandler
            from loghandler.testing import MemoryTransport
            t = MemoryTransport()
            h = loghandler.IngestHandler("app", transport=t)
            h.emit(logging.makeLogRecord({"msg": "x"}))
            assert h.flush(10)
            print(t.events()[0]["service"])
            """, env={"LOGHANDLER_SERVICE": "billing"})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "billing"


class TestMetadata:
    def test_pip_show_has_license_author_and_classifiers(self) -> None:
        import importlib.metadata

        meta = importlib.metadata.metadata("loghandler-ingest")
        assert meta.get("License-Expression") == "MIT" or meta.get("License") == "MIT"
        assert meta.get("Author") or meta.get("Author-email")
        classifiers = meta.get_all("Classifier") or []
        assert "Framework :: Pytest" in classifiers
        for minor in (10, 11, 12, 13):
            assert f"Programming Language :: Python :: 3.{minor}" in classifiers
        urls = " ".join(meta.get_all("Project-URL") or [])
        assert "readthedocs" not in urls and "/tree/main/docs" in urls


def test_the_librarys_404_for_a_query_keeps_the_services_words() -> None:
    """A query of a dataset that does not exist: the service's message whole, and no hint at
    the address (the service answered there)."""
    with (LocalService(token="t-404", datasets=["app"]) as svc, svc.client() as client,
          pytest.raises(loghandler.NotFoundError) as info):
        client.query("['no-such-dataset-with-a-long-name-to-be-cut-short'] | take 1")
    text = str(info.value)
    assert "no-such-dataset-with-a-long-name-to-be-cut-short" in text
    assert "…" not in text and "url" not in text
