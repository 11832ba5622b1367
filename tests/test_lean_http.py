"""The lean exchange of the ingest POST (``_wire/lean.py``) against a scripted HTTP/1.1 peer on
loopback: what it writes, what answers it reads, and how it fails (cut, oversized, slow,
closed while idle, TLS), beside urllib3's way (``LOGHANDLER_LEAN_HTTP=0``) where both must
behave alike."""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import self_signed_certificate

from loghandler import Client, TransportError

TOKEN = "xaat-LEANSECRET-5e1d"
PATH = "/v1/datasets/d/ingest"
BODY = b'[{"message":"hello"}]'
Script = Callable[[socket.socket, int, "Peer"], None]


class Peer:
    """A loopback server running ``script(conn, n, peer)`` on its n-th connection; it keeps
    each request it read (``requests``: head, body)."""

    def __init__(self, script: Script, context: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.context = context
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.context else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            n = self.connections
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, n), daemon=True).start()

    def _serve(self, conn: socket.socket, n: int) -> None:
        try:
            conn.settimeout(10)
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            self.script(conn, n, self)
        except OSError:
            pass
        finally:
            conn.close()

    def read(self, conn: socket.socket) -> bool:
        """Read one request (Content-Length bodies only); False at the end of the connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            body += chunk
        self.requests.append((head, body))
        return True

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def ok(body: bytes = b'{"ingested":1}', *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}",
            *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def serving(*answers: bytes) -> Script:
    """Answer each request with the next of ``answers`` (the last repeats), on any
    connection."""
    def script(conn: socket.socket, n: int, peer: Peer) -> None:
        while peer.read(conn):
            conn.sendall(answers[min(len(peer.requests) - 1, len(answers) - 1)])
    return script


@pytest.fixture(params=["lean", "urllib3"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of sending an ingest POST, for what they must do alike."""
    monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1" if request.param == "lean" else "0")
    return str(request.param)


@pytest.fixture
def peer_of() -> Iterator[Callable[..., Peer]]:
    peers: list[Peer] = []

    def make(script: Script, context: ssl.SSLContext | None = None) -> Peer:
        peers.append(Peer(script, context))
        return peers[-1]

    yield make
    for p in peers:
        p.close()


def client_for(peer: Peer, timeout: float = 5.0) -> Client:
    return Client(TOKEN, url=peer.url, timeout=timeout)


class TestExchange:
    def test_the_request_as_written_and_its_answer(self, peer_of: Callable[..., Peer],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")
        peer = peer_of(serving(ok(b'{"ingested":1}', "x-REQUEST-id: r-1", "Retry-After: 3")))
        with client_for(peer) as client:
            answer = client.send("POST", PATH, BODY)
            again = client.send("POST", PATH, BODY + b" ")
        assert (answer.status, answer.body, answer.complete) == (200, {"ingested": 1}, True)
        assert answer.headers.get("X-Request-Id") == "r-1"  # looked up in any case
        assert answer.headers["retry-after"] == "3"
        assert again.status == 200
        head, body = peer.requests[0]
        lines = head.split(b"\r\n")
        assert lines[0] == b"POST " + PATH.encode() + b" HTTP/1.1"
        assert f"Host: 127.0.0.1:{peer.port}".encode() in lines
        assert f"Authorization: Bearer {TOKEN}".encode() in lines
        assert b"Content-Type: application/json" in lines
        assert f"Content-Length: {len(BODY)}".encode() in lines
        assert body == BODY
        assert peer.requests[1][1] == BODY + b" "
        assert peer.connections == 1  # kept alive

    def test_chunked_answer(self, way: str, peer_of: Callable[..., Peer]) -> None:
        chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5;ext=1\r\n{\"ing\r\n9\r\nested\":7}\r\n0\r\nX-Trailer: t\r\n\r\n")
        peer = peer_of(serving(chunked))
        with client_for(peer) as client:
            first = client.send("POST", PATH, BODY)
            second = client.send("POST", PATH, BODY)
        assert first.body == second.body == {"ingested": 7}
        assert peer.connections == 1

    def test_interim_answer_is_skipped(self, way: str, peer_of: Callable[..., Peer]) -> None:
        peer = peer_of(serving(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"ingested":2}')))
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).body == {"ingested": 2}

    def test_a_redirect_is_an_answer_never_followed(self, way: str,
                                                    peer_of: Callable[..., Peer]) -> None:
        peer = peer_of(serving(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /elsewhere\r\n"
                               b"Content-Length: 0\r\n\r\n"))
        with client_for(peer) as client:
            answer = client.send("POST", PATH, BODY)
        assert (answer.status, answer.headers.get("location")) == (307, "/elsewhere")
        assert len(peer.requests) == 1

    def test_gzip_answer_is_decoded(self, way: str, peer_of: Callable[..., Peer]) -> None:
        packed = gzip.compress(b'{"ingested":4}')
        peer = peer_of(serving(ok(packed, "Content-Encoding: gzip")))
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).body == {"ingested": 4}

    def test_connection_close_opens_a_new_one(self, way: str,
                                              peer_of: Callable[..., Peer]) -> None:
        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if peer.read(conn):
                conn.sendall(ok(b"{}", "Connection: close"))

        peer = peer_of(script)
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).status == 200
            assert client.send("POST", PATH, BODY).status == 200
        assert peer.connections == 2 and len(peer.requests) == 2

    def test_answer_over_the_bound_is_cut_and_its_connection_dropped(
            self, way: str, peer_of: Callable[..., Peer]) -> None:
        peer = peer_of(serving(ok(b'"' + b"x" * 5000 + b'"')))
        with client_for(peer) as client:
            answer = client.send("POST", PATH, BODY, max_bytes=100)
            assert not answer.complete and answer.body == '"' + "x" * 99
            assert client.send("POST", PATH, BODY, max_bytes=100_000).complete
        assert peer.connections == 2

    def test_error_answer_read_to_the_error_bound(self, peer_of: Callable[..., Peer],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")
        big = b'"' + b"e" * 3000 + b'"'
        error = ("HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(big)).encode() + big
        peer = peer_of(serving(error, ok(big)))
        with client_for(peer) as client:
            failed = client.send("POST", PATH, BODY, max_bytes=100, max_success_bytes=10_000)
            fine = client.send("POST", PATH, BODY, max_bytes=100, max_success_bytes=10_000)
        assert (failed.status, failed.complete) == (500, False)
        assert (fine.status, fine.complete, fine.body) == (200, True, "e" * 3000)


class TestFaults:
    def test_answer_cut_mid_headers(self, peer_of: Callable[..., Peer],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
        # Lean only: http.client takes the end of the connection for the end of the head,
        # and urllib3's way returns this as a 200 without a body.
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")

        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if peer.read(conn):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Ty")

        peer = peer_of(script)
        with client_for(peer) as client, pytest.raises(TransportError) as info:
            client.send("POST", PATH, BODY)
        assert info.value.sent is True
        assert TOKEN not in str(info.value)
        assert len(peer.requests) == 1  # a head was begun: not sent again

    def test_answer_cut_mid_body(self, way: str, peer_of: Callable[..., Peer]) -> None:
        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if peer.read(conn):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"ing")

        peer = peer_of(script)
        with client_for(peer) as client, pytest.raises(TransportError,
                                                       match="broke while reading") as info:
            client.send("POST", PATH, BODY)
        assert info.value.sent is True

    @pytest.mark.parametrize("head", [
        b"X-Big: " + b"b" * 200_000 + b"\r\n",  # one header longer than the whole bound
        b"".join(b"X-%d: v\r\n" % i for i in range(150)),  # more headers than allowed
    ], ids=["long", "many"])
    def test_oversized_head(self, head: bytes, peer_of: Callable[..., Peer],
                            monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")

        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if peer.read(conn):
                conn.sendall(b"HTTP/1.1 200 OK\r\n" + head)  # and never the empty line
                peer.stop.wait(10)

        peer = peer_of(script)
        started = time.monotonic()
        with client_for(peer, timeout=8) as client, pytest.raises(
                TransportError, match=r"longer than|more than 100 headers") as info:
            client.send("POST", PATH, BODY)
        assert time.monotonic() - started < 4  # told by the bound, not by the deadline
        assert info.value.sent is True

    @pytest.mark.parametrize("length", ["1²", "-1", "5, 6", "x"])
    def test_a_content_length_that_is_no_number(self, length: str,
                                                peer_of: Callable[..., Peer],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")
        answer = f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n{{}}".encode("latin-1")
        peer = peer_of(serving(answer))
        with client_for(peer) as client, pytest.raises(TransportError, match="Content-Length"):
            client.send("POST", PATH, BODY)

    def test_not_http(self, peer_of: Callable[..., Peer],
                      monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")
        peer = peer_of(serving(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"))
        with client_for(peer) as client, pytest.raises(TransportError, match="not HTTP"):
            client.send("POST", PATH, BODY)

    def test_closed_while_idle_is_sent_again_once(self, way: str,
                                                  peer_of: Callable[..., Peer]) -> None:
        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if n == 0:
                # Answers one request, then reads the next and closes, as a service whose
                # idle timeout ends a connection just as a request goes out on it.
                if peer.read(conn):
                    conn.sendall(ok())
                    peer.read(conn)
                return
            serving(ok(b'{"ingested":9}'))(conn, n, peer)

        peer = peer_of(script)
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).status == 200
            assert client.send("POST", PATH, BODY).body == {"ingested": 9}
        assert peer.connections == 2 and len(peer.requests) == 3

    def test_closed_long_before_the_next_request_is_sent_again_once(
            self, way: str, peer_of: Callable[..., Peer]) -> None:
        """The service closed a kept-alive connection while it lay idle, well before the next
        request (urllib3 polls for that before lending it; the lean way lends it unpolled
        and sends again on a new connection): the request is delivered, once."""
        closed = threading.Event()

        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if n == 0:
                if peer.read(conn):
                    conn.sendall(ok())
                conn.shutdown(socket.SHUT_RDWR)
                closed.set()
                return
            serving(ok(b'{"ingested":9}'))(conn, n, peer)

        peer = peer_of(script)
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).status == 200
            assert closed.wait(5)
            assert client.send("POST", PATH, BODY).body == {"ingested": 9}
        assert peer.connections == 2
        assert [body for _, body in peer.requests] == [BODY, BODY]

    def test_what_a_service_wrote_before_an_idle_close_is_not_an_answer(
            self, way: str, peer_of: Callable[..., Peer], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A connection given back longer ago than ``FRESH`` is looked at before it is lent
        (as urllib3 does): the 408 a service wrote as it closed it while idle is not read as
        the next request's answer."""
        from loghandler._wire import watchdog

        monkeypatch.setattr(watchdog, "FRESH", 0.0)  # every kept-alive connection is looked at
        answered, closed = threading.Event(), threading.Event()

        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if n == 0:
                if peer.read(conn):
                    conn.sendall(ok())
                answered.wait(5)  # the connection is back in the pool, idle
                conn.sendall(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                             b"Content-Length: 0\r\n\r\n")
                conn.shutdown(socket.SHUT_WR)  # still reading: the 408 stays readable
                closed.set()
                peer.read(conn)
                return
            serving(ok(b'{"ingested":9}'))(conn, n, peer)

        peer = peer_of(script)
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).status == 200
            answered.set()
            assert closed.wait(5)  # written: on loopback, in this end's buffer already
            answer = client.send("POST", PATH, BODY)
            assert (answer.status, answer.body) == (200, {"ingested": 9})
        assert peer.connections == 2
        assert [body for _, body in peer.requests] == [BODY, BODY]

    def test_closed_again_on_the_new_connection_is_an_error(
            self, way: str, peer_of: Callable[..., Peer]) -> None:
        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if peer.read(conn) and n == 0:
                conn.sendall(ok())
                peer.read(conn)

        peer = peer_of(script)
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).status == 200
            with pytest.raises(TransportError) as info:
                client.send("POST", PATH, BODY)
        assert info.value.sent is True
        assert peer.connections == 2 and len(peer.requests) == 3  # sent again once only

    @pytest.mark.parametrize(("way", "where"), [
        ("lean", "head"), ("lean", "body"), ("urllib3", "body"),
        # Not urllib3's way with a trickling head: when the watchdog ends it, http.client
        # takes the end of the connection for the end of the head, and the answer is a 200.
    ], indirect=["way"])
    def test_slow_answer_ends_at_the_deadline(self, way: str, where: str,
                                              peer_of: Callable[..., Peer]) -> None:
        def script(conn: socket.socket, n: int, peer: Peer) -> None:
            if not peer.read(conn):
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\n" if where == "head" else
                         b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            for _ in range(200):  # one byte at a time: each read is quick, the whole is not
                if peer.stop.wait(0.05):
                    return
                conn.sendall(b"x" if where == "body" else b"X-a: b\r\n")

        peer = peer_of(script)
        started = time.monotonic()
        with client_for(peer, timeout=0.6) as client, pytest.raises(TransportError,
                                                                    match="within") as info:
            client.send("POST", PATH, BODY)
        assert time.monotonic() - started < 5
        assert info.value.sent is True


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path)


class TestTls:
    def test_an_untrusted_certificate_is_refused(self, certificate: tuple[Path, Path],
                                                 peer_of: Callable[..., Peer],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*certificate)
        peer = peer_of(serving(ok()), context)
        with client_for(peer) as client, pytest.raises(TransportError, match="TLS") as info:
            client.send("POST", PATH, BODY)
        assert info.value.sent is False
        assert peer.requests == []  # the request (and its token) never got through

    def test_a_trusted_certificate_carries_the_exchange(self, certificate: tuple[Path, Path],
                                                        peer_of: Callable[..., Peer],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOGHANDLER_LEAN_HTTP", "1")
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))  # OpenSSL's default trust
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*certificate)
        peer = peer_of(serving(ok(b'{"ingested":3}')), context)
        with client_for(peer) as client:
            assert client.send("POST", PATH, BODY).body == {"ingested": 3}
            assert client.send("POST", PATH, BODY).body == {"ingested": 3}
        assert peer.connections == 1 and [b for _, b in peer.requests] == [BODY, BODY]
