"""The disk spool: crash-safe files, bounded size, replay across processes, damaged files."""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import balanced, body_events, closed_port_url, wait_until
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

import loghandler
from loghandler._engine import spool as spool_mod
from loghandler._engine import spoolfiles, spoolreplay
from loghandler._engine.ledger import Count
from loghandler._engine.spool import Spool
from loghandler._engine.spoolfiles import SpoolCorrupt, decode_file, encode_file
from loghandler.testing import MemoryTransport

DATASET = "orders-prod"
TOKEN = "xaat-spool-secret-81d2"
FAST = {"flush_interval": 0.05, "retry_backoff": 0.01, "max_retries": 1, "shutdown_timeout": 1}

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes and signals")


# --------------------------------------------------------------------------- helpers

class Receiver:
    """Records the ``id`` of every event that arrives, in arrival order.

    ``script`` holds statuses for the next requests (then 200); events count only on a 200.
    With ``gate`` set, a request is recorded on arrival and then held until the gate opens:
    the worst case for duplicates (the service has the batch, the client never hears it).
    """

    def __init__(self, server: HTTPServer) -> None:
        self.url = server.url_for("").rstrip("/")
        self.cond = threading.Condition()
        self.ids: list[Any] = []
        self.requests = 0
        self.script: list[int] = []
        self.gate: threading.Event | None = None
        self.held = 0
        server.expect_request(f"/v1/datasets/{DATASET}/ingest", method="POST") \
            .respond_with_handler(self._handle)

    def _handle(self, request: Request) -> Response:
        batch = body_events(request.get_data(), request.headers)
        with self.cond:
            self.requests += 1
            status = self.script.pop(0) if self.script else 200
            if status == 200:
                self.ids.extend(e.get("id") for e in batch)
            gate = self.gate
            if gate is not None:
                self.held += 1
            self.cond.notify_all()
        if gate is not None:
            gate.wait(30)
        return Response("{}", status, content_type="application/json")

    def wait(self, predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    rec = Receiver(server)
    try:
        yield rec
    finally:
        if rec.gate is not None:
            rec.gate.set()  # a held request must end, or stop() waits for it
        server.clear()
        server.stop()


def parts(prefix: str, n: int, start: int = 0, pad: int = 0) -> list[bytes]:
    return [json.dumps({"id": f"{prefix}{i}", "pad": "x" * pad}, separators=(",", ":")).encode()
            for i in range(start, start + n)]


def prefill(spool_dir: Path, files: int, per_file: int, prefix: str = "s") -> list[str]:
    """Spool ``files`` files of ``per_file`` events; returns their ids, oldest first."""
    spool = Spool(spool_dir, DATASET)
    for f in range(files):
        spool.write(parts(prefix, per_file, start=f * per_file))
    return [f"{prefix}{i}" for i in range(files * per_file)]


def spool_files(spool_dir: Path, suffix: str = ".spool") -> list[Path]:
    return sorted(p for p in spool_dir.rglob("*") if p.is_file() and p.name.endswith(suffix))


def spooled_ids(spool_dir: Path) -> list[str]:
    return [json.loads(p)["id"] for f in spool_files(spool_dir)
            for p in decode_file(f.read_bytes())]


def left_in_spool(spool_dir: Path) -> list[str]:
    return [p.name for p in spool_dir.rglob("*")
            if p.name.endswith(".spool") or ".claim-" in p.name]


def make_shipper(url: str | None, spool_dir: Path, **options: Any) -> loghandler.Shipper:
    """A shipper with a spool, to ``url`` (None: ``transport=`` in ``options``)."""
    client = None if url is None else loghandler.Client(token=TOKEN, url=url)
    return loghandler.Shipper(client, DATASET, spool_dir=str(spool_dir), **{**FAST, **options})


def claimed(spool_dir: Path) -> list[str]:
    """Files claimed by a replay in progress."""
    return [p.name for p in spool_dir.rglob("*") if ".claim-" in p.name]


CHILD = r"""
import atexit, json, logging, os, sys, time
# Registered before loghandler's exit hook, so it runs after it (atexit is LIFO): final stats,
# and when loghandler's exit hook was done ("hooks_done": what its deadline bounds, without the
# parent's own wait to be scheduled on a busy host).
atexit.register(lambda: print(json.dumps({**h.stats().__dict__, "hooks_done": time.time()}),
                              flush=True))
import loghandler
cfg = json.loads(sys.argv[1])
h = loghandler.IngestHandler(cfg["dataset"], url=cfg["url"], spool_dir=cfg["spool_dir"],
                             **cfg["options"])
log = logging.getLogger("spool-child")
log.propagate = False
log.setLevel(logging.INFO)
log.addHandler(h)
for i in range(cfg["n"]):
    log.info("event %d", i, extra={"id": cfg["prefix"] + str(i)})
if cfg.get("flush"):
    h.flush(cfg["flush"])  # a request is in flight when the script ends
if cfg.get("drain"):
    from loghandler._engine.spoolfiles import dataset_dir
    path = dataset_dir(cfg["spool_dir"], cfg["dataset"])
    def left():
        return [n for n in os.listdir(path) if n.endswith(".spool") or ".claim-" in n]
    deadline = time.monotonic() + cfg["drain"]
    while left() and time.monotonic() < deadline:
        time.sleep(0.02)
    h.flush(5)
print(json.dumps({"end": time.time()}), flush=True)
"""


def child(url: str, spool_dir: Path, n: int, prefix: str, drain: float = 0, flush: float = 0,
          **options: Any) -> subprocess.Popen[str]:
    cfg = {"dataset": DATASET, "url": url, "spool_dir": str(spool_dir), "n": n,
           "prefix": prefix, "drain": drain, "flush": flush, "options": {**FAST, **options}}
    env = {**os.environ, "LOGHANDLER_TOKEN": TOKEN}
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 40) -> tuple[dict[str, Any], str]:
    """Wait for a child: ({"end": time its script ended, **its final stats, "hooks_done"},
    its stderr)."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    end, stats = (json.loads(line) for line in out.strip().splitlines()[-2:])
    return {**end, **stats}, err


# --------------------------------------------------------------------------- file format

class TestFileFormat:
    def test_round_trip(self):
        """A file gives back exactly the events written, in order."""
        data = parts("r", 5, pad=3)
        assert decode_file(encode_file(data)) == data

    @pytest.mark.parametrize("damage", ["truncated", "crc", "garbage", "empty", "extra",
                                        "count"])
    def test_damage_is_detected(self, damage):
        """Truncation, a flipped byte, garbage, an empty file and a wrong count are all caught."""
        good = encode_file(parts("d", 4))
        header, payload = good.split(b"\n", 1)
        bad = {
            "truncated": good[:-3],
            "crc": header + b"\n" + payload.replace(b"d1", b"d7"),
            "garbage": b"\x00\xffnot a spool file at all\n" * 3,
            "empty": b"",
            "extra": good + b"{}\n",
            "count": header.replace(b" 4 ", b" 5 ") + b"\n" + payload,
        }[damage]
        with pytest.raises(SpoolCorrupt):
            decode_file(bad)


# --------------------------------------------------------------------------- files on disk

class TestFiles:
    def test_dataset_name_never_reaches_a_path(self, tmp_path):
        """A hostile dataset name lands in a hashed directory inside spool_dir."""
        spool = Spool(tmp_path / "sp", "../../escape/" + DATASET)
        spool.write(parts("a", 3))
        assert Path(spool.path).parent == tmp_path / "sp"
        assert Path(spool.path).name.startswith("ds-")
        assert not (tmp_path / "escape").exists()
        names = [p.name for p in tmp_path.rglob("*")]
        assert not any(DATASET in n or "escape" in n for n in names)
        assert (Path(spool.path) / "DATASET").read_text() == "../../escape/" + DATASET + "\n"

    def test_modes_with_a_permissive_umask(self, tmp_path):
        """Files are 0600 and the directories 0700 even under umask 000."""
        old = os.umask(0)
        try:
            spool = Spool(tmp_path / "sp", DATASET)
            spool.write(parts("a", 3))
        finally:
            os.umask(old)
        assert stat.S_IMODE((tmp_path / "sp").stat().st_mode) == 0o700
        assert stat.S_IMODE(os.stat(spool.path).st_mode) == 0o700
        for f in Path(spool.path).iterdir():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f

    def test_names_sort_in_creation_order(self, tmp_path):
        """Files written one after another sort by name in the order they were written."""
        spool = Spool(tmp_path, DATASET)
        for i in range(20):
            spool.write(parts(f"w{i}-", 1))
        assert spooled_ids(tmp_path) == [f"w{i}-0" for i in range(20)]

    def test_large_write_is_split_into_batch_sized_files(self, tmp_path):
        """One big write becomes several files of at most max_file_events events."""
        spool = Spool(tmp_path, DATASET, max_file_events=10)
        spool.write(parts("b", 35))
        files = spool_files(tmp_path)
        assert [len(decode_file(f.read_bytes())) for f in files] == [10, 10, 10, 5]
        assert spooled_ids(tmp_path) == [f"b{i}" for i in range(35)]

    def test_unusable_spool_dir_is_a_configuration_error(self, tmp_path):
        """A spool_dir that is a file is refused at construction, naming the option."""
        (tmp_path / "f").write_text("x")
        with pytest.raises(loghandler.ConfigurationError, match="spool_dir"):
            Spool(tmp_path / "f", DATASET)

    def test_empty_spool_costs_one_stat(self, tmp_path, monkeypatch):
        """Once found empty, the spool is not scanned again until its directory changes."""
        spool = Spool(tmp_path, DATASET)
        assert spool.claim_next() is None
        scans = []
        monkeypatch.setattr(spool, "_scan", lambda: scans.append(1) or [])
        assert not spool.pending()
        Spool(tmp_path, DATASET).write(parts("o", 1))  # another writer, e.g. another process
        assert spool.pending()
        assert scans == []

    def test_has_waiting_sees_files_and_claims(self, tmp_path):
        """has_waiting() is True while a file waits or is claimed, False once all are gone."""
        spool = Spool(tmp_path, DATASET)
        assert not spool.has_waiting()
        spool.write(parts("w", 1))
        assert spool.has_waiting()
        _name, claim = spool.claim_next()
        assert spool.has_waiting()
        os.unlink(claim)
        spool.release(claim)
        assert not spool.has_waiting()


class TestStaleClaims:
    def _claim(self, tmp_path: Path, pid: int, start: str) -> Path:
        spool = Spool(tmp_path, DATASET)
        spool.write(parts("c", 2))
        (f,) = spool_files(tmp_path)
        claim = f.with_name(f"{f.name}.claim-{pid}-{start}")
        f.rename(claim)
        return claim

    def test_claim_of_a_live_process_is_respected(self, tmp_path):
        """A file claimed by a running process (pid and start time match) is not taken."""
        parent = os.getppid()
        info = spoolfiles.proc_info(parent)
        claim = self._claim(tmp_path, parent, info[1] if info else "0")
        assert Spool(tmp_path, DATASET).claim_next() is None
        assert claim.exists()

    def test_claim_of_a_reused_pid_is_taken_back(self, tmp_path):
        """Same pid, different start time: the claim is stale and the file is replayed."""
        if spoolfiles.proc_info(os.getppid()) is None:
            pytest.skip("no /proc: start times cannot be compared here")
        self._claim(tmp_path, os.getppid(), "1")
        assert Spool(tmp_path, DATASET).claim_next() is not None

    def test_claim_with_our_pid_not_held_is_taken_back(self, tmp_path):
        """A claim named with our pid that we do not hold was left by an earlier process."""
        self._claim(tmp_path, os.getpid(), spoolfiles.own_start())
        assert Spool(tmp_path, DATASET).claim_next() is not None

    def test_old_claim_is_taken_back(self, tmp_path):
        """A claim older than STALE_CLAIM_SECONDS is taken back even if its process lives."""
        parent = os.getppid()
        info = spoolfiles.proc_info(parent)
        claim = self._claim(tmp_path, parent, info[1] if info else "0")
        old = time.time() - spool_mod.STALE_CLAIM_SECONDS - 5
        os.utime(claim, (old, old))
        assert Spool(tmp_path, DATASET).claim_next() is not None


# --------------------------------------------------------------------------- bound

class TestSpoolFull:
    def test_oldest_dropped_and_counted(self, tmp_path, capfd):
        """Over max_spool_bytes the oldest events are deleted, counted, newest kept."""
        limit = 4000
        with make_shipper(closed_port_url(), tmp_path, batch_size=10,
                          max_spool_bytes=limit) as shipper:
            for i in range(100):
                shipper.submit({"id": i, "pad": "y" * 60})
            assert shipper.flush(10) is False
            st = shipper.stats()
        assert st.spooled == 100
        assert st.spool_dropped > 0
        kept = spooled_ids(tmp_path)
        assert len(kept) == st.spooled - st.spool_dropped
        assert kept == list(range(100 - len(kept), 100))  # a contiguous run of the newest
        assert sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file()) <= limit
        lines = [x for x in capfd.readouterr().err.splitlines() if "spool is full" in x]
        assert lines == [f"loghandler: dataset '{DATASET}': the spool is full (max_spool_bytes="
                         "4,000), so its oldest events are deleted (stats().spool_dropped): "
                         "raise max_spool_bytes"]

    def test_single_write_larger_than_the_bound_keeps_its_newest(self, tmp_path):
        """A write bigger than max_bytes alone keeps its newest events and counts the rest."""
        spool = Spool(tmp_path, DATASET, max_bytes=1000)
        dropped = spool.write(parts("big", 100, pad=20))
        kept = spooled_ids(tmp_path)
        assert dropped == 100 - len(kept) > 0
        assert kept == [f"big{i}" for i in range(100 - len(kept), 100)]


# --------------------------------------------------------------------------- replay

class FakeTarget:
    """A ``ReplayTarget`` without HTTP: takes ``accept`` events per call, then nothing."""

    def __init__(self, accept: int = 10**9, stop_after: int = 10**9) -> None:
        self.sent: list[list[bytes]] = []
        self.accept, self.stop_after = accept, stop_after
        self.counts: collections.Counter[Count] = collections.Counter()

    def send(self, parts: list[bytes]) -> list[bytes]:
        self.sent.append(parts)
        taken, self.accept = parts[:self.accept], max(0, self.accept - len(parts))
        return parts[len(taken):]

    def stopping(self) -> bool:
        return len(self.sent) >= self.stop_after

    def count(self, counter: Count, n: int = 1) -> None:
        self.counts[counter] += n

    def progress(self) -> int:
        return sum(len(p) for p in self.sent)


class TestReplayTarget:
    """Spool.replay against a fake target: the narrow protocol, without a shipper."""

    def test_replays_every_file_in_order_in_batch_sized_requests(self, tmp_path):
        """Each file goes out oldest first, cut to the spool's per-request bounds."""
        ids = prefill(tmp_path, files=3, per_file=5)
        spool = Spool(tmp_path, DATASET, max_file_events=2)
        target = FakeTarget()
        spool.replay(target)
        assert [len(p) for p in target.sent] == [2, 2, 1] * 3
        assert [json.loads(e)["id"] for p in target.sent for e in p] == ids
        assert left_in_spool(tmp_path) == []

    def test_a_refused_rest_stays_spooled_and_replay_backs_off(self, tmp_path):
        """What the target returns stays on disk, in order; the next round waits for progress."""
        ids = prefill(tmp_path, files=2, per_file=5)
        spool = Spool(tmp_path, DATASET)
        target = FakeTarget(accept=3)
        spool.replay(target)
        assert len(target.sent) == 1  # stopped at the first file not taken completely
        assert spooled_ids(tmp_path) == ids[3:]
        spool.replay(target)  # no progress since: backing off, nothing sent
        assert len(target.sent) == 1

    def test_stopping_ends_the_round_between_files(self, tmp_path):
        """A closing target gets no further file."""
        ids = prefill(tmp_path, files=3, per_file=4)
        target = FakeTarget(stop_after=1)
        Spool(tmp_path, DATASET).replay(target)
        assert len(target.sent) == 1
        assert spooled_ids(tmp_path) == ids[4:]

    def test_damaged_file_counted_through_the_target(self, tmp_path):
        """A damaged file is quarantined and counted with the target's count()."""
        ids = prefill(tmp_path, files=1, per_file=3)
        (ds_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        (ds_dir / f"{1:020d}-{1:010d}-{0:010d}.spool").write_bytes(b"garbage")
        target = FakeTarget()
        Spool(tmp_path, DATASET).replay(target)
        assert target.counts == {Count.SPOOL_CORRUPT: 1}
        assert [json.loads(e)["id"] for p in target.sent for e in p] == ids


class TestOrder:
    """Issue 48.1: replay follows the order events were submitted, whoever wrote the file and
    whenever (docs/reliability.md, "Disk spool")."""

    def test_files_replay_by_their_first_events_number_not_their_write_time(self, tmp_path):
        """Writes named by a submission number (``seq``) replay in its order, though written
        the other way round; the cut of a large write keeps it per file."""
        spool = Spool(tmp_path, DATASET, max_file_events=4)
        spool.write(parts("e", 6, start=10), seq=10)  # newer events, written first
        spool.write(parts("e", 10, start=0), seq=0)   # the flusher's batch, written last
        target = FakeTarget()
        Spool(tmp_path, DATASET, max_file_events=4).replay(target)
        assert [json.loads(e)["id"] for p in target.sent for e in p] == \
            [f"e{i}" for i in range(16)]

    def test_a_batch_retried_while_callers_spill_replays_first(self, tmp_path, receiver):
        """The service answers 503 while the application logs a burst: the flusher's batch is
        under way (held by the service, then refused) meanwhile, and the application's threads
        spill the newer events that fill the queue (spooled_by_caller); the flusher's batch
        reaches the spool last. Every spooled
        event is delivered later, in the order it was logged (before: file names sorted by
        write time, and newer batches were replayed first: 13 of 24 runs of the issue)."""
        receiver.script = [503] * 100_000
        handler = loghandler.IngestHandler(DATASET, url=receiver.url, token=TOKEN,
                                           spool_dir=str(tmp_path), max_queue_size=1000,
                                           batch_size=500, max_retries=3, retry_backoff=0.2,
                                           flush_interval=0.05, shutdown_timeout=5)
        log = logging.getLogger("order-while-retrying")
        log.propagate = False
        log.addHandler(handler)
        n = 10_000
        receiver.gate = threading.Event()  # the first request is held: the flusher is busy
        try:
            for i in range(500):
                log.warning("event %d", i, extra={"id": i})
            assert receiver.wait(lambda: receiver.held >= 1)
            for i in range(500, n):  # the queue fills: the application's threads spill
                log.warning("event %d", i, extra={"id": i})
            receiver.gate.set()  # 503 (and the same for each retry): the batch is spooled
            assert handler.flush(60) is False
            st = handler.stats()
        finally:
            log.removeHandler(handler)
            handler.close()
        assert (st.submitted, st.spooled, st.dropped) == (n, n, 0), st
        # The case of the issue: the flusher's batch was tried against the 503 while the
        # application's threads spilled.
        assert st.spooled_by_caller > 0 and receiver.requests > 0, st
        assert spooled_ids(tmp_path) == list(range(n))  # files in name order: logged order
        with receiver.cond:
            receiver.script.clear()
        with make_shipper(receiver.url, tmp_path, batch_size=500) as shipper:
            assert receiver.wait(lambda: len(receiver.ids) >= n, timeout=60)
            assert wait_until(lambda: shipper.stats().replayed == n, timeout=20)
        assert receiver.ids == list(range(n))
        assert left_in_spool(tmp_path) == []


class TestReplay:
    def test_dead_service_then_new_process_delivers_exactly_n(self, tmp_path, receiver):
        """Service down: a process spools N events privately at exit; the next delivers N."""
        spool_dir = tmp_path / "spool"
        n = 50
        proc = child(closed_port_url(), spool_dir, n, "a")
        out, err = finish(proc)
        assert out["spooled"] == n
        assert "spooled to" in err and TOKEN not in err
        assert stat.S_IMODE(spool_dir.stat().st_mode) == 0o700
        for path in spool_dir.rglob("*"):
            assert DATASET not in path.name and TOKEN not in path.name
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (0o700 if path.is_dir() else 0o600), path
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes()
        assert sorted(spooled_ids(spool_dir)) == sorted(f"a{i}" for i in range(n))

        out, _ = finish(child(receiver.url, spool_dir, 1, "b", drain=20))
        assert out["replayed"] == n
        counts = collections.Counter(receiver.ids)
        assert counts == collections.Counter([f"a{i}" for i in range(n)] + ["b0"])
        assert [i for i in receiver.ids if i.startswith("a")] == [f"a{i}" for i in range(n)]
        assert left_in_spool(spool_dir) == []

    def test_replay_interleaves_with_new_events(self, tmp_path, receiver, monkeypatch):
        """New events flow between replay rounds; spooled ones keep their order."""
        monkeypatch.setattr(spoolreplay, "ROUND_FILES", 2)
        spooled = prefill(tmp_path, files=6, per_file=20)
        with make_shipper(receiver.url, tmp_path, batch_size=20) as shipper:
            for i in range(100):
                shipper.submit({"id": f"n{i}"})
            assert receiver.wait(lambda: len(receiver.ids) >= 220)
            assert shipper.flush(5)
            # the receiver records a batch before the client hears the 200
            assert wait_until(lambda: shipper.stats().replayed == 120)
            assert shipper.stats().delivered == 100
        got = receiver.ids
        new = [f"n{i}" for i in range(100)]
        assert collections.Counter(got) == collections.Counter([*spooled, *new])
        assert [i for i in got if i.startswith("s")] == spooled
        assert [i for i in got if i.startswith("n")] == new
        assert got.index("n0") < got.index(spooled[-1])  # interleaved, not all spool first
        assert left_in_spool(tmp_path) == []

    def test_unreachable_service_keeps_files_and_releases_claims(self, tmp_path):
        """A failed replay leaves every file as it was, unclaimed, for a later round."""
        prefill(tmp_path, files=2, per_file=5)
        before = {f.name: f.read_bytes() for f in spool_files(tmp_path)}

        def down(request: Any) -> Any:
            raise loghandler.TransportError("connection refused (scripted)")

        transport = MemoryTransport(down)
        # Files wait: the flusher starts with the shipper and replays at once.
        shipper = make_shipper(None, tmp_path, transport=transport)
        try:
            assert wait_until(lambda: transport.requests and not claimed(tmp_path)), \
                "no replay round tried the service and released its claim"
            assert shipper.stats().replayed == 0
        finally:
            shipper.close()
        assert {f.name: f.read_bytes() for f in spool_files(tmp_path)} == before
        assert not claimed(tmp_path)

    def test_partial_delivery_rewrites_the_rest(self, tmp_path):
        """A file half delivered keeps only its undelivered events, still in order."""
        prefill(tmp_path, files=1, per_file=25)
        transport = MemoryTransport([200, 500])
        shipper = make_shipper(None, tmp_path, transport=transport, batch_size=10)
        try:
            assert wait_until(lambda: len(transport.requests) == 2 and not claimed(tmp_path)), \
                "the replay round did not send the file's first two requests"
        finally:
            shipper.close()
        assert [e["id"] for e in transport.events()] == [f"s{i}" for i in range(10)]
        assert spooled_ids(tmp_path) == [f"s{i}" for i in range(10, 25)]

    def test_corrupt_files_quarantined_reported_once(self, tmp_path, receiver, capfd):
        """Damaged files are moved aside, counted and reported once; the rest is replayed."""
        good = prefill(tmp_path, files=3, per_file=10)
        (ds_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        sample = encode_file(parts("bad", 5))
        header, payload = sample.split(b"\n", 1)
        damaged = {
            "truncated": sample[:-7],
            "crc": header + b"\n" + payload.replace(b"bad1", b"bad9"),
            "garbage": os.urandom(200),
            "empty": b"",
        }
        for i, blob in enumerate(damaged.values()):
            # early names: they come first, so a stuck replay would never reach the good ones
            (ds_dir / f"{i + 1:020d}-{1:010d}-{i:010d}.spool").write_bytes(blob)
        with make_shipper(receiver.url, tmp_path) as shipper:
            shipper.submit({"id": "new"})
            assert receiver.wait(lambda: len(receiver.ids) >= 31)
            assert shipper.flush(5)
            # More replay rounds, each seen delivering a file spooled after the last: they pass
            # the damaged names again, and nothing is reported twice.
            later: list[str] = []
            for round_ in range(3):
                later += prefill(tmp_path, files=1, per_file=2, prefix=f"later{round_}-")
                want = set(later)
                assert receiver.wait(lambda want=want: want <= set(receiver.ids)), round_
            st = shipper.stats()
        assert st.spool_corrupt == len(damaged)
        assert collections.Counter(receiver.ids) == collections.Counter([*good, "new", *later])
        assert len(spool_files(tmp_path, ".corrupt")) == len(damaged)
        assert left_in_spool(tmp_path) == []
        err = capfd.readouterr().err
        assert err.count("is damaged") == len(damaged)
        for line in err.splitlines():
            assert re.fullmatch(rf"loghandler: dataset '{DATASET}': spool file \d{{20}}-\d{{10}}-"
                                r"\d{10}\.spool is damaged \(.+\): moved aside as \d{20}-"
                                r"\d{10}-\d{10}\.spool\.corrupt; the other files are replayed",
                                line), line
        for i in range(len(damaged)):
            assert sum(f"{i + 1:020d}-" in line for line in err.splitlines()) == 1


# --------------------------------------------------------------------------- processes

class TestProcesses:
    def test_two_processes_replay_each_event_once(self, tmp_path, receiver):
        """Two processes draining one spool directory deliver every event exactly once."""
        spooled = prefill(tmp_path, files=30, per_file=20)
        procs = [child(receiver.url, tmp_path, 1, f"p{k}-", drain=30) for k in (1, 2)]
        outs = [finish(p)[0] for p in procs]
        assert sum(o["replayed"] for o in outs) == len(spooled)
        counts = collections.Counter(receiver.ids)
        assert counts == collections.Counter([*spooled, "p1-0", "p2-0"])
        assert left_in_spool(tmp_path) == []

    def test_sigkill_during_replay_loses_nothing_spooled(self, tmp_path, receiver):
        """SIGKILL mid-replay: the next process re-sends the claimed file; duplicates are at
        most the batch in flight, and only the killed process's in-memory events are lost."""
        batch = 10
        spooled = prefill(tmp_path, files=3, per_file=batch)
        receiver.gate = threading.Event()
        victim = child(receiver.url, tmp_path, 1, "a", drain=30, batch_size=batch)
        try:
            assert receiver.wait(lambda: receiver.held >= 1)
            assert any(f".claim-{victim.pid}-" in p.name for p in tmp_path.rglob("*"))
            victim.send_signal(signal.SIGKILL)
        finally:
            victim.kill()
            victim.communicate(timeout=10)
        assert victim.returncode == -signal.SIGKILL
        with receiver.cond:
            receiver.gate.set()
            receiver.gate = None

        finish(child(receiver.url, tmp_path, 1, "b", drain=30, batch_size=batch))
        counts = collections.Counter(receiver.ids)
        assert all(counts[i] >= 1 for i in spooled), "a spooled event was lost"
        duplicates = sum(c - 1 for c in counts.values())
        assert 0 < duplicates <= batch
        assert "a0" not in counts  # it was only in the killed process's memory
        assert counts["b0"] == 1
        assert left_in_spool(tmp_path) == []


class TestBurstWhileDown:
    def test_a_burst_at_full_speed_goes_to_disk_not_dropped(self, tmp_path):
        """README: with a spool, the queue spills to disk as fast as the application logs while
        the service is down. 20,000 events in a tight loop into a 1,000-event queue: before,
        19,000 were dropped (the flusher noticed the pressure every 50 ms; the queue fills in
        10 ms); then the flusher was woken as the queue fills and spilled several batches a
        step, and still dropped some when it got less CPU than the caller (247 with both cores
        busy); now a thread that finds the queue full while the flusher is behind writes the
        oldest batch itself (issue 35.1): none is dropped."""
        handler = loghandler.IngestHandler(DATASET, url=closed_port_url(), token=TOKEN,
                                           spool_dir=str(tmp_path), max_queue_size=1000,
                                           shutdown_timeout=5)
        log = logging.getLogger("burst-test")
        log.propagate = False
        log.addHandler(handler)
        try:
            info = log.warning
            for i in range(20_000):
                info("event %d", i, extra={"id": i})
            assert handler.flush(30) is False  # nothing was delivered
            st = handler.stats()
        finally:
            log.removeHandler(handler)
            handler.close()
        assert st.submitted == 20_000
        assert st.dropped_queue_full == 0, st  # before: 19,000, then up to 247 under load
        assert st.spooled == 20_000
        assert sorted(spooled_ids(tmp_path)) == list(range(20_000))


class TestBurstWithUsersSettings:
    """Issue 35.1: with spool_dir, a full queue never drops, whatever the settings a user picks
    (retries, overflow, a queue smaller than two batches) and however little CPU the flusher
    gets: when the flusher is behind, the thread whose event found the queue full writes the
    oldest batch to the spool itself (docs/reliability.md, "A burst with a spool")."""

    def burst(self, tmp_path: Path, n: int = 20_000, **options: Any) -> loghandler.Stats:
        handler = loghandler.IngestHandler(DATASET, url=closed_port_url(), token=TOKEN,
                                           spool_dir=str(tmp_path), shutdown_timeout=5,
                                           **options)
        log = logging.getLogger("burst-users-settings")
        log.propagate = False
        log.addHandler(handler)
        try:
            info = log.warning
            for i in range(n):
                info("event %d", i, extra={"id": i})
            # Waits until every event is settled (spooled: never delivered), 60 s at most.
            assert handler.flush(60) is False
            return handler.stats()
        finally:
            log.removeHandler(handler)
            handler.close()

    @pytest.mark.parametrize("overflow", ["drop_oldest", "drop_newest", "block"])
    def test_the_issues_settings_drop_nothing(self, tmp_path: Path, overflow: str):
        """Connection refused, max_queue_size=1000, batch_size=500, max_retries=1, 20,000
        events in a tight loop: before, 9,300-14,000 dropped_queue_full (7,750 with both cores
        busy); now every one is on disk, once."""
        st = self.burst(tmp_path, max_queue_size=1000, batch_size=500, overflow=overflow,
                        max_retries=1)
        assert (st.submitted, st.dropped, st.spooled, st.queued) == (20_000, 0, 20_000, 0), st
        assert sorted(spooled_ids(tmp_path)) == list(range(20_000))
        assert st.spooled_by_caller <= st.spooled

    def test_a_failing_spool_drops_counted_and_told(self, tmp_path: Path,
                                                    capfd: pytest.CaptureFixture[str]):
        """The spool's directory replaced by a file: writes fail, the full queue drops (the
        overflow policy), every event is counted, and the failure is told once."""
        handler = loghandler.IngestHandler(DATASET, url=closed_port_url(), token=TOKEN,
                                           spool_dir=str(tmp_path), shutdown_timeout=2,
                                           max_queue_size=100, batch_size=50, max_retries=0)
        (ds_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        for f in ds_dir.iterdir():
            f.unlink()
        ds_dir.rmdir()
        ds_dir.write_text("not a directory")
        log = logging.getLogger("burst-failing-spool")
        log.propagate = False
        log.addHandler(handler)
        try:
            for i in range(5_000):
                log.warning("event %d", i, extra={"id": i})
            assert handler.flush(30) is False
            st = handler.stats()
        finally:
            log.removeHandler(handler)
            handler.close()
        assert st.submitted == 5_000 and st.spooled == 0 and st.queued == 0
        assert st.dropped_queue_full + st.failed == 5_000, st
        err = capfd.readouterr().err
        assert err.count("could not write to the spool") == 1, err

    def test_what_ships_applies_to_what_the_caller_spools(self, tmp_path: Path):
        """Events spooled by the application's threads are shaped as the flusher shapes them:
        a repeat policy still suppresses and summarizes, secrets are still scrubbed, and the
        account holds (repeats are counted, summaries added)."""
        handler = loghandler.IngestHandler(DATASET, url=closed_port_url(), token=TOKEN,
                                           spool_dir=str(tmp_path), shutdown_timeout=5,
                                           max_queue_size=200, batch_size=100, max_retries=0,
                                           repeat_limit=3)
        log = logging.getLogger("burst-shaped")
        log.propagate = False
        log.addHandler(handler)
        try:
            for i in range(10_000):
                log.warning("payment failed", extra={"password": "hunter2-secret", "id": i})
            handler.flush(30)
            st = handler.stats()
        finally:
            log.removeHandler(handler)
            handler.close()
        st = handler.stats()
        assert st.dropped_queue_full == 0 and st.queued == 0, st
        assert balanced(st)
        events = [json.loads(p) for f in spool_files(tmp_path) for p in decode_file(f.read_bytes())]
        assert len(events) == st.spooled
        raw = b"".join(f.read_bytes() for f in spool_files(tmp_path))
        assert b"hunter2-secret" not in raw
        # Three of the repeated event, each window's summary, and nothing else.
        assert 3 <= len([e for e in events if e.get("message") == "payment failed"]) <= 3 * (
            1 + len([e for e in events if e.get("message") != "payment failed"]))
        assert st.dropped_repeat >= 10_000 - st.spooled


class TestCallerNeverSyncs:
    """Issue 48.2: a logging call that spills a batch writes it without waiting on the disk's
    sync (a median of 10-14 ms on ext4, up to 1.3 s in a burst); the flusher makes it
    durable, and ``stats().spool_unsynced`` says what is on disk and not yet synced."""

    def test_the_callers_write_is_synced_by_the_flusher(self, tmp_path: Path, receiver: Any,
                                                        monkeypatch: pytest.MonkeyPatch):
        main = threading.get_ident()
        dsync = getattr(os, "O_DSYNC", 0)
        lock = threading.Lock()
        synced_on_main: list[str] = []  # spool files synced on the application's thread
        created_on_main: list[str] = []  # ... and spool temporaries it created
        fsynced: set[int] = set()  # inodes synced by any other thread
        real_open, real_fsync = os.open, os.fsync

        def spy_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
            fd = real_open(path, flags, *args, **kw)
            if threading.get_ident() == main and str(path).endswith(".tmp"):
                with lock:
                    created_on_main.append(str(path))
                    if dsync and flags & dsync:
                        synced_on_main.append(str(path))
            elif dsync and flags & dsync:  # written synced by another thread (the flusher)
                with lock:
                    fsynced.add(os.fstat(fd).st_ino)
            return fd

        def spy_fsync(fd: int) -> None:
            real_fsync(fd)
            if threading.get_ident() == main:
                synced_on_main.append(f"fd {fd}")
            else:
                with lock:
                    fsynced.add(os.fstat(fd).st_ino)

        monkeypatch.setattr(os, "open", spy_open)
        monkeypatch.setattr(os, "fsync", spy_fsync)
        # The service holds the flusher's first request, then refuses every one: the queue
        # fills whatever the host's timing, and the application's threads spill (with a closed
        # port the flusher could keep up on a loaded host, and no caller wrote at all).
        receiver.script = [503] * 100_000
        receiver.gate = threading.Event()
        handler = loghandler.IngestHandler(DATASET, url=receiver.url, token=TOKEN,
                                           spool_dir=str(tmp_path), max_queue_size=1000,
                                           batch_size=500, max_retries=1, retry_backoff=0.2,
                                           flush_interval=0.05, shutdown_timeout=5)
        log = logging.getLogger("caller-never-syncs")
        log.propagate = False
        log.addHandler(handler)
        del synced_on_main[:], created_on_main[:]  # the construction's own (its DATASET file)
        try:
            for i in range(500):
                log.warning("event %d", i, extra={"id": i})
            assert receiver.wait(lambda: receiver.held >= 1)
            for i in range(500, 20_000):
                log.warning("event %d", i, extra={"id": i})
            receiver.gate.set()
            assert handler.flush(60) is False
            assert wait_until(lambda: handler.stats().spool_unsynced == 0)
            st = handler.stats()
            inodes = {f.stat().st_ino for f in spool_files(tmp_path)}
        finally:
            log.removeHandler(handler)
            handler.close()
        assert st.spooled == 20_000 and st.dropped == 0, st
        assert created_on_main and st.spooled_by_caller > 0, st  # the application's writes
        assert synced_on_main == []  # before: each written with O_DSYNC on the caller's thread
        assert inodes and inodes <= fsynced  # every file durable, the callers' too


class TestWithoutSpool:
    def test_undeliverable_events_are_counted_not_kept(self, tmp_path):
        """Without spool_dir, a batch that cannot be delivered is lost and counted as failed."""
        client = loghandler.Client(token=TOKEN, url=closed_port_url())
        with loghandler.Shipper(client, DATASET, **FAST) as shipper:
            for i in range(20):
                shipper.submit({"id": i})
            assert shipper.flush(5) is False
            st = shipper.stats()
        assert st.failed_retries_exhausted == 20 and st.spooled == 0
        assert list(tmp_path.iterdir()) == []


class TestShutdown:
    def test_exit_bounded_and_rest_spooled_with_refused_connections(self, tmp_path):
        """Service down: exit within shutdown_timeout + 1 s, every event in the spool."""
        n = 200
        proc = child(closed_port_url(), tmp_path, n, "q", flush=0.2, batch_size=50)
        out, _ = finish(proc)  # the process exits: a hang fails here
        assert out["hooks_done"] - out["end"] < FAST["shutdown_timeout"] + 1
        assert sorted(spooled_ids(tmp_path)) == sorted(f"q{i}" for i in range(n))

    def test_exit_bounded_and_rest_spooled_with_a_hanging_service(self, tmp_path, receiver):
        """Service hangs: exit within shutdown_timeout + 1 s, every event in the spool."""
        receiver.gate = threading.Event()  # every request is held, never answered in time
        n = 200
        proc = child(receiver.url, tmp_path, n, "h", flush=0.2, batch_size=50)
        out, _ = finish(proc)  # the process exits: a hang fails here
        assert out["hooks_done"] - out["end"] < FAST["shutdown_timeout"] + 1
        assert sorted(spooled_ids(tmp_path)) == sorted(f"h{i}" for i in range(n))
