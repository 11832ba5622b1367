"""``loghandler doctor``: the address, the token, the dataset and the clock, checked in one step.

Each check prints one line, ``ok:`` with what was found or ``problem:`` with what to do, and
the command exits 1 when any check found a problem. Nothing is written to the service.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from .._status import AUTH, is_success
from ._common import EXIT_OK, EXIT_SERVICE, Failure, UsageError, _client, _out, _Parser

__all__ = ["cmd_doctor", "register"]

# A clock this far from the service's makes _time wrong (and queries by time miss events).
MAX_SKEW = 60.0


def _source(args: argparse.Namespace, flag: str, name: str, env: str) -> str:
    return flag if getattr(args, name, None) else env


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.dataset and args.positional_dataset and args.dataset != args.positional_dataset:
        raise UsageError(f"two datasets: {args.positional_dataset} and -d {args.dataset}: "
                         "give one")
    from .._errors import ConfigurationError, TransportError

    problems = 0

    def ok(text: str) -> None:
        _out(f"ok: {text}")

    def problem(text: str) -> None:
        nonlocal problems
        problems += 1
        _out(f"problem: {text}")

    try:
        client = _client(args)
    except ConfigurationError as exc:
        problem(str(exc))
        return EXIT_SERVICE
    url_from = _source(args, "--url", "url", "LOGHANDLER_URL")
    token_from = _source(args, "--token", "token", "LOGHANDLER_TOKEN")
    with client:
        try:
            started = time.time()
            resp = client.send("GET", "/v1/datasets", timeout=10.0)
            finished = time.time()
        except TransportError as exc:
            problem(f"{exc}: check {url_from}, and that the service is up")
            _out("(the token, the dataset and the clock need an answer: not checked)")
            return EXIT_SERVICE
        ok(f"the service answers at {client.url} (from {url_from}) in "
           f"{(finished - started) * 1000:.0f} ms")
        names: list[str] | None = None
        if resp.status in AUTH:
            problem(f"the service refused the token from {token_from} (HTTP {resp.status}): "
                    "check it (a personal access token also needs --org-id)")
        elif is_success(resp.status) and isinstance(resp.body, list):
            ok(f"the token (from {token_from}) is accepted")
            names = sorted(d["name"] for d in resp.body
                           if isinstance(d, dict) and isinstance(d.get("name"), str))
        else:
            problem(f"listing datasets answered HTTP {resp.status}: check that {url_from} is "
                    "the service's base address (without /v1)")
        dataset = (args.dataset or args.positional_dataset
                   or os.environ.get("LOGHANDLER_DATASET") or None)
        if dataset is None:
            _out("(no dataset given: pass -d NAME or set LOGHANDLER_DATASET to check one)")
        elif names is not None:
            if dataset in names:
                ok(f"dataset {dataset!r} exists")
            else:
                listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
                known = f" (there are {listed})" if names else ""
                problem(f"dataset {dataset!r} does not exist{known}: create it (loghandler "
                        f"datasets create {dataset}) or check the name")
        skew = _skew(resp.headers.get("Date"), (started + finished) / 2)
        if skew is None:
            _out("(the service sent no Date header: the clock is not checked)")
        elif abs(skew) > MAX_SKEW:
            problem(f"this machine's clock is {abs(skew):.0f} s "
                    f"{'ahead of' if skew > 0 else 'behind'} the service's: events get wrong "
                    "times; set the clock (NTP)")
        else:
            ok(f"the clock agrees with the service's (within {max(1.0, abs(skew)):.0f} s)")
    _out(f"(the logging call's hot path: {_hot_path()}; gzip: {_gzip()})")
    if problems:
        raise Failure("")
    return EXIT_OK


def _hot_path() -> str:
    from .. import _compiled

    if _compiled.ACTIVE:
        return "compiled"
    return f"pure Python: {_compiled.WHY_PYTHON}"


def _gzip() -> str:
    """What compresses the batches (the engine's posting.py picks isal when it is installed)."""
    import importlib.util

    if importlib.util.find_spec("isal") is not None:
        return "ISA-L (isal)"
    return "zlib; pip install 'loghandler-ingest[fast]' for ISA-L's, about five times faster"


def _skew(date: Any, now: float) -> float | None:
    """Seconds this clock is ahead of the service's ``Date`` (1 s resolution), or None."""
    if not isinstance(date, str):
        return None
    import email.utils

    try:
        theirs = email.utils.parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    diff = now - theirs
    return 0.0 if abs(diff) < 1.0 else diff  # a Date header has whole seconds


def register(sub: Any, conn: _Parser) -> dict[str, argparse.ArgumentParser]:
    """Add ``doctor`` to the command line."""
    doctor = sub.add_parser(
        "doctor", parents=[conn], help="check the address, token, dataset and clock",
        description="Check, in one step, that the service answers at the address, accepts the "
                    "token, has the dataset, and that this machine's clock agrees with its. "
                    "Each line says what is right or what to do; nothing is written.")
    doctor.add_argument("-d", "--dataset", default=None,
                        help="the dataset to check (default: LOGHANDLER_DATASET)")
    # As tail and ingest take it: `loghandler doctor fastapi`.
    doctor.add_argument("positional_dataset", nargs="?", default=None, metavar="DATASET",
                        help="the dataset to check (the same as -d)")
    doctor.set_defaults(func=cmd_doctor)
    return {"doctor": doctor}
