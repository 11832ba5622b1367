"""Security: the token never leaks, bad tokens and clear-text addresses are refused, TLS is
verified, and request and response sizes are bounded."""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from faultserver import TOKEN, FaultServer, Front, check_accounting, status

import loghandler

# The service echoing the token back is the worst case: every message built from its answer
# must still be scrubbed.
ECHO = {"message": f"token {TOKEN} is not valid", "auth": f"Bearer {TOKEN}"}


class TestTokenNeverShown:
    @pytest.mark.parametrize("kind", ["handler", "processor"])
    @pytest.mark.parametrize("fault", ["403", "500", "dead"])
    def test_token_absent_from_everything_captured(
        self, kind: str, fault: str, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """403 / 500 (both echoing the token) / dead server: no stderr line, log record,
        exception text, exception body or repr contains the token."""
        caplog.set_level(logging.DEBUG)  # urllib3's own debug lines included
        errors: list[BaseException] = []
        default = {"403": status(403, ECHO), "500": status(500, ECHO)}.get(fault)
        srv = FaultServer(default=default or status(200)).start()
        if fault == "dead":
            srv.stop()
        front = Front(kind, srv, max_retries=2, auth_retry_delay=0.01, on_error=errors.append)
        try:
            for i in range(30):
                front.emit(i)
            assert not front.flush(10)
            shown = [repr(front.front), repr(front.shipper), repr(front.shipper.client),
                     repr(front.shipper.client.settings), repr(front.stats()),
                     str(front.stats())]
        finally:
            front.close(timeout=1)
            srv.stop()
        check_accounting(front.stats(), srv)
        assert errors, "on_error was not called"
        for exc in errors:
            shown += [str(exc), repr(exc), repr(exc.args), repr(getattr(exc, "body", None))]
        out, err = capfd.readouterr()
        assert "loghandler:" in err  # the engine did report the fault
        logs = [r.getMessage() for r in caplog.records] + [caplog.text]
        for text in [out, err, *logs, *shown]:
            assert TOKEN not in text

    def test_configuration_error_does_not_echo_a_bad_token(self) -> None:
        """A refused token is not repeated in the error message."""
        bad = TOKEN + "\n"
        with pytest.raises(loghandler.ConfigurationError) as info:
            loghandler.Client(bad, url="http://127.0.0.1:1")
        assert TOKEN not in str(info.value)


class TestRefusedConfiguration:
    @pytest.mark.parametrize("bad", ["\r", "\n", "\r\n", "\x00", "\x1b", "\x7f", "\t", " ",
                                     "\u2028", "\x85"])
    @pytest.mark.parametrize("where", ["start", "middle", "end"])
    def test_token_with_control_characters_is_refused(self, bad: str, where: str) -> None:
        """CR, LF, NUL, ESC, DEL, whitespace anywhere in the token: ConfigurationError."""
        token = {"start": bad + TOKEN, "middle": TOKEN[:5] + bad + TOKEN[5:],
                 "end": TOKEN + bad}[where]
        with pytest.raises(loghandler.ConfigurationError):
            loghandler.Client(token, url="http://127.0.0.1:1")

    @pytest.mark.parametrize("front", ["handler", "processor"])
    def test_front_ends_refuse_header_injection(self, front: str) -> None:
        """A token that would inject a header is refused by the handler and processor too."""
        cls = loghandler.IngestHandler if front == "handler" else loghandler.IngestProcessor
        with pytest.raises(loghandler.ConfigurationError):
            cls("ds", token=TOKEN + "\r\nX-Evil: 1", url="http://127.0.0.1:1")

    def test_token_from_environment_is_checked_too(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """LOGHANDLER_TOKEN with a trailing newline is refused like the argument."""
        monkeypatch.setenv("LOGHANDLER_TOKEN", TOKEN + "\n")
        with pytest.raises(loghandler.ConfigurationError):
            loghandler.Client(url="http://127.0.0.1:1")

    @pytest.mark.parametrize("url", ["http://example.com", "http://10.1.2.3:8080",
                                     "http://[2001:db8::1]/prefix", "http://localhost.example.com",
                                     "http://127.0.0.1.example.com", "HTTP://example.com"])
    def test_plain_http_to_a_remote_host_is_refused(self, url: str) -> None:
        """http:// to anything but loopback: ConfigurationError, unless allow_http=True."""
        with pytest.raises(loghandler.ConfigurationError, match="http"):
            loghandler.Client(TOKEN, url=url)
        with pytest.raises(loghandler.ConfigurationError):
            loghandler.IngestHandler("ds", token=TOKEN, url=url)
        assert loghandler.Client(TOKEN, url=url, allow_http=True).url  # explicit opt-in

    @pytest.mark.parametrize("url", ["http://127.0.0.1:9", "http://[::1]:9", "http://localhost:9",
                                     "https://example.com"])
    def test_loopback_http_and_https_are_accepted(self, url: str) -> None:
        """Loopback over http and anything over https need no opt-in."""
        assert loghandler.Client(TOKEN, url=url).url == url


def _self_signed(tmp_path: Path) -> ssl.SSLContext:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a self-signed certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


class TestTls:
    def test_no_way_to_switch_verification_off_by_accident(self) -> None:
        """Neither the Client nor the handler takes verify=False quietly."""
        with pytest.raises(TypeError):
            loghandler.Client(TOKEN, url="https://127.0.0.1:1", verify=False)  # type: ignore[call-arg]
        with pytest.raises(loghandler.ConfigurationError):
            loghandler.IngestHandler("ds", token=TOKEN, url="https://127.0.0.1:1", verify=False)

    def test_self_signed_certificate_is_refused(self, tmp_path: Path) -> None:
        """https to a server with an untrusted certificate: TransportError, no request sent."""
        with FaultServer(ssl_context=_self_signed(tmp_path)) as srv:
            client = loghandler.Client(TOKEN, url=f"https://127.0.0.1:{srv.port}", timeout=5)
            with pytest.raises(loghandler.TransportError, match=r"TLS|certificate|SSL") as info:
                client.ingest("ds", [{"id": 1}])
            assert TOKEN not in str(info.value)
            assert srv.requests == [] and srv.stored() == []

    def test_https_to_a_plain_server_fails(self) -> None:
        """https to a server speaking plain HTTP: TransportError, nothing stored."""
        with FaultServer() as srv:
            client = loghandler.Client(TOKEN, url=f"https://127.0.0.1:{srv.port}", timeout=5)
            with pytest.raises(loghandler.TransportError):
                client.ingest("ds", [{"id": 1}])
            assert srv.stored() == []


class TestSizeBounds:
    @pytest.mark.parametrize("compression", [None, "gzip"])
    def test_request_bodies_never_exceed_max_batch_bytes(self, compression: Any) -> None:
        """The receiver never sees a body (as sent, or decoded) over max_batch_bytes; an event
        bigger than that is dropped_too_large without being sent."""
        limit = 4096
        with FaultServer() as srv:
            front = Front("handler", srv, max_batch_bytes=limit, compression=compression)
            try:
                for i in range(300):
                    front.emit(i, padding="p" * (i % 200))
                front.emit(10_000, blob="b" * (2 * limit))
                assert not front.flush(10)
                s = front.stats()
            finally:
                front.close(timeout=1)
            assert s.dropped_too_large == 1 and s.delivered == 300
            assert len(srv.requests) > 10
            assert max(r.body_bytes for r in srv.requests) <= limit
            assert max(r.wire_bytes for r in srv.requests) <= limit
            assert 10_000 not in srv.stored()
            check_accounting(s, srv)

    def test_huge_error_answer_is_bounded(self, capfd: pytest.CaptureFixture[str]) -> None:
        """A 3 MB error answer: read only in part; the stderr line, the exception and its body
        stay short."""
        errors: list[BaseException] = []
        huge = status(500, {"message": "m" * 3_000_000})
        with FaultServer([huge]) as srv:
            front = Front("handler", srv, max_retries=0, on_error=errors.append)
            try:
                for i in range(10):
                    front.emit(i)
                assert not front.flush(10)
                s = front.stats()
            finally:
                front.close(timeout=1)
            assert s.failed_retries_exhausted == 10
            check_accounting(s, srv)
        lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("loghandler:")]
        assert len(lines) == 1 and len(lines[0]) < 2000, [len(x) for x in lines]
        assert len(errors) == 1
        assert len(str(errors[0])) < 3000 and len(repr(errors[0].body)) < 10_000  # type: ignore[attr-defined]
