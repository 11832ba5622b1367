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
    assert fastpath.HoldPlan._fields == ("level", "take")
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
