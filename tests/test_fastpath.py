"""The callers' fast-path contract (loghandler/_engine/fastpath.py): named types whose fields
the compiled code reads by position. The order is pinned here and checked by the extension's
configure(), so a field moved on one side stops the extension from configuring rather than
being misread."""

from __future__ import annotations

import importlib.util
import os
from typing import Any, NamedTuple

import pytest

from loghandler import IngestHandler, IngestProcessor
from loghandler._engine import compiled, fastpath

PURE = os.environ.get("LOGHANDLER_PURE_PYTHON", "") not in ("", "0")


def test_the_contracts_fields_are_pinned() -> None:
    """Each type's fields, in the order _speedups.c reads them (its CONTRACT table)."""
    assert fastpath.ItemPlan._fields == (
        "fragment", "statics", "clean", "learn", "exclude", "head_skip", "renames",
        "head_renames", "span_renames", "renamed", "moved", "rename_index", "members")
    assert fastpath.SamplePlan._fields == (
        "levels", "loggers", "rand", "trace_key", "static_fraction", "drop", "trace_fraction",
        "keep_level", "kept_levels", "kept")
    assert fastpath.HoldPlan._fields == ("level", "take", "entry", "key", "counts", "ring")
    assert fastpath.CallerPlan._fields == ("trace_context", "sample", "hold")
    assert fastpath.FastPath._fields == (
        "gate", "plan", "put", "caller", "queue", "invalid", "python_path")
    assert compiled.table()["contract"] == (fastpath.ItemPlan, fastpath.SamplePlan,
                                            fastpath.HoldPlan, fastpath.CallerPlan,
                                            fastpath.FastPath)


def _fresh_extension() -> Any:
    spec = importlib.util.find_spec("loghandler._speedups")
    if spec is None or spec.loader is None:
        pytest.skip("the extension is not built")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a second instance, with its own (empty) state
    return module


@pytest.mark.skipif(PURE, reason="the extension is configured on the compiled path only")
def test_configure_refuses_a_contract_that_is_not_the_one_it_reads() -> None:
    """A type whose fields differ (two swapped, one missing) or a type in the wrong place is
    a ValueError naming the contract; the real table configures."""
    module = _fresh_extension()
    table = compiled.table()

    class Swapped(NamedTuple):
        level: Any
        hold: Any  # not HoldPlan's "take"

    Swapped.__name__ = "HoldPlan"
    swapped = (fastpath.ItemPlan, fastpath.SamplePlan, Swapped, fastpath.CallerPlan,
               fastpath.FastPath)
    shifted = (fastpath.SamplePlan, fastpath.ItemPlan, fastpath.HoldPlan,
               fastpath.CallerPlan, fastpath.FastPath)
    for bad in (swapped, shifted, table["contract"][:4], (tuple,) * 5):
        with pytest.raises(ValueError, match="contract"):
            module.configure(**{**table, "contract": bad})
    module.configure(**table)


@pytest.mark.skipif(PURE, reason="fast paths exist on the compiled path only")
def test_a_front_ends_fast_path_hands_over_its_own_steps_bound() -> None:
    """What the compiled code calls of a front end comes in its FastPath, bound to it: no
    method is looked up by a (private) name from C."""
    opts: dict[str, Any] = dict(token="t", url="http://127.0.0.1:9", flush_interval=3600)
    handler = IngestHandler("d", **opts)
    processor = IngestProcessor("d", **opts)
    try:
        for front in (handler, processor):
            fast = getattr(front, fastpath.ATTRIBUTE)
            assert type(fast) is fastpath.FastPath
            assert type(fast.caller) is fastpath.CallerPlan
            assert type(fast.plan) is fastpath.ItemPlan
            for step in (fast.queue, fast.invalid, fast.python_path):
                assert step.__self__ is front
    finally:
        handler.close()
        processor.close()


def test_the_item_plan_is_none_when_the_flusher_must_see_each_event() -> None:
    """A json_default, or text scanning for secrets: no item plan (events stay dicts)."""
    opts: dict[str, Any] = dict(token="t", url="http://127.0.0.1:9", flush_interval=3600)
    for extra in ({"json_default": str}, {"scrub_patterns": ["x+"]}):
        handler = IngestHandler("d", **opts, **extra)
        try:
            assert handler.shipper.item_plan() is None
        finally:
            handler.close()
    handler = IngestHandler("d", **opts, fields={"env": "prod"})
    try:
        plan = handler.shipper.item_plan()
        assert plan is not None and plan.statics == frozenset({"env"})
        assert plan.fragment == b',"env":"prod"'
    finally:
        handler.close()


@pytest.mark.skipif(PURE, reason="the extension is configured on the compiled path only")
def test_the_attribute_c_reads_is_the_one_configure_names() -> None:
    """C reads a front end's fast path under the name configure() hands it
    (fastpath.ATTRIBUTE), not a name of its own: configured with another name, the compiled
    call finds no fast path there and hands every call to its Python twin; with the table's, it
    takes the event itself."""
    module = _fresh_extension()
    table = compiled.table()
    python_calls: list[Any] = []

    def twin(self: Any, logger: Any, method: str, event_dict: dict[str, Any],
             sampled: bool = False) -> dict[str, Any]:
        python_calls.append(event_dict)
        return event_dict

    opts: dict[str, Any] = dict(token="t", url="http://127.0.0.1:9", flush_interval=3600)
    processor = IngestProcessor("d", **opts)
    try:
        queue = processor.shipper.intake.queue
        for name, by_python in (("no_such_attribute", True), (fastpath.ATTRIBUTE, False)):
            module.configure(**{**table, "fast_path_attribute": name})
            call = module.front_method("processor_call", twin)
            before, calls = len(queue), len(python_calls)
            call(processor, None, "info", {"event": "hello", "n": 1})
            assert (len(python_calls) == calls + 1) is by_python, name
            assert (len(queue) == before + 1) is not by_python, name
    finally:
        processor.close()


def test_c_names_no_private_attribute_of_the_package() -> None:
    """Every string literal of _speedups.c that starts with an underscore is an event key
    (``_time``) or a NamedTuple's ``_fields`` (public, though underscored): a private name of
    ours comes from configure(), and OpenTelemetry's attributes are read through their public
    ``copy()``, as otel.py reads them."""
    import re
    from pathlib import Path

    # The checkout's source: the matrix tests an installed copy, which has no C source.
    source = (Path(__file__).parents[1] / "loghandler" / "_speedups.c").read_text()
    literals = set(re.findall(r'"(_[A-Za-z_]+)', source.replace('\\"', "")))
    assert literals == {"_time", "_fields"}
