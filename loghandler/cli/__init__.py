"""The ``loghandler`` command: serve, ingest, views, query, tail.

One module per command group, each adding its commands with ``register(sub, conn)`` and naming
the function that runs each (``set_defaults(func=...)``); ``main`` parses and calls it.
Exit status: 0 success, 1 service error (or something not ingested), 2 usage or configuration
error. Every error is one line on stderr, written by ``output.stderr_line`` (which scrubs the
token) like every other line loghandler prints.
``import loghandler`` never imports this package; tqdm is imported only for a progress bar, and
the local service only by ``serve``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from .._errors import ConfigurationError, Error
from .._output import clip, register_secret
from .._wire.settings import speak_command_line
from . import datasets, doctor, ingest, query, serve, views
from ._common import (
    EXIT_OK,
    EXIT_SERVICE,
    EXIT_USAGE,
    Failure,
    UsageError,
    _connection_options,
    _err,
    _Parser,
    _refused_token,
)
from .query import _Follower, format_event_line, parse_span
from .reader import iter_events

__all__ = ["_Follower", "build_parser", "format_event_line", "iter_events", "main",
           "parse_span"]

# The command groups, in the order --help lists them.
GROUPS = (serve, ingest, datasets, views, query, doctor)


def build_parser() -> _Parser:
    conn = _connection_options()
    parser = _Parser(prog="loghandler", parents=[conn],
                     description="Ship events to a dataset, manage views, query and tail "
                                 "datasets, or run the local service.")
    parser.add_argument("--version", action="version", version=f"loghandler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.commands = {}
    for group in GROUPS:
        parser.commands.update(group.register(sub, conn))
    return parser


def _unknown_arguments(parser: _Parser, args: argparse.Namespace,
                       extras: list[str]) -> NoReturn:
    """One line on what was not understood, a suggestion, and the usage of that command."""
    import difflib

    name = " ".join(n for n in (args.command, getattr(args, "views_command", None),
                                getattr(args, "datasets_command", None)) if n)
    command = parser.commands.get(name, parser)
    options = [e for e in extras if e.startswith("-") and e != "-"]
    if options:
        given = options[0].split("=", 1)[0]
        # _actions: argparse has no public list of a parser's options (only its help text,
        # which would have to be parsed back); the attribute is stable since Python 3.2.
        actions = command._actions  # noqa: SLF001
        known = [o for a in actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else f" (see: {command.prog} --help)"
        _err(f"unknown option {given}{hint}")
    else:
        _err(f"unexpected argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)} "
             f"(see: {command.prog} --help)")
    sys.stderr.write(command.format_usage())
    raise SystemExit(EXIT_USAGE)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    speak_command_line(True)
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            # argparse cannot put files after an option back into `ingest DATASET FILE...`
            # (`ingest ds --token X a.log`): they come back as extras; only those are allowed.
            if args.command == "ingest" and not any(e.startswith("-") and e != "-"
                                                    for e in extras):
                args.inputs = [*args.inputs, *extras]
            else:
                _unknown_arguments(parser, args, extras)
        register_secret(getattr(args, "token", None))
        run = getattr(args, "func", None)
        if run is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(run(args))
    except (UsageError, ConfigurationError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except Failure as exc:
        if str(exc):
            _err(str(exc))
        return EXIT_SERVICE
    except Error as exc:
        _err(_refused_token(exc) or str(exc))
        return EXIT_SERVICE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        # `loghandler views list | head`: the reader left; not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the exit-time flush
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # never a traceback: one line, redacted
        _err(f"unexpected error ({type(exc).__name__}: {clip(str(exc), 80)}): please report it")
        return EXIT_SERVICE
    finally:
        speak_command_line(False)  # main() called in-process (tests): the library's words again


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
