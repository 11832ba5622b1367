"""The disk spool: events the service could not take, kept on disk and delivered later.

The engine (``spilling.py``) writes a batch here when it cannot deliver it (retries exhausted,
authentication refused, dataset not found, shutdown deadline) and replays the spool from its
flusher thread, at start and about every ``flush_interval``. Several processes may share one
spool directory: a file is claimed by an atomic rename before it is sent, so no two processes
send the same file, and a claim left by a process that died is taken back later.

Layout, one directory per dataset, named by a hash so no dataset name reaches a path::

    <spool_dir>/                          created 0700 when it does not exist
      ds-<sha256(dataset)[:32]>/          0700
        DATASET                           0600, the real dataset name, for operators
        <epoch>-<seq>-<pid>-<n>.spool     0600, events waiting for replay (lowest name first)
        <name>.claim-<pid>-<start>        a file being replayed by process <pid>
        <name>.corrupt                    a damaged file, moved aside and reported once
        tmp-<pid>-<start>-<n>.tmp         a file being written, renamed when complete

A file's format, its names' parts and the liveness of the processes named in them are
``spoolfiles.py``'s; sending the files back, round by round, is ``spoolreplay.py``'s. This module
owns the directory: writing, its bound (``max_bytes``), scanning and claiming.

Order: replay sends files in the order of their names, and a name says when its events were
submitted, not when the file was written: ``<seq>`` is the shipper's sequence number of the
file's first event (the ledger numbers events in submission order), ``<epoch>`` the time (ns)
the spool of that shipper started (a new process, or a forked child, starts later). A batch the
flusher was still retrying when the application's threads spilled newer events to the spool
(``spilling.Spiller.write_from_caller``) is written after them and still replays before them.
Both fields are zero-padded to 20 digits, so names sort as numbers. A ``Spool`` used on its own
(``write`` without ``seq``) names files by write time (``<epoch>`` the time of the write).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .._errors import ConfigurationError
from .._output import print_line, redact, shown
from .batches import chunks
from .reporter import counted
from .spoolfiles import (
    CLAIM,
    CORRUPT,
    META,
    READY,
    TMP,
    alive,
    dataset_dir,
    encode_file,
    header_count,
    own_start,
    pid_of,
)
from .spoolreplay import Replay, ReplayTarget

__all__ = ["DEFAULT_MAX_SPOOL_BYTES", "Spool", "SpoolWriteError"]

MiB = 1024 * 1024
DEFAULT_MAX_SPOOL_BYTES = 256 * MiB  # the engine's default for max_spool_bytes
# One file is at most one batch, so a crash during replay re-sends at most the batch in flight.
# The engine passes its own batch_size and max_batch_bytes; these bounds are for a Spool used
# on its own.
DEFAULT_MAX_FILE_EVENTS = 1000
DEFAULT_MAX_FILE_BYTES = 4 * MiB
# A claim or temporary file this old is taken back even when its process looks alive (a
# stopped process, or a pid reused where the start time cannot be read): at worst a duplicate.
STALE_CLAIM_SECONDS = 600.0
STALE_TMP_SECONDS = 3600.0
# An empty spool is re-checked with one stat() of its directory; a full scan at least this often
# catches what a coarse directory mtime can hide.
FULL_SCAN_SECONDS = 5.0
# How long a write trusts the directory size of its last scan plus its own writes (_make_room):
# other processes sharing the directory may pass max_spool_bytes by what they wrote meanwhile.
SIZE_SCAN_SECONDS = 1.0

_monotonic = time.monotonic
_names = itertools.count()
_names_lock = threading.Lock()
# Claims this process holds (absolute paths), shared by every Spool of the process: a claim
# named with our pid that is not in here was left by an earlier process that had our pid.
_held: set[str] = set()
_last_time_ns = 0


def after_fork_in_child() -> None:
    """In a forked child: the module's lock anew (the parent's flusher may have held it at the
    fork, and no thread of the child would ever release it)."""
    global _names_lock
    _names_lock = threading.Lock()


@dataclass
class _Entry:
    name: str
    size: int


# --------------------------------------------------------------------------- the spool

class SpoolWriteError(OSError):
    """A spool write the disk refused, in part or in whole.

    ``stored``: events of the write that are on disk all the same (or were cut for
    ``max_bytes``, which counts them in ``dropped``); the others are not stored. ``dropped``:
    spooled events deleted to make room (``stats().spool_dropped``).
    """

    def __init__(self, cause: OSError, *, stored: int, dropped: int) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        if cause.filename is not None:  # else str() would end in ": None"
            self.filename = cause.filename
        self.stored = stored
        self.dropped = dropped


class Spool:
    """The on-disk spool of one dataset.

    ``Spool(spool_dir, dataset, max_bytes=256 MiB)``: ``write(parts)`` stores encoded events,
    ``replay(target)`` sends stored ones back through ``target.send`` (a ``ReplayTarget``).
    ``max_bytes`` bounds the dataset's directory; when a write would exceed it the oldest files
    go first. ``max_file_events`` and ``max_file_bytes`` bound one file, and one replayed
    request (the shipper passes its ``batch_size`` and ``max_batch_bytes``).
    Raises ``ConfigurationError`` when the directory is not one (a file in the way) or not
    ours; a disk that refuses it (read-only, full, no permission) is the disk's state, which
    may change: the spool is made with ``problem`` saying why, and writes fail until it heals.
    """

    def __init__(self, spool_dir: str | os.PathLike[str], dataset: str, *,
                 max_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
                 max_file_events: int = DEFAULT_MAX_FILE_EVENTS,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.dataset = dataset
        self.max_bytes = max_bytes
        self.max_file_events = max(1, max_file_events)
        self.max_file_bytes = max(1, max_file_bytes)
        self.path = dataset_dir(spool_dir, dataset)
        # Why the spool cannot be written now (a read-only or full disk, no permission), or
        # None: the application starts all the same, the shipper says so once, and each write
        # fails and is counted as a write that fails later would be (the directory is created
        # by the first write that finds the disk writable).
        self.problem: str | None = None
        try:
            self._setup(os.path.dirname(self.path))
        except OSError as exc:
            self.problem = f"{exc.strerror or exc}"
        self._reset()
        own_start()  # read once now, not by the first write during an outage

    def _reset(self) -> None:
        self._pid = os.getpid()
        # Names of this spool's files start with it (module docstring, "Order"): a forked child
        # numbers its events anew, and its files sort after the parent's.
        self._epoch = time.time_ns()
        self._lock = threading.Lock()
        self._pending = True  # unknown until the first scan
        self._empty_mtime: int | None = None
        self._next_full_scan = 0.0
        self._replay = Replay(self)
        self._full_reported = False
        self._skip: set[str] = set()
        self._sizes: dict[tuple[str, int], int] = {}
        self._known_bytes = 0  # see _make_room
        self._known_until = 0.0
        # Files of application threads' writes not yet synced (write's durable=False), and
        # their events: the flusher syncs them (sync). In a forked child: the parent's to sync.
        self._unsynced: list[tuple[str, int]] = []
        self._unsynced_events = 0

    def __repr__(self) -> str:
        return redact(f"Spool(path={self.path!r}, max_bytes={self.max_bytes})")

    def _setup(self, root: str) -> None:
        try:
            if not os.path.isdir(root):
                os.makedirs(root, mode=0o700, exist_ok=True)
                os.chmod(root, 0o700)  # makedirs' mode is masked by the umask
            try:
                os.mkdir(self.path, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(self.path)
            if not stat.S_ISDIR(st.st_mode):
                raise ConfigurationError(f"spool_dir: {self.path} exists and is not a directory")
            if hasattr(os, "getuid") and st.st_uid != os.getuid():
                raise ConfigurationError(
                    f"spool_dir: {self.path} belongs to another user; events carry secrets, "
                    "so the spool must be private"
                )
            os.chmod(self.path, 0o700)
            meta = os.path.join(self.path, META)
            if not os.path.exists(meta):
                self.write_file(meta, self.dataset.encode("utf-8", "surrogatepass") + b"\n")
        except OSError as exc:
            if exc.errno in _DISK_STATES:
                raise  # the disk's state, which may change: Spool.__init__ starts all the same
            raise ConfigurationError(f"spool_dir: cannot use {root}: {exc}") from None

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            self._reset()  # the parent's lock may have been held at fork

    # ------------------------------------------------------------------ writing

    def write(self, parts: list[bytes], batches: int = 1, *, seq: int | None = None,
              durable: bool = True) -> int:
        """Store encoded events, crash-safely. Returns how many older spooled events were
        deleted to stay within ``max_bytes`` (or events of this write when it alone is larger).

        ``batches``: files of up to that many batches (``max_file_events``, ``max_file_bytes``)
        each, at most 4 (a reader takes a file of up to 4 times ``max_file_bytes``); replay
        sends such a file one batch per request. Fewer files, fewer system calls. ``seq``: the
        submission number of the first event (module docstring, "Order"), which replay orders
        by; None: the order of the writes. ``durable=False`` (an application thread's write,
        which must not wait on the disk): the files are written and renamed into place, so a
        crash of the process loses nothing, but not synced: until ``sync()`` (the flusher's)
        a power loss may (``unsynced``).

        Raises ``SpoolWriteError`` (an ``OSError``) when the disk refused part or all of it
        (ENOSPC, EIO, ...); it says how many of these events are on disk regardless (``stored``:
        the files written before the failure, which a later replay delivers) and how many
        spooled events were deleted (``dropped``, as the return value would), so that no event
        is counted twice or not at all.
        """
        self._check_fork()
        # Compact JSON has no raw newline; outside strings one is whitespace, so a space is
        # the same document and keeps one event per line.
        parts = [p.replace(b"\n", b" ") if b"\n" in p else p for p in parts]
        if not parts:
            return 0
        dropped = 0
        while True:
            blobs = [encode_file(chunk) for chunk in self._chunks(parts, batches)]
            need = sum(len(b) for b in blobs)
            if need <= self.max_bytes:
                break
            # This write alone is over the bound: its oldest events go, as any oldest would.
            excess, k = need - self.max_bytes, 0
            while k < len(parts) - 1 and excess > 0:
                excess -= len(parts[k]) + 1
                k += 1
            dropped += max(k, 1)
            parts = parts[max(k, 1):]
            if not parts:
                return dropped
        own = dropped  # this write's own events cut for the bound: "stored", then deleted
        stored = 0
        try:
            # The lock covers the directory's size (room made for this write), not the writes:
            # an application thread writing a full queue's batch (spilling.py) never waits for
            # another thread's file to reach the disk.
            with self._lock:
                dropped += self._make_room(need)
            for blob, chunk in zip(blobs, self._chunks(parts, batches), strict=True):
                # Each file named by its own first event (the events cut for the bound
                # above were the oldest: the rest start ``own`` later).
                first = None if seq is None else seq + own + stored
                path = os.path.join(self.path, self._new_name(first))
                self.write_file(path, blob, sync=durable)
                if not durable:
                    with self._lock:
                        self._unsynced.append((path, len(chunk)))
                        self._unsynced_events += len(chunk)
                stored += len(chunk)
        except OSError as exc:
            if stored:
                if durable:
                    self._fsync_dir()
                self._pending = True
            raise SpoolWriteError(exc, stored=own + stored, dropped=dropped) from None
        if durable:
            self._fsync_dir()
        self._pending = True
        if dropped and not self._full_reported:
            self._full_reported = True
            print_line(f"loghandler: dataset {shown(self.dataset)}: the spool is full "
                       f"(max_spool_bytes={self.max_bytes:,}), so its oldest events are "
                       f"deleted{counted('spool_dropped')}: raise max_spool_bytes")
        return dropped

    def _chunks(self, parts: list[bytes], batches: int = 1) -> Iterator[list[bytes]]:
        # A file is replayed one request at a time: the batch rule cuts it.
        k = max(1, min(batches, 4))
        return chunks(parts, k * self.max_file_events, k * self.max_file_bytes)

    def _make_room(self, need: int) -> int:
        """Delete the oldest files until ``need`` more bytes fit; the events deleted."""
        now = _monotonic()
        if now < self._known_until and self._known_bytes + need <= self.max_bytes:
            # The directory's size as of the last scan plus what this process wrote since:
            # a scan reads every entry, each a system call that releases the GIL, and while
            # the application logs at full speed every one of them costs the flusher a switch
            # interval (5 ms), so a write that scanned a growing spool could not keep up with
            # the events it spills. Another process's writes are seen at the next scan.
            self._known_bytes += need
            return 0
        entries = self._scan()
        total = sum(e.size for e in entries)
        self._known_until = now + SIZE_SCAN_SECONDS
        if total + need <= self.max_bytes:
            self._known_bytes = total + need
            self._full_reported = False
            return 0
        # Damaged files (already reported) go first, then the oldest waiting events. Claimed
        # files belong to a replaying process and are left alone.
        victims = sorted((e for e in entries if e.name.endswith(CORRUPT)), key=lambda e: e.name)
        victims += sorted((e for e in entries if e.name.endswith(READY)), key=lambda e: e.name)
        dropped = 0
        for e in victims:
            if total + need <= self.max_bytes:
                break
            path = os.path.join(self.path, e.name)
            count = header_count(path) if e.name.endswith(READY) else 0
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue  # claimed or deleted by another process meanwhile
            except OSError:
                break  # the write that follows says what is wrong; count what went so far
            total -= e.size
            dropped += count
        self._known_bytes = total + need
        return dropped

    def _new_name(self, seq: int | None) -> str:
        """A file's name (module docstring, "Order"): by ``seq``, the submission number of
        its first event; without one, by the time of the write."""
        global _last_time_ns
        with _names_lock:
            n = next(_names)
            if seq is None:
                # A clock that did not move still counts up.
                epoch = _last_time_ns = max(time.time_ns(), _last_time_ns + 1)
                seq = 0
            else:
                epoch = self._epoch
        return f"{epoch:020d}-{max(0, seq):020d}-{os.getpid():010d}-{n:010d}{READY}"

    def write_file(self, path: str, data: bytes, sync: bool = True) -> None:
        """Write ``data`` to ``path`` atomically: temporary file, fsync (unless not
        ``sync``: ``write``'s ``durable``), rename."""
        with _names_lock:
            n = next(_names)
        tmp = os.path.join(self.path, f"tmp-{os.getpid()}-{own_start()}-{n}{TMP}")
        # O_DSYNC: each write returns once its data is on disk, as a write and an fsync would,
        # in one system call less (each costs the flusher the GIL; see _make_room).
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | (
            _DSYNC if sync else 0)
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileNotFoundError:
            # The directory was removed under us (a tmp cleaner), or never made (the disk
            # refused it at construction: Spool.problem).
            try:
                self._setup(os.path.dirname(self.path))
            except ConfigurationError as exc:
                raise OSError(errno.ENOENT, str(exc)) from None
            fd = os.open(tmp, flags, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if sync and not _DSYNC:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    @property
    def unsynced(self) -> int:
        """Events written with ``durable=False`` and not yet synced (``stats()``'s
        ``spool_unsynced``): on disk for any crash of the process, not yet for a power loss."""
        return self._unsynced_events

    def sync(self) -> int:
        """Make the files of ``durable=False`` writes durable (the flusher's, between batches,
        and at close): fsync each, then the directory. Returns the events made durable (a file
        replayed or deleted meanwhile counts too: nothing of it is left at risk)."""
        with self._lock:
            files, self._unsynced = self._unsynced, []
        if not files:
            return 0
        for path, _ in files:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue  # claimed (a replay rewrites it synced), delivered or deleted
            try:
                os.fsync(fd)
            except OSError:
                pass  # not supported everywhere; the directory's sync below still runs
            finally:
                os.close(fd)
        self._fsync_dir()
        n = sum(k for _, k in files)
        with self._lock:
            self._unsynced_events -= n
        return n

    def _fsync_dir(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass  # not supported everywhere (some network file systems)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ scanning

    def _scan(self) -> list[_Entry]:
        """Every file of the spool directory, with stale claims and temporaries taken back."""
        entries = []
        now = time.time()
        # Sizes of the files seen before, by (name, inode): spool files are never changed in
        # place (a rewrite is a new file renamed over the old), so only new files are stat'ed.
        # Every stat releases the GIL, and getting it back from an application thread logging
        # at full speed costs the flusher a switch interval (5 ms): during an outage, a write
        # that stat'ed every file of a growing spool slowed to tens of milliseconds, while the
        # queue overflowed.
        known, sizes = self._sizes, {}
        try:
            it = os.scandir(self.path)
        except FileNotFoundError:
            return []
        with it:
            for d in it:
                name = d.name
                if CLAIM not in name and not name.endswith(TMP):
                    key = (name, d.inode())
                    size = known.get(key)
                    if size is None:
                        try:
                            st = d.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if not stat.S_ISREG(st.st_mode):
                            continue
                        size = st.st_size
                    sizes[key] = size
                    entries.append(_Entry(name, size))
                    continue
                try:
                    st = d.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if CLAIM in name and self._claim_stale(d.path, name, st.st_mtime, now):
                    ready = name.rsplit(CLAIM, 1)[0]
                    try:
                        os.rename(d.path, os.path.join(self.path, ready))
                        name = ready
                    except OSError:
                        continue  # another process took it back first
                elif name.endswith(TMP) and self._tmp_stale(name, st.st_mtime, now):
                    try:
                        os.unlink(d.path)
                    except OSError:
                        pass
                    continue
                entries.append(_Entry(name, st.st_size))
        self._sizes = sizes
        return entries

    def _claim_stale(self, path: str, name: str, mtime: float, now: float) -> bool:
        owner = pid_of(name, CLAIM)
        if owner is None or now - mtime > STALE_CLAIM_SECONDS:
            return True
        pid, start = owner
        if pid == os.getpid():
            return path not in _held
        return not alive(pid, start)

    def _tmp_stale(self, name: str, mtime: float, now: float) -> bool:
        owner = pid_of(name, "tmp-")
        if owner is None or now - mtime > STALE_TMP_SECONDS:
            return True
        pid, start = owner
        return pid != os.getpid() and not alive(pid, start)

    def pending(self) -> bool:
        """Whether anything may wait in the spool: at most one ``stat`` when it is empty."""
        self._check_fork()
        if self._pending or _monotonic() >= self._next_full_scan:
            return True
        try:
            return os.stat(self.path).st_mtime_ns != self._empty_mtime
        except OSError:
            return False

    def has_waiting(self) -> bool:
        """Whether files wait for replay (one directory scan): to start a flusher at once."""
        try:
            with os.scandir(self.path) as it:
                return any(d.name.endswith(READY) or CLAIM in d.name for d in it)
        except OSError:
            return False

    def claim_next(self) -> tuple[str, str] | None:
        """Claim the oldest waiting file: (its name, the claim's path), or None."""
        try:
            mtime = os.stat(self.path).st_mtime_ns  # before the scan: a later change shows
        except OSError:
            mtime = None
        ready = sorted(e.name for e in self._scan()
                       if e.name.endswith(READY) and e.name not in self._skip)
        for name in ready:
            claim = os.path.join(self.path, f"{name}{CLAIM}{os.getpid()}-{own_start()}")
            with _names_lock:
                _held.add(claim)
            try:
                os.rename(os.path.join(self.path, name), claim)
            except OSError:
                self.release(claim)
                continue  # claimed or dropped by another process
            try:
                os.utime(claim)  # the claim's age starts now (rename keeps the old mtime)
            except OSError:
                pass
            return name, claim
        if not ready:
            with self._lock:
                self._pending = False
                self._empty_mtime = mtime
                self._next_full_scan = _monotonic() + FULL_SCAN_SECONDS
        return None

    @staticmethod
    def release(claim: str) -> None:
        """The claim is given up (its file sent, renamed back or moved aside)."""
        with _names_lock:
            _held.discard(claim)

    def mark_pending(self) -> None:
        """A file waits again (a replay left part of it): the next ``pending()`` says so."""
        with self._lock:
            self._pending = True

    def skip(self, name: str) -> None:
        """A damaged file that could be neither moved aside nor deleted: replay passes it."""
        self._skip.add(name)

    # ------------------------------------------------------------------ replay

    def replay(self, target: ReplayTarget) -> None:
        """One bounded round: re-send the oldest files through ``target.send``
        (``spoolreplay.Replay.round``)."""
        self._check_fork()
        self._replay.round(target)


_DSYNC = getattr(os, "O_DSYNC", 0)
# Errors of the disk's state, not of the configuration: a spool_dir that cannot be written at
# construction because of one of these does not stop the application from starting.
_DISK_STATES = frozenset(getattr(errno, name) for name in (
    "EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "EIO", "ENOENT") if hasattr(errno, name))
