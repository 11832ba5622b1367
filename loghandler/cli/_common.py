"""What every command shares: the errors and exit statuses, output, the parser class, the
connection options and the client built from them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from .._output import register_secret, stderr_line

EXIT_OK, EXIT_SERVICE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A usage or configuration problem: exit status 2."""


class Failure(Exception):
    """A service problem already explained: exit status 1."""


def _err(message: str) -> None:
    stderr_line(f"loghandler: {message}")


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _Parser(argparse.ArgumentParser):
    # The parsers of the commands ("ingest", "views list", ...), for messages about their options.
    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block plus the error; a mistyped command gets a
        # suggestion, as a mistyped option does.
        import re

        m = re.match(r"argument \w+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:
            import difflib

            choices = re.findall(r"'([^']*)'", m.group(2)) or m.group(2).split(", ")
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else (
                f" (one of: {', '.join(choices)})")
            _err(f"unknown command {m.group(1)!r}{hint}")
            raise SystemExit(EXIT_USAGE)
        _err(f"{message} (see: {self.prog} --help)")
        raise SystemExit(EXIT_USAGE)


def _connection_options() -> _Parser:
    # SUPPRESS: the options work before or after the command without one erasing the other.
    p = _Parser(add_help=False)
    g = p.add_argument_group("connection (default: the LOGHANDLER_* environment variables)")
    g.add_argument("--url", default=argparse.SUPPRESS, help="base address (LOGHANDLER_URL)")
    g.add_argument("--token", default=argparse.SUPPRESS,
                   help="token (LOGHANDLER_TOKEN; prefer the variable: flags show in ps)")
    g.add_argument("--org-id", default=argparse.SUPPRESS, help="organization id "
                   "(LOGHANDLER_ORG_ID), needed with a personal access token")
    g.add_argument("--region", default=argparse.SUPPRESS, help="us or eu (LOGHANDLER_REGION)")
    g.add_argument("--allow-http", action="store_true", default=argparse.SUPPRESS,
                   help="allow plain http:// to a host other than loopback")
    return p


def _client(args: argparse.Namespace) -> Any:
    from .._wire.client import Client

    token = getattr(args, "token", None)
    register_secret(token)
    return Client(token, org_id=getattr(args, "org_id", None), url=getattr(args, "url", None),
                  region=getattr(args, "region", None),
                  allow_http=bool(getattr(args, "allow_http", False)))


def _load_json_file(path: str, flag: str) -> Any:
    """The JSON in ``path`` ("-": stdin), or a UsageError naming the flag."""
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{flag} {path} is not valid JSON: {exc}") from None


def _refused_token(exc: BaseException, url: str | None = None) -> str | None:
    """A 401/403 in the command line's words (the library's speaks of arguments), else None."""
    from .._errors import AuthenticationError

    if not isinstance(exc, AuthenticationError):
        return None
    at = f" at {url}" if url else ""
    return (f"the service{at} refused the token (HTTP {exc.status}): check --token or "
            "LOGHANDLER_TOKEN (a personal access token also needs --org-id)")


def _cell(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"
