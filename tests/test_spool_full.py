"""A spool on a full disk (issue 15, item 3): every event counted once, on a real small tmpfs.

Mounting needs root (these machines and CI have it); elsewhere the tests skip, saying why.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TOKEN, closed_port_url

from loghandler import Client, Shipper
from loghandler._engine.spool import Spool, SpoolWriteError
from loghandler._engine.spoolfiles import READY, dataset_dir, decode_file, encode_file


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted for the test."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        reason = f"cannot mount a tmpfs (needs root): {proc.stderr.strip() or proc.returncode}"
        print(reason)
        pytest.skip(reason)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> None:
    """Fill the file system with a ballast file, to the last byte."""
    fd = os.open(directory / "ballast", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def on_disk(spool_dir: Path, dataset: str) -> int:
    path = dataset_dir(spool_dir, dataset)
    return sum(len(decode_file(open(os.path.join(path, n), "rb").read()))
               for n in os.listdir(path) if n.endswith(READY))


def event(i: int) -> dict[str, object]:
    return {"i": i, "pad": os.urandom(100).hex()}


class TestSpoolOnAFullDisk:
    def test_eviction_then_enospc_counts_the_evicted(self, tmpfs):
        """max_spool_bytes evicts the oldest file, then the disk refuses the new one: the
        evicted events are in spool_dropped, the refused ones in failed, none in two."""
        small = [event(i) for i in range(20)]
        big = [event(i) for i in range(100, 400)]
        from loghandler import _encoding as encoding

        big_bytes = len(encode_file([encoding.encode(e) for e in big]))
        s = Shipper(Client(TOKEN, url=closed_port_url()), "ds", spool_dir=str(tmpfs),
                    max_retries=0, flush_interval=60, max_spool_bytes=big_bytes + 100)
        for e in small:
            s.submit(e)
        assert not s.flush(5)
        assert s.stats().spooled == 20 and on_disk(tmpfs, "ds") == 20
        fill(tmpfs)  # the 20 events' file is all eviction can free: too little for 300
        for e in big:
            s.submit(e)
        assert not s.flush(5)
        s.close(0)
        st = s.stats()
        assert on_disk(tmpfs, "ds") == 0
        assert st.spooled == 20 and st.spool_dropped == 20
        assert st.failed_retries_exhausted == 300
        assert st.submitted == (st.delivered + st.dropped + st.failed + st.spooled + st.queued
                                + st.unconfirmed)

    def test_multi_file_write_failing_part_way(self, tmpfs):
        """A write of many files stops at ENOSPC: what is on disk is told as stored."""
        spool = Spool(str(tmpfs), "ds", max_file_events=10)
        parts = [b'{"i":%d,"pad":"%s"}' % (i, os.urandom(200).hex().encode())
                 for i in range(2000)]
        with pytest.raises(SpoolWriteError) as info:
            spool.write(parts)
        stored = info.value.stored
        assert 0 < stored < 2000 and stored % 10 == 0 and info.value.dropped == 0
        assert info.value.errno == errno.ENOSPC
        assert on_disk(tmpfs, "ds") == stored

    def test_at_exit_part_on_disk_is_spooled_the_rest_dropped(self, tmpfs):
        """At the close deadline, leftovers go to the spool in several files; the disk fills
        part-way: what was written counts as spooled (a later process delivers it), only the
        rest as dropped_shutdown."""
        s = Shipper(Client(TOKEN, url=closed_port_url()), "ds", spool_dir=str(tmpfs),
                    batch_size=10, flush_interval=60, shutdown_timeout=0)
        for i in range(2000):
            s.submit({"i": i, "pad": os.urandom(200).hex()})
        s.close(0)
        st = s.stats()
        stored = on_disk(tmpfs, "ds")
        assert 0 < stored < 2000
        assert st.spooled == stored and st.dropped_shutdown == 2000 - stored
        assert st.submitted == 2000 and st.queued == 0


# --------------------------------------------------------------------------- issue 48.6

def _make(state: str, mnt: Path) -> None:
    """The disk state: full (a ballast file to the last byte) or read-only (remounted)."""
    if state == "full":
        fill(mnt)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)


def _run(spool_dir: Path) -> dict[str, int]:
    s = Shipper(Client(TOKEN, url=closed_port_url()), "ds", spool_dir=str(spool_dir),
                max_retries=0, retry_backoff=0.001, flush_interval=60)
    for i in range(5):
        s.submit({"i": i})
    assert s.flush(10) is False
    st = s.stats()
    s.close(1)
    return {k: v for k, v in st.__dict__.items() if v}


@pytest.mark.parametrize("state", ["full", "read-only"])
def test_an_unwritable_spool_dir_at_construction_starts_and_counts(
        tmpfs: Path, state: str, capfd: pytest.CaptureFixture[str]) -> None:
    """A spool_dir on a full or read-only disk at construction: the shipper starts (before:
    ConfigurationError, so the application did not start), says so once on stderr, and counts
    the events as it does when the disk turns so one second later."""
    later = tmpfs / "later"
    later_run = Shipper(Client(TOKEN, url=closed_port_url()), "ds", spool_dir=str(later))
    later_run.close(1)  # its directory made while the disk is fine
    _make(state, tmpfs)
    capfd.readouterr()
    at_start = _run(tmpfs / "now")
    err = capfd.readouterr().err
    assert err.count("cannot be written now") == 1, err
    assert "check its disk space and permissions" in err
    assert "could not write to the spool" not in err, err  # the failing writes: not again
    assert at_start == _run(later)  # the same counts as the same disk state later
    assert at_start["failed_retries_exhausted"] == 5 and "spooled" not in at_start


def test_an_unwritable_spool_dir_through_dict_config(tmpfs: Path,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    """The same through logging.config.dictConfig (before: ValueError): the handler is made
    and configured, and told once."""
    import logging
    import logging.config

    _make("read-only", tmpfs)
    logging.config.dictConfig({
        "version": 1, "disable_existing_loggers": False,
        "handlers": {"ship": {"class": "loghandler.IngestHandler", "dataset": "ds",
                              "token": TOKEN, "url": closed_port_url(),
                              "spool_dir": str(tmpfs / "spool"), "max_retries": 0}},
        "loggers": {"unwritable-spool": {"handlers": ["ship"], "propagate": False}},
    })
    log = logging.getLogger("unwritable-spool")
    (handler,) = log.handlers
    try:
        log.warning("hello")
        assert handler.flush(10) is False  # type: ignore[attr-defined]
        st = handler.stats()  # type: ignore[attr-defined]
        assert st.submitted == 1 and st.failed == 1 and st.spooled == 0
    finally:
        log.removeHandler(handler)
        handler.close()
    assert capfd.readouterr().err.count("cannot be written now") == 1
