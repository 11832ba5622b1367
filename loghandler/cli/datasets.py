"""``loghandler datasets list|create|delete``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._common import EXIT_OK, _cell, _client, _out, _Parser

__all__ = ["register"]


def cmd_datasets_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        datasets = client.datasets.list()
    if args.json:
        _out(json.dumps(datasets, ensure_ascii=False))
        return EXIT_OK
    if not datasets:
        _out("no datasets")
        return EXIT_OK
    rows = [("NAME", "CREATED", "DESCRIPTION")] + [
        (_cell(str(d.get("name", "")), 40), str(d.get("created") or ""),
         _cell(str(d.get("description") or ""), 60)) for d in datasets]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        _out("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def cmd_datasets_create(args: argparse.Namespace) -> int:
    with _client(args) as client:
        created = client.datasets.create(args.name, args.description or "")
    _out(f"created dataset {created.get('name', args.name)!r}")
    return EXIT_OK


def cmd_datasets_delete(args: argparse.Namespace) -> int:
    with _client(args) as client:
        client.datasets.delete(args.name)
    _out(f"deleted dataset {args.name!r} and its events")
    return EXIT_OK


def _no_action(args: argparse.Namespace) -> int:
    from ._common import UsageError

    raise UsageError("datasets needs an action: list, create or delete "
                     "(see: loghandler datasets --help)")


def register(sub: Any, conn: _Parser) -> dict[str, argparse.ArgumentParser]:
    """Add ``datasets`` and its actions to the command line."""
    datasets = sub.add_parser("datasets", help="list, create or delete datasets")
    datasets.set_defaults(func=_no_action)
    dsub = datasets.add_subparsers(dest="datasets_command", metavar="ACTION",
                                   parser_class=_Parser)
    dlist = dsub.add_parser("list", parents=[conn], help="list the datasets")
    dlist.add_argument("--json", action="store_true", help="print the service's JSON")
    dlist.set_defaults(func=cmd_datasets_list)
    dnew = dsub.add_parser("create", parents=[conn], help="create a dataset")
    dnew.add_argument("name", metavar="NAME")
    dnew.add_argument("--description", default="")
    dnew.set_defaults(func=cmd_datasets_create)
    ddel = dsub.add_parser("delete", parents=[conn],
                           help="delete a dataset and every event in it")
    ddel.add_argument("name", metavar="NAME")
    ddel.set_defaults(func=cmd_datasets_delete)
    return {"datasets": datasets, "datasets list": dlist, "datasets create": dnew,
            "datasets delete": ddel}
