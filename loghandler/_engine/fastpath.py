"""The callers' fast-path contract: what a front end hands the compiled code (``_speedups.c``)
so that it can queue an event on the caller's thread, as named types.

The compiled code reads these by position (a NamedTuple is a tuple: one index each, no lookup)
and checks, once in ``configure``, that each type's fields are the names it reads, in its
order (``FIELDS``: C holds the same list); tests/test_fastpath.py pins them too. Nothing else
crosses the boundary: the front end's own steps the compiled code falls back to come in the
``FastPath`` as callables (``queue``, ``invalid``, ``python_path``), never as names to look up,
and the one attribute it reads from a front end is named here (``ATTRIBUTE``).

- ``ItemPlan``: how a plain record's event is written as its final JSON on the caller's thread
  (a pre-encoded queue item, events.py "Wire items"), computed from the shipper's options and
  its finisher by ``item_plan``; None when the flusher must see each event.
- ``SamplePlan``, ``HoldPlan``, ``CallerPlan``: what the caller decides before queueing
  (sampling.py's tables, hold-until-error's level and ``take``, whether the span's ids ship).
- ``FastPath``: a front end's whole contract, built by ``fast_path`` (None on the Python path).

The ledger's part (what the compiled code does with the queue, never more): it reads
``gate``, a list ``[queue, fast_len]`` that only the ledger writes; it appends an item to
``queue`` (a ``deque``) without the lock only while ``len(queue) < fast_len`` and the item's
size is at most ``FAST_ITEM_BYTES``, exactly as ``Intake.offer`` does; anything else goes to
``put(item, size)``, the locked slow path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .. import _encoding as encoding
from .model import FAST_HEAD, PLAIN

if TYPE_CHECKING:
    from .._config import ShipperOptions
    from .shaping import Finisher

__all__ = ["ATTRIBUTE", "FIELDS", "CallerPlan", "FastPath", "HoldPlan",
           "ItemPlan", "LedgerContract", "QueueStep", "SamplePlan", "fast_path", "item_plan"]

# The front end's attribute the compiled code reads its FastPath from (None: none).
ATTRIBUTE = "_fast_path"


class LedgerContract(Protocol):
    """What the compiled path may use of the ledger (the module docstring says how): the
    ledger's intake face (``Intake``) satisfies it."""

    gate: list[Any]

    def put(self, item: Any, size: int) -> bool: ...


class QueueStep(Protocol):
    """The front end's queueing of a built event dict with the caller's context and policies
    (``FrontEnd._queue``, bound): what the compiled code calls when an event is not a plain
    record's (a context or a policy in play)."""

    def __call__(self, event: dict[Any, Any], size: int, level: Any, trace: bool = True,
                 sampled: bool = False) -> bool: ...


class ItemPlan(NamedTuple):
    """How the compiled writer writes a plain event as its final JSON (``item_plan``)."""

    fragment: bytes  # fields= as JSON members to append (``,"k":v`` each)
    statics: frozenset[str]  # fields='s names
    clean: set[Any] | None  # the scrubber's keys known clean (None: no scrubber)
    learn: Callable[[str], bool] | None  # the scrubber's learn (teaches a new clean key)
    exclude: frozenset[str]  # exclude_fields
    head_skip: int  # a bit per head field excluded (FAST_HEAD's order)
    renames: tuple[bytes, ...]  # field_names: each new name's ``,"name":``, in order
    head_renames: tuple[int, ...]  # the rename of each head field (-1: none)
    span_renames: tuple[int, int]  # the rename of trace_id and span_id (-1: none)
    renamed: frozenset[str]  # every name renamed or renamed to (elsewhere: the flusher's)
    moved: tuple[tuple[str, bytes] | None, ...]  # per rename: a fields= field's whole member
    rename_index: dict[str, int]  # each rename's index by old name
    members: tuple[tuple[str, bytes], ...]  # fields= member by member (where an event lacks it)


class SamplePlan(NamedTuple):
    """Sampling's tables as the compiled code decides with them (``Sampler.plan``)."""

    levels: dict[Any, float]
    loggers: tuple[tuple[str, float], ...]
    rand: Callable[[], float]
    trace_key: bool  # a trace id decides (else the random source)
    static_fraction: float | None  # fields='s trace id's fraction
    drop: Callable[[], bool]  # counts one event sampled out
    trace_fraction: Callable[[Any], float | None]
    keep_level: Any
    kept_levels: dict[Any, bool]
    kept: Callable[[Any], bool]


class HoldPlan(NamedTuple):
    """Hold-until-error as the compiled code asks it (``Hold``): its common case (room in a
    buffer that exists) held in C, the rest by ``take``."""

    level: int
    take: Callable[[Any, int, int], bool]
    entry: Any  # hold._HELD: the context entry's Held
    key: Any  # the Hold, its buffers' key
    counts: list[Any]  # Hold.counts, read and updated in place
    ring: type  # the buffers' type (deque)


class CallerPlan(NamedTuple):
    """What the caller decides before queueing, on the compiled path."""

    trace_context: bool  # the current span's ids ship
    sample: SamplePlan | None
    hold: HoldPlan | None


class FastPath(NamedTuple):
    """A front end's compiled fast path (``fast_path``)."""

    gate: list[Any]  # the ledger's [queue, fast_len]
    plan: ItemPlan | None  # None: events are dicts, which the flusher finishes
    put: Callable[[Any, int], bool]  # the ledger's locked put
    caller: CallerPlan
    queue: QueueStep  # FrontEnd._queue, bound
    invalid: Callable[[], bool]  # FrontEnd._invalid, bound: counts an event not readable
    python_path: Callable[..., Any]  # the front end's Python path, bound: what C leaves


# Each type's fields in the order the compiled code reads them (configure checks the same).
FIELDS: dict[str, tuple[str, ...]] = {
    cls.__name__: cls._fields for cls in (ItemPlan, SamplePlan, HoldPlan, CallerPlan, FastPath)}


def fast_path(intake: LedgerContract, plan: ItemPlan | None, caller: CallerPlan,
              queue: QueueStep, invalid: Callable[[], bool], python_path: Callable[..., Any]
              ) -> FastPath:
    """A front end's fast path (the module docstring)."""
    return FastPath(intake.gate, plan, intake.put, caller, queue, invalid, python_path)


def item_plan(options: ShipperOptions, finish: Finisher | None) -> ItemPlan | None:
    """The ``ItemPlan`` for a shipper's options and finisher; None when the flusher must see
    each event: a ``json_default``, scanning text for secrets, a ``fields=`` value that is not
    plain or whose name is a secret's or a new name, a field renamed to the name of a head
    field that stays. (Repeats read such items too: ``events.wire_view``.)"""
    opts = options
    if opts.json_default is not None:
        return None
    static = dict(opts.fields or {})
    if any(type(v) not in PLAIN for v in static.values()):
        return None
    exclude = frozenset(opts.exclude_fields)
    renames = tuple((opts.field_names or {}).items())
    olds = {old for old, _ in renames}
    news = {new for _, new in renames}
    if news & static.keys() or any(new in FAST_HEAD and new not in olds
                                   and new not in exclude for _, new in renames):
        return None
    clean: set[Any] | None = None
    learn = None
    if finish is not None:
        scrub = finish.wire_scrubber()
        if scrub is None:
            return None
        clean, learn = scrub
        # The head's, the span's and fields='s keys taught now (a secret's name among
        # fields= keeps every event a dict, scrubbed on the flusher).
        if learn is not None and not all(
                learn(key) for key in (*FAST_HEAD, "trace_id", "span_id", *static)
                if key not in exclude):
            return None
    head_skip = sum(1 << i for i, key in enumerate(FAST_HEAD) if key in exclude)
    index = {old: i for i, (old, _) in enumerate(renames)}

    def member(key: str, value: Any) -> bytes:
        return b"," + encoding.encode(key) + b":" + encoding.encode(value)

    # The event's own fields win over fields= (item_events): the head's always do. A field of
    # fields= renamed goes last, at its rename's place.
    fragment = b"".join(member(key, value) for key, value in static.items()
                        if key not in FAST_HEAD and key not in exclude and key not in olds)
    moved = tuple((old, member(new, static[old]))
                  if old in static and old not in FAST_HEAD and old not in exclude else None
                  for old, new in renames)
    # (a field of fields= renamed is the writer's; its old name elsewhere, the flusher's)
    renamed = frozenset((olds | news) - {old for old in olds if old in static})
    # fields= member by member, each where the event lacks it: for an event with no head of
    # its own (structlog's, an OpenTelemetry record's), or one with a field fields= names too
    # (the event's own value wins).
    members = tuple((key, member(key, value)) for key, value in static.items()
                    if key not in exclude and key not in olds)
    return ItemPlan(fragment, frozenset(static), clean, learn, exclude, head_skip,
                    tuple(b"," + encoding.encode(new) + b":" for _, new in renames),
                    tuple(index.get(key, -1) for key in FAST_HEAD),
                    (index.get("trace_id", -1), index.get("span_id", -1)), renamed, moved,
                    index, members)
