"""The spool's files: their format, their names and the processes that own them.

A file is a header line ``LHSPOOL 1 <events> <payload bytes> <crc32 hex>`` and then the payload:
one compact JSON event per line (``encode_file``, ``decode_file``). A file being written or
replayed carries its process's pid and start time in its name (``tmp-<pid>-<start>-<n>.tmp``,
``<name>.claim-<pid>-<start>``), so that a file left by a process that died is taken back
(``alive``), and a pid reused by a new process is told apart. ``spool.py`` owns the directory.
"""

from __future__ import annotations

import hashlib
import os
import zlib

__all__ = ["CLAIM", "CORRUPT", "META", "READY", "TMP", "SpoolCorrupt", "alive", "dataset_dir",
           "decode_file", "encode_file", "header_count", "own_start", "pid_of", "proc_info"]

MAGIC = b"LHSPOOL"
VERSION = b"1"
HEADER_MAX = 96
READY = ".spool"
CLAIM = ".claim-"
CORRUPT = ".corrupt"
TMP = ".tmp"
META = "DATASET"


class SpoolCorrupt(Exception):
    """A spool file that cannot be read back (the message says why)."""


# --------------------------------------------------------------------------- file format

def encode_file(parts: list[bytes]) -> bytes:
    """A spool file holding ``parts`` (encoded events, one JSON document each)."""
    payload = b"\n".join([*parts, b""])  # one buffer, not a copy of each event first
    header = b"%s %s %d %d %08x\n" % (MAGIC, VERSION, len(parts), len(payload),
                                       zlib.crc32(payload))
    return header + payload


def decode_file(data: bytes) -> list[bytes]:
    """The events of a spool file; ``SpoolCorrupt`` when it is damaged in any way."""
    end = data.find(b"\n", 0, HEADER_MAX)
    if end < 0:
        raise SpoolCorrupt("no header line" if data else "empty file")
    fields = data[:end].split(b" ")
    if len(fields) != 5 or fields[0] != MAGIC:
        raise SpoolCorrupt("not a loghandler spool file")
    if fields[1] != VERSION:
        raise SpoolCorrupt(f"unknown format version {fields[1]!r}")
    try:
        count, length, crc = int(fields[2]), int(fields[3]), int(fields[4], 16)
    except ValueError:
        raise SpoolCorrupt("unreadable header") from None
    payload = data[end + 1:]
    if len(payload) < length:
        raise SpoolCorrupt(f"truncated: {len(payload)} of {length} bytes")
    if len(payload) > length:
        raise SpoolCorrupt(f"{len(payload) - length} unexpected bytes at the end")
    if zlib.crc32(payload) != crc:
        raise SpoolCorrupt("checksum mismatch")
    parts = payload.split(b"\n")
    if parts.pop() != b"" or len(parts) != count:
        raise SpoolCorrupt(f"{len(parts)} events where the header says {count}")
    return parts


def header_count(path: str) -> int:
    """Events in a file, from its header only (0 when unreadable)."""
    try:
        with open(path, "rb") as f:
            fields = f.readline(HEADER_MAX).split(b" ")
        return int(fields[2]) if len(fields) == 5 and fields[0] == MAGIC else 0
    except (OSError, ValueError):
        return 0


# --------------------------------------------------------------------------- processes

def proc_info(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process from /proc, or None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return fields[0].decode(), fields[19].decode()
    except (OSError, ValueError, IndexError):
        return None


_own: tuple[int, str] = (0, "0")


def own_start() -> str:
    global _own
    pid = os.getpid()
    if _own[0] != pid:
        info = proc_info(pid)
        _own = (pid, info[1] if info else "0")
    return _own[1]


def alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` (started at ``start``, "0" if unknown) still runs."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # EPERM: it exists, under another user
    info = proc_info(pid)
    if info is None:
        return True
    state, now_start = info
    if state in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    # Same pid, other start time: the pid was reused by a new process.
    return start == "0" or now_start == start


def pid_of(name: str, marker: str) -> tuple[int, str] | None:
    """(pid, start) from ``...<marker><pid>-<start>[...]``."""
    try:
        tail = name.rsplit(marker, 1)[1]
        pid, start = tail.split("-")[:2]
        return int(pid), start.split(".")[0]
    except (IndexError, ValueError):
        return None


def dataset_dir(spool_dir: str | os.PathLike[str], dataset: str) -> str:
    """The directory holding the spool of ``dataset`` (its name never reaches the path)."""
    digest = hashlib.sha256(dataset.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(os.path.abspath(os.fspath(spool_dir)), "ds-" + digest)
