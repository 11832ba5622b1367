"""``loghandler ingest``: ship files or stdin to a dataset through a ``Shipper``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import threading
from typing import Any

from .._status import REJECTED, TOO_LARGE
from ._common import (
    EXIT_OK,
    EXIT_SERVICE,
    Failure,
    UsageError,
    _client,
    _err,
    _out,
    _Parser,
    _refused_token,
)
from .reader import _INPUT_SUFFIXES, FORMATS, _Counts, _looks_like_input, _open_input, iter_events
from .times import EventTimes

# Refused connections: retries before ingest gives up, and the waits between them. A one-shot
# command should say at once that nothing listens (the library itself keeps its patience).
CONNECT_RETRY_DELAYS = (0.5, 1.0)


def _dataset_and_files(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The dataset and the inputs, by a rule that is never ambiguous (README "Command line")."""
    inputs = list(args.inputs)
    if args.dataset is not None:
        dataset = args.dataset
    elif inputs and not _looks_like_input(inputs[0]):
        dataset = inputs.pop(0)
    else:
        dataset = os.environ.get("LOGHANDLER_DATASET") or ""
        if not dataset:
            if inputs:
                raise UsageError(f"{inputs[0]} is an input file, not a dataset: give the dataset "
                                 "with -d NAME or LOGHANDLER_DATASET")
            raise UsageError("no dataset: give it with -d NAME or set LOGHANDLER_DATASET")
    if not dataset.strip():
        raise UsageError("the dataset name (-d or LOGHANDLER_DATASET) must not be empty")
    return dataset, inputs or ["-"]


def _check_reachable(url: str) -> None:
    """Fail fast, with one line, when nothing listens at ``url`` (a short, stated budget)."""
    import socket
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    started = time.monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            socket.create_connection((host, port), timeout=2.0).close()
            return
        except ConnectionRefusedError:
            if tries > len(CONNECT_RETRY_DELAYS):
                took = time.monotonic() - started
                raise Failure(f"nothing is listening at {url} (connection refused, {tries} tries "
                              f"in {took:.1f} s): start the service, or check --url or "
                              "LOGHANDLER_URL") from None
            time.sleep(CONNECT_RETRY_DELAYS[tries - 1])
        except socket.gaierror as exc:
            raise Failure(f"cannot find the host {host!r} of {url} ({exc.strerror}): check "
                          "--url or LOGHANDLER_URL") from None
        except OSError as exc:
            raise Failure(f"cannot connect to {url} ({exc.strerror or exc}): check --url or "
                          "LOGHANDLER_URL, and that the service is up") from None


def _explain(exc: BaseException, dataset: str, url: str) -> str:
    """The ingest failure in the user's words: what happened and what to do, one line."""
    from .._errors import ApiError, NotFoundError, TransportError
    from .._output import clip, shown

    refused = _refused_token(exc, url)
    if refused:
        return refused
    if isinstance(exc, NotFoundError):
        return (f"dataset {shown(dataset, 40)} does not exist at {url} (HTTP 404): create it "
                f"(loghandler datasets create {clip(dataset, 40)}) or check -d")
    if isinstance(exc, TransportError):
        return f"the service stopped answering ({exc}): check that it is up, then run again"
    if isinstance(exc, ApiError):
        return f"{exc}: run again later, or with a higher --max-retries"
    return str(exc)


def _timestamp_layout(text: str | None) -> str | None:
    """--timestamp-format as the service's Go layout (a strftime format is translated), and a
    line saying how it was read."""
    from ._layout import LayoutError, to_go_layout

    if not text:
        return None
    try:
        layout, translated = to_go_layout(text)
    except LayoutError as exc:
        raise UsageError(str(exc)) from None
    if translated:
        _err(f"--timestamp-format {text!r} read as strftime: the service gets the Go layout "
             f"{layout!r}")
    else:
        _err(f"--timestamp-format {text!r} read as a Go layout (strftime works too: "
             "'%Y-%m-%d %H:%M:%S')")
    return layout


def _field_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value


def cmd_ingest(args: argparse.Namespace) -> int:
    from .._engine.shipper import Shipper
    from .._errors import ApiError, PartialIngestError
    from .._output import captured_lines

    dataset, files = _dataset_and_files(args)
    for path in files:
        if path == "-":
            continue
        if os.path.isdir(path):
            raise UsageError(f"cannot read {path}: is a directory (give the files in it)")
        if not os.path.isfile(path):
            raise UsageError(f"cannot read {path}: no such file")
    if args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.max_retries < 0:
        raise UsageError("--max-retries must be 0 or more")
    layout = _timestamp_layout(args.timestamp_format)
    client = _client(args)
    _check_reachable(client.url)
    counts = _Counts()
    stop_reading = threading.Event()
    shippers: list[Shipper] = []

    def on_error(exc: BaseException) -> None:
        # Runs on the flusher thread. A bad event (400), a too large one (413) or events the
        # service turned down in its ingest status cost those events only; anything else
        # (token, dataset, service down) would fail every batch after it: stop reading, and
        # begin closing so a submit blocked on the full queue returns.
        if isinstance(exc, PartialIngestError) or (
            isinstance(exc, ApiError) and exc.status in REJECTED | TOO_LARGE
        ):
            return
        counts.fatal = counts.fatal or exc
        stop_reading.set()
        for s in shippers:
            s.close(0.5)

    with captured_lines() as engine_lines:
        # The service reads the time of each event from this field, in this layout.
        params = {name: value for name, value in (("timestamp-field", args.timestamp_field),
                                                  ("timestamp-format", layout))
                  if value}
        shipper = Shipper(
            client, dataset, batch_size=args.batch_size, flush_interval=0.2,
            max_queue_size=max(10 * args.batch_size, 10_000), overflow="block",
            block_timeout=600.0, shutdown_timeout=30.0, max_retries=args.max_retries,
            on_error=on_error, fields=dict(args.field) or None,
            # Moving existing data, not logging: it arrives as it is in the files (no host of
            # the machine that happens to run the command, nothing rewritten).
            identity=False, scrub=False, ingest_params=params or None,
        )
        shippers.append(shipper)
        bar = _progress_bar(args, dataset)
        # The service reads --timestamp-field itself; else the common time fields, here.
        times = EventTimes(enabled=not args.timestamp_field)
        try:
            for path in files:
                if stop_reading.is_set():
                    break
                _ingest_one(path, args.format, shipper, counts, stop_reading, bar, times)
            times.finish()
        finally:
            shipper.close(2.0 if stop_reading.is_set() else None)
            if bar is not None:
                bar.update(counts.read % 500)
                bar.close()
    if counts.fatal is not None:
        # Said in the user's words, once; the engine's lines say the same in the library's.
        _err(_explain(counts.fatal, dataset, client.url))
    else:
        for line in engine_lines:
            _err(line.removeprefix("loghandler: "))
    return _summarize(dataset, counts, shipper.stats())


def _ingest_one(path: str, fmt: str, shipper: Any, counts: _Counts,
                stop_reading: threading.Event, bar: Any, times: EventTimes) -> None:
    name = "<stdin>" if path == "-" else path
    if bar is not None:
        bar.clear()  # the "reading ..." line gets a line of its own, then the bar comes back
    try:
        source, detected, raw = _open_input(path, fmt)
        if bar is not None:
            bar.refresh()
    except OSError as exc:
        counts.bad += 1
        _err(f"cannot read {name}: {exc.strerror or exc}")
        return
    try:
        for event in iter_events(source, name, detected, counts):
            counts.read += 1
            times.stamp(event)
            shipper.submit(event)
            if bar is not None and counts.read % 500 == 0:
                bar.update(500)
            if stop_reading.is_set():
                break
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        counts.bad += 1
        _err(f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}")
    finally:
        if path != "-":
            raw.close()


def _summarize(dataset: str, counts: _Counts, st: Any) -> int:
    # The reason of a service refusal is on stderr already (the engine's line, once).
    rejected = st.failed_rejected + st.dropped_too_large + st.failed_by_service
    undelivered = counts.read - st.delivered - rejected
    parts = [f"{counts.read} event{'' if counts.read == 1 else 's'} read",
             f"{st.delivered} delivered to {dataset!r}"]
    if rejected:
        parts.append(f"{rejected} rejected by the service")
    if undelivered:
        parts.append(f"{undelivered} not delivered")
    if counts.bad:
        parts.append(f"{counts.bad} bad input line{'' if counts.bad == 1 else 's'} skipped")
    _out(", ".join(parts))
    ok = st.delivered == counts.read and not counts.bad and counts.fatal is None
    return EXIT_OK if ok else EXIT_SERVICE


def _progress_bar(args: argparse.Namespace, dataset: str) -> Any:
    if args.no_progress or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]
    except ImportError:  # the bar is a nicety: install loghandler[cli] to get it
        return None
    return tqdm(unit=" events", unit_scale=True, desc=f"ingest {dataset}", leave=False)


def register(sub: Any, conn: _Parser) -> dict[str, argparse.ArgumentParser]:
    """Add ``ingest`` to the command line."""
    ingest = sub.add_parser(
        "ingest", parents=[conn], help="ship NDJSON, JSON or text lines to a dataset",
        usage="loghandler ingest [-d DATASET | DATASET] [FILE ...] [options]",
        description="Ship events to a dataset. Each FILE (or stdin) is NDJSON (one object per "
                    "line), JSON (an array of objects, or objects, in any layout) or plain text "
                    "(each line becomes {\"message\": line}) or CSV with a header line (--format "
                    "csv, or a .csv name); gzip is decompressed. The "
                    "dataset is -d NAME, else the first argument when it is not a file "
                    "(an existing path, one with a /, or a name ending in "
                    f"{', '.join(_INPUT_SUFFIXES)}), else LOGHANDLER_DATASET.")
    ingest.add_argument("inputs", nargs="*", metavar="FILE",
                        help="input files (gzip or not); - or none: stdin")
    ingest.add_argument("-d", "--dataset", default=None,
                        help="dataset to ship to (default: LOGHANDLER_DATASET)")
    ingest.add_argument("--format", choices=FORMATS, default="auto",
                        help="input format (default auto: judged by parsing the start)")
    # 10,000 events a request (the service's most): a tenth of the requests of 1,000, and the
    # service's work per request spread over ten times the events.
    ingest.add_argument("--batch-size", type=int, default=10_000,
                        help="events per request (default 10,000)")
    ingest.add_argument("--max-retries", type=int, default=5,
                        help="retries of a failed request (default 5); a refused connection "
                             "at the start is retried twice within 1.5 s, then ingest stops")
    ingest.add_argument("--no-progress", action="store_true", help="no progress bar")
    ingest.add_argument("--timestamp-field", metavar="NAME",
                        help="the field that holds each event's time (the service reads it "
                             "as _time)")
    ingest.add_argument("--timestamp-format", metavar="FORMAT", default=None,
                        help="the layout of that field's times: a strftime format "
                             "('%%d/%%b/%%Y:%%H:%%M:%%S %%z') or Go's reference-time form "
                             "('02/Jan/2006:15:04:05 -0700'); default: RFC 3339 or epoch "
                             "numbers")
    ingest.add_argument("--field", action="append", type=_field_arg, default=[],
                        metavar="KEY=VALUE", help="add this field (a string) to every event "
                        "that lacks it; repeatable")
    ingest.set_defaults(func=cmd_ingest)
    return {"ingest": ingest}
