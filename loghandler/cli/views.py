"""``loghandler views list|get|create|update|delete``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._common import (
    EXIT_OK,
    UsageError,
    _cell,
    _client,
    _load_json_file,
    _out,
    _Parser,
)


def cmd_views_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        views = client.views.list()
    if args.json:
        _out(json.dumps([v.to_dict() for v in views], indent=2, ensure_ascii=False))
        return EXIT_OK
    if not views:
        _out("no views")
        return EXIT_OK
    rows = [("ID", "NAME", "DATASETS", "QUERY")] + [
        (v.id or "-", _cell(v.name, 30), _cell(", ".join(v.datasets), 30),
         _cell(v.apl_query, 60)) for v in views]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        _out("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
    return EXIT_OK


_FLAG_FIELDS = ("name", "apl_query", "description", "shared_by_org", "shared_by_org_name")


def cmd_views_update(args: argparse.Namespace) -> int:
    from .._wire.views import FIELDS, View

    changes: dict[str, Any] = {}
    if args.from_json:
        changes.update(_read_view_json(args.from_json, FIELDS))
    for name in _FLAG_FIELDS:
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    if args.datasets is not None:
        changes["datasets"] = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if not changes:
        raise UsageError("nothing to update: give --name, --apl-query, --description, "
                         "--datasets, ... or --from-json FILE")
    with _client(args) as client:
        updated: View = client.views.update(args.id, **changes)
    if args.json:
        _out(json.dumps(updated.to_dict(), indent=2, ensure_ascii=False))
    else:
        _out(f"updated view {updated.id}:")
        _print_view(updated)
    return EXIT_OK


def _show_view(view: Any, as_json: bool, title: str) -> None:
    if as_json:
        _out(json.dumps(view.to_dict(), indent=2, ensure_ascii=False))
    else:
        _out(title)
        _print_view(view)


def cmd_views_get(args: argparse.Namespace) -> int:
    with _client(args) as client:
        view = client.views.get(args.id)
    _show_view(view, args.json, f"view {view.id}:")
    return EXIT_OK


def cmd_views_create(args: argparse.Namespace) -> int:
    from .._wire.views import View

    if not args.name.strip() or not args.apl_query.strip():
        raise UsageError("--name and --apl-query must not be empty")
    datasets = [d.strip() for d in (args.datasets or "").split(",") if d.strip()]
    view = View(name=args.name, apl_query=args.apl_query, datasets=datasets,
                description=args.description or "")
    with _client(args) as client:
        created = client.views.create(view)
    _show_view(created, args.json, f"created view {created.id or '(no id returned)'}:")
    return EXIT_OK


def cmd_views_delete(args: argparse.Namespace) -> int:
    with _client(args) as client:
        client.views.delete(args.id)
    _out(f"deleted view {args.id}")
    return EXIT_OK


def _read_view_json(path: str, fields: dict[str, str]) -> dict[str, Any]:
    data = _load_json_file(path, "--from-json")
    if not isinstance(data, dict):
        raise UsageError(f"--from-json {path} must hold one JSON object (a view)")
    by_json = {js: py for py, js in fields.items()}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key == "id":
            continue
        py = by_json.get(key)
        if py is None:
            raise UsageError(f"--from-json {path}: unknown view field {key!r}; the fields are "
                             f"{', '.join(fields.values())}")
        ok = (isinstance(value, list) and all(isinstance(d, str) for d in value)
              if py == "datasets" else isinstance(value, str))
        if not ok:
            kind = "a list of strings" if py == "datasets" else "a string"
            raise UsageError(f"--from-json {path}: {key} must be {kind}")
        changes[py] = value
    return changes


def _print_view(view: Any) -> None:
    for label, value in (("name", view.name), ("datasets", ", ".join(view.datasets)),
                         ("apl query", view.apl_query), ("description", view.description),
                         ("shared by org", view.shared_by_org),
                         ("shared by org name", view.shared_by_org_name)):
        _out(f"  {label + ':':<20}{value}")


def _no_action(args: argparse.Namespace) -> int:
    raise UsageError("views needs an action: list, get, create, update or delete "
                     "(see: loghandler views --help)")


def register(sub: Any, conn: _Parser) -> dict[str, argparse.ArgumentParser]:
    """Add ``views`` and its actions to the command line."""
    views = sub.add_parser("views", help="list, show, create, update or delete views")
    views.set_defaults(func=_no_action)
    vsub = views.add_subparsers(dest="views_command", metavar="ACTION", parser_class=_Parser)
    vlist = vsub.add_parser("list", parents=[conn], help="list the views")
    vlist.add_argument("--json", action="store_true", help="print the service's JSON")
    vlist.set_defaults(func=cmd_views_list)
    vup = vsub.add_parser("update", parents=[conn], help="update a view",
                          description="Update a view: fields not given keep their value.")
    vup.add_argument("id", metavar="ID")
    vup.add_argument("--name")
    vup.add_argument("--apl-query")
    vup.add_argument("--description")
    vup.add_argument("--datasets", metavar="A,B", help="comma-separated dataset names")
    vup.add_argument("--shared-by-org")
    vup.add_argument("--shared-by-org-name")
    vup.add_argument("--from-json", metavar="FILE",
                     help="view fields as the service's JSON object (- for stdin); flags win")
    vup.add_argument("--json", action="store_true", help="print the result as JSON")
    vup.set_defaults(func=cmd_views_update)
    vget = vsub.add_parser("get", parents=[conn], help="show one view")
    vget.add_argument("id", metavar="ID")
    vget.add_argument("--json", action="store_true", help="print the service's JSON")
    vget.set_defaults(func=cmd_views_get)
    vnew = vsub.add_parser("create", parents=[conn], help="create a view",
                           description="Create a view; the service gives it its id.")
    vnew.add_argument("--name", required=True)
    vnew.add_argument("--apl-query", required=True)
    vnew.add_argument("--datasets", metavar="A,B", help="comma-separated dataset names")
    vnew.add_argument("--description")
    vnew.add_argument("--json", action="store_true", help="print the result as JSON")
    vnew.set_defaults(func=cmd_views_create)
    vdel = vsub.add_parser("delete", parents=[conn], help="delete a view")
    vdel.add_argument("id", metavar="ID")
    vdel.set_defaults(func=cmd_views_delete)
    return {"views": views, "views list": vlist, "views update": vup, "views get": vget,
            "views create": vnew, "views delete": vdel}
