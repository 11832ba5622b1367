"""The spool's replay: stored files sent back to the service, oldest first, in bounded rounds.

``Spool.replay(target)`` runs one round here (``Replay.round``): it claims the oldest waiting
file (``Spool.claim_next``), sends it through ``target.send`` one request at a time, rewriting
the file with what is left after each request (a crash re-sends at most the batch in flight),
and stops at the first file the service does not take completely; rounds then back off until
the target delivers again. A file that cannot be read back is moved aside and told once.
``spool.py`` owns the directory and its files; this module owns the replay's pace.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Protocol

from .._output import clip, print_line, shown
from .batches import cut
from .ledger import Count
from .policy import replay_backoff
from .spoolfiles import CORRUPT, SpoolCorrupt, decode_file, encode_file

if TYPE_CHECKING:
    from .spool import Spool

__all__ = ["ROUND_BYTES", "ROUND_FILES", "Replay", "ReplayTarget"]

_monotonic = time.monotonic
MiB = 1024 * 1024
# A replay round stops after this many files or bytes, so new events flow between rounds.
ROUND_FILES = 8
ROUND_BYTES = 8 * MiB


class ReplayTarget(Protocol):
    """What ``Spool.replay`` sends through (the engine's ``worker.Worker``; a fake in tests)."""

    def send(self, parts: list[bytes]) -> list[bytes]:
        """Deliver encoded events (one request's worth); return those still undelivered."""
        ...

    def stopping(self) -> bool:
        """True when replay must stop (the shipper is closing)."""
        ...

    def count(self, counter: Count, n: int = 1) -> None:
        """Add to one of the shipper's counters (``Count.SPOOL_CORRUPT``)."""
        ...

    def progress(self) -> int:
        """A number that grows whenever events are delivered: replay resumes at once then."""
        ...


class Replay:
    """The replay of one ``Spool`` (see the module docstring): ``round(target)`` sends the
    oldest files back; between rounds that stopped on a file the service did not take, it
    backs off (``policy.replay_backoff``) until ``target.progress()`` grows."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.retry_at = 0.0
        self.backoff = 0.0
        self.delivered_mark = -1

    def round(self, target: ReplayTarget) -> None:
        """One bounded round: re-send the oldest files through ``target.send``.

        Stops at the first file the service does not take completely (it stays, with only
        what is left, for a later round) and backs off until the target delivers again
        (``target.progress()`` grows).
        """
        spool = self.spool
        if self.retry_at and _monotonic() < self.retry_at \
                and _progress(target) == self.delivered_mark:
            return
        if not spool.pending():
            return
        files = nbytes = 0
        while files < ROUND_FILES and nbytes < ROUND_BYTES:
            if target.stopping():
                return
            claimed = spool.claim_next()
            if claimed is None:
                break
            files += 1
            done, size = self._send_file(*claimed, target)
            nbytes += size
            if not done:
                self.backoff = replay_backoff(self.backoff)
                self.retry_at = _monotonic() + self.backoff
                self.delivered_mark = _progress(target)
                return
        self.retry_at = self.backoff = 0.0

    def _send_file(self, name: str, claim: str, target: ReplayTarget) -> tuple[bool, int]:
        """Send one claimed file. (True when it is gone: delivered or quarantined, size)."""
        spool = self.spool
        try:
            try:
                size = os.path.getsize(claim)
                if size > max(spool.max_bytes, 4 * spool.max_file_bytes):
                    raise SpoolCorrupt(f"{size} bytes, larger than a spool file can be")
                with open(claim, "rb") as f:
                    data = f.read()
                parts = decode_file(data)
            except FileNotFoundError:
                return True, 0  # taken back by another process as stale; it sends it
            except (OSError, SpoolCorrupt) as exc:
                self._quarantine(name, claim, exc, target)
                return True, 0
            i = 0
            while i < len(parts):
                # One request at a time, within the batch limits (brackets included).
                chunk = parts[i:cut(parts, i, spool.max_file_events, spool.max_file_bytes)]
                remaining = target.send(chunk)
                i += len(chunk)
                rest = remaining + parts[i:]
                if not rest:
                    break
                # Rewrite before going on, so a crash re-sends at most the batch in flight.
                spool.write_file(claim, encode_file(rest))
                if remaining:
                    os.rename(claim, os.path.join(spool.path, name))
                    spool.mark_pending()
                    return False, len(data)
            try:
                os.unlink(claim)
            except FileNotFoundError:
                pass
            return True, len(data)
        finally:
            spool.release(claim)

    def _quarantine(self, name: str, claim: str, exc: BaseException,
                    target: ReplayTarget) -> None:
        spool = self.spool
        aside = os.path.join(spool.path, name + CORRUPT)
        try:
            os.rename(claim, aside)
            where = f"moved aside as {name + CORRUPT}"
        except OSError:
            try:
                os.unlink(claim)
                where = "deleted (it could not be moved aside)"
            except OSError:
                spool.skip(name)
                where = "left in place and skipped"
        try:
            target.count(Count.SPOOL_CORRUPT, 1)
        except Exception:
            pass
        print_line(f"loghandler: dataset {shown(spool.dataset)}: spool file {name} is damaged "
                   f"({clip(str(exc), 60)}): {where}; the other files are replayed")


def _progress(target: ReplayTarget) -> int:
    try:
        return int(target.progress())
    except Exception:
        return -1
