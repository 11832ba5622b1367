"""The legacy query (``POST /v1/datasets/{name}/query``, the real service's "Run query
(legacy)", operation queryDataset of its API v1) as APL over the same store: a filter tree, a
list of aggregations grouped by fields and binned by the resolution, virtual fields,
projections, an order and a limit. The JS client's ``queryLegacy()`` and the Go client's
``Datasets.QueryLegacy`` send it.

The answer is the legacy result: ``status``, ``matches`` (events, when there is no
aggregation), ``buckets.series`` (the aggregations per time bin) and ``buckets.totals`` (over
the whole range).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .ingest import HttpError

__all__ = ["LegacyQuery", "translate"]

# Aggregations of the legacy query the local service runs, and their APL.
_AGGREGATIONS = {"count": "count()", "distinct": "dcount({f})", "sum": "sum({f})",
                 "avg": "avg({f})", "min": "min({f})", "max": "max({f})"}
_UNSUPPORTED = ("topk", "histogram", "stdev", "variance", "argmin", "argmax", "makeset",
                "makelist", "rate")
# Filter operators: the reference's names and the Go client's.
_COMPARE = {"eq": "==", "==": "==", "ne": "!=", "!=": "!=", "gt": ">", ">": ">",
            "gte": ">=", ">=": ">=", "lt": "<", "<": "<", "lte": "<=", "<=": "<="}
_STRING_OPS = {"starts-with": "startswith", "ends-with": "endswith", "contains": "contains"}
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_UNIT_US = {"h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000, "ms": 1_000, "us": 1,
            "µs": 1, "ns": 0.001}
MAX_FILTER_NODES = 200


def field(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise HttpError(400, "a legacy query names each field as a non-empty string")
    return "['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"


def literal(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and value != value:
            raise HttpError(400, "a filter value must be a number, not NaN")
        return json.dumps(value)  # APL's double-quoted strings take JSON's escapes
    raise HttpError(400, f"a filter value must be a string, number, boolean or null, not "
                         f"{type(value).__name__}")


def resolution_us(text: Any) -> int | None:
    """A Go duration (``1m0s``, ``15s``, ``100ms``) in microseconds; None for ``auto``/none."""
    if text in (None, "", "auto", "0s", 0):
        return None
    if not isinstance(text, str):
        raise HttpError(400, 'resolution is "auto" or a duration, as in "1m0s" or "15s"')
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_US[m.group(2)]
        pos = m.end()
    if pos != len(text) or total < 1:
        raise HttpError(400, f'resolution {text!r} is not a duration: use "auto", "1m0s", '
                             f'"15s", ...')
    return int(total)


class _Filter:
    def __init__(self) -> None:
        self.nodes = 0

    def __call__(self, node: Any) -> str:
        self.nodes += 1
        if self.nodes > MAX_FILTER_NODES:
            raise HttpError(400, f"the filter has more than {MAX_FILTER_NODES} parts")
        if not isinstance(node, dict):
            raise HttpError(400, "a filter is an object: {\"op\", \"field\", \"value\", "
                                 "\"children\"}")
        op = node.get("op")
        children = node.get("children") or []
        if not isinstance(children, list):
            raise HttpError(400, "a filter's children are a list of filters")
        parts = [self(child) for child in children]
        if op in ("and", "or", "not"):
            if not parts:
                return "true" if op != "or" else "false"
            joined = f" {op if op != 'not' else 'and'} ".join(f"({p})" for p in parts)
            return f"not({joined})" if op == "not" else joined
        if op in (None, ""):
            if parts:
                return " and ".join(f"({p})" for p in parts)
            return "true"
        own = self.condition(str(op), node)
        # An operator on a field with children: its condition and theirs.
        return " and ".join([f"({own})", *(f"({p})" for p in parts)]) if parts else own

    def condition(self, op: str, node: dict[str, Any]) -> str:
        name = field(node.get("field"))
        value = node.get("value")
        cs = bool(node.get("caseSensitive"))
        if op == "exists":
            return f"isnotnull({name})"
        if op == "not-exists":
            return f"isnull({name})"
        negated = op.startswith("not-")
        base = op[4:] if negated else op
        if op in _COMPARE:
            cmp = _COMPARE[op]
            if isinstance(value, str) and not cs and cmp in ("==", "!="):
                cmp = "=~" if cmp == "==" else "!~"  # the legacy query folds case by default
            return f"{name} {cmp} {literal(value)}"
        if base in _STRING_OPS:
            word = _STRING_OPS[base] + ("_cs" if cs else "")
            return f"{name} {'!' if negated else ''}{word} {literal(str(value))}"
        if base == "regexp":
            cond = f"{name} matches regex {literal(str(value))}"
            return f"not({cond})" if negated else cond
        raise HttpError(400, f"unsupported filter operator {op!r}")


class LegacyQuery:
    """A legacy query translated: ``events`` (the APL of the matches, when there is no
    aggregation), or ``totals`` and ``series`` (the aggregations over the range and per time
    bin), with ``aliases`` mapping each aggregation's column to the alias it is answered as."""

    def __init__(self, dataset: str, body: Any) -> None:
        if not isinstance(body, dict):
            raise HttpError(400, "a legacy query is a JSON object with startTime, endTime "
                                 "and resolution")
        source = "['" + dataset.replace("\\", "\\\\").replace("'", "\\'") + "']"
        pipe = [source]
        for vf in body.get("virtualFields") or []:
            if not isinstance(vf, dict) or not isinstance(vf.get("expr"), str):
                raise HttpError(400, 'a virtual field is {"alias": "name", "expr": "APL"}')
            pipe.append(f"extend {field(vf.get('alias'))} = ({vf['expr']})")
        if body.get("filter"):
            pipe.append(f"where {_Filter()(body['filter'])}")
        order = body.get("order") or []
        if not isinstance(order, list) or not all(isinstance(o, dict) for o in order):
            raise HttpError(400, 'order is a list of {"field": "name", "desc": true}')
        limit = body.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise HttpError(400, "limit must be a whole number")
        aggregations = body.get("aggregations") or []
        groups = body.get("groupBy") or []
        if not isinstance(groups, list):
            raise HttpError(400, "groupBy is a list of field names")
        self.aliases: dict[str, str] = {}
        self.events: str | None = None
        self.totals: str | None = None
        self.series: str | None = None
        if not aggregations:
            sort = [f"{field(o.get('field'))} {'desc' if o.get('desc') else 'asc'}"
                    for o in order] or ["_time desc"]
            pipe.append("sort by " + ", ".join(sort))
            projections = body.get("project") or []
            if projections:
                items = []
                for p in projections:
                    if not isinstance(p, dict):
                        raise HttpError(400, 'project is a list of {"field", "alias"}')
                    alias = p.get("alias") or p.get("field")
                    items.append(f"{field(alias)} = {field(p.get('field'))}")
                pipe.append("project " + ", ".join(items))
            if limit:
                pipe.append(f"take {limit}")
            self.events = " | ".join(pipe)
            return
        aggs = []
        for i, agg in enumerate(aggregations):
            if not isinstance(agg, dict) or not isinstance(agg.get("op"), str):
                raise HttpError(400, 'an aggregation is {"op": "count", "field": "*", '
                                     '"alias": "name"}')
            op, name = agg["op"], agg.get("field") or "*"
            if op in _UNSUPPORTED or (op not in _AGGREGATIONS and op != "percentiles"):
                raise HttpError(400, f"the legacy aggregation {op!r} is not supported by the "
                                     f"local service; it runs {', '.join(_AGGREGATIONS)}, "
                                     f"percentiles")
            if op == "percentiles":
                ps = agg.get("argument")
                if not isinstance(ps, list) or not ps or not all(
                        isinstance(p, (int, float)) and not isinstance(p, bool) for p in ps):
                    raise HttpError(400, "percentiles takes a list of percentages as its "
                                         "argument")
                # One column per percentage; the first is answered under the alias.
                expr = f"percentile({field(name)}, {ps[0]})"
            elif op == "count":
                expr = "count()"
            else:
                expr = _AGGREGATIONS[op].format(f=field(name))
            column = f"a{i}"
            self.aliases[column] = agg.get("alias") or (op if op == "count" or name == "*"
                                                         else f"{op}_{name}")
            aggs.append(f"{column} = {expr}")
        by = [field(g) for g in groups]
        head = " | ".join(pipe)
        totals = f"{head} | summarize {', '.join(aggs)}" + (f" by {', '.join(by)}" if by else "")
        if order:
            names = {alias: column for column, alias in self.aliases.items()}
            sort = [f"{field(names.get(o.get('field'), o.get('field')))} "
                    f"{'desc' if o.get('desc') else 'asc'}" for o in order]
            totals += " | sort by " + ", ".join(sort)
        if limit:
            totals += f" | take {limit}"
        self.totals = totals
        step = resolution_us(body.get("resolution"))
        binned = f"bin(_time, {step}us)" if step else "bin_auto(_time)"
        self.series = f"{head} | summarize {', '.join(aggs)} by {', '.join([binned, *by])}"


def translate(dataset: str, body: Any) -> LegacyQuery:
    return LegacyQuery(dataset, body)


def rename(entries: list[dict[str, Any]], aliases: dict[str, str]) -> list[dict[str, Any]]:
    """Legacy buckets' groups with their aggregations under the query's aliases, each with
    its ``id``."""
    out = []
    for i, entry in enumerate(entries):
        out.append({"id": entry.get("id", i), "group": entry.get("group", {}),
                    "aggregations": [{"op": aliases.get(a["op"], a["op"]), "value": a["value"]}
                                     for a in entry.get("aggregations", [])]})
    return out
