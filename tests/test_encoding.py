"""The shared JSON encoder: every value becomes valid JSON, and orjson agrees with the stdlib."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import types
import uuid
from typing import Any, ClassVar

import pytest
from helpers import without_orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghandler import _encoding as encoding
from loghandler._encoding import dumps, encode, json_default, to_jsonable


class Color(enum.Enum):
    RED = "red"
    TUPLE = (1, 2)


class Level(enum.IntEnum):
    INFO = 20


class Mode(str, enum.Enum):
    FAST = "fast"


@dataclasses.dataclass
class Point:
    x: int
    y: float
    tags: list[str] = dataclasses.field(default_factory=list)
    scale: ClassVar[int] = 3
    computed: int = dataclasses.field(default=7, init=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Slotted:
    when: dt.date


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


class Plain:
    def __repr__(self) -> str:
        return "<Plain>"


class Money(float):
    pass


class Count(int):
    def __str__(self) -> str:
        return "many"


class Markup(str):
    def __str__(self) -> str:
        return "<overridden>"


Pair = collections.namedtuple("Pair", "a b")


def strict_loads(data: bytes | str) -> Any:
    """json.loads that also refuses NaN/Infinity, which are not JSON."""

    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(data, parse_constant=refuse)


def encode_std(value: Any) -> bytes:
    """``encode`` with the standard library's encoder in orjson's place (what runs without it)."""
    with without_orjson():
        return encode(value)


def both(value: Any) -> Any:
    """Encode on both paths; both must be valid JSON and parse equal. Returns the parsed value."""
    fast = encode(value)
    slow = encode_std(value)
    assert isinstance(fast, bytes) and isinstance(slow, bytes)
    parsed_fast, parsed_slow = strict_loads(fast), strict_loads(slow)
    assert parsed_fast == parsed_slow, (fast, slow)
    fast.decode("utf-8")  # valid UTF-8 on the wire
    # to_jsonable is the exact form: the strict stdlib encoder takes it as is.
    assert strict_loads(json.dumps(to_jsonable(value), allow_nan=False)) == parsed_slow
    return parsed_slow


def test_orjson_is_installed() -> None:
    """The comparison below is only meaningful with the accelerator present."""
    assert encoding.HAVE_ORJSON


class TestRules:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (dt.datetime(2024, 5, 1, 12, 30, 5, 123456, tzinfo=dt.timezone.utc),
             "2024-05-01T12:30:05.123456+00:00"),
            (dt.datetime(2024, 5, 1, 12, 30), "2024-05-01T12:30:00"),
            (dt.datetime(2024, 5, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, seconds=15))),
             "2024-05-01T00:00:00+05:00:15"),
            (dt.date(2024, 5, 1), "2024-05-01"),
            (dt.time(1, 2, 3), "01:02:03"),
            (dt.time(1, 2, 3, tzinfo=dt.timezone.utc), "01:02:03+00:00"),
            (decimal.Decimal("1.10"), "1.10"),
            (decimal.Decimal("NaN"), None),
            (decimal.Decimal("-Infinity"), None),
            (uuid.UUID(int=255), "00000000-0000-0000-0000-0000000000ff"),
            (b"caf\xc3\xa9", "café"),
            (b"\xff\xfeok", "\\xff\\xfeok"),
            (bytearray(b"ab"), "ab"),
            (memoryview(b"mv"), "mv"),
            ({3}, [3]),
            (frozenset({"a"}), ["a"]),
            ((1, "two"), [1, "two"]),
            (collections.deque([1, 2]), [1, 2]),
            (Pair(1, 2), [1, 2]),
            (Color.RED, "red"),
            (Color.TUPLE, [1, 2]),
            (Level.INFO, 20),
            (Mode.FAST, "fast"),
            (float("nan"), None),
            (float("inf"), None),
            (float("-inf"), None),
            (Money(1.5), 1.5),
            (Money("nan"), None),
            (Count(5), 5),
            (Markup("kept"), "kept"),
            (Plain(), "<Plain>"),
            (BadRepr(), "<unrepresentable BadRepr>"),
            (types.MappingProxyType({"k": 1}), {"k": 1}),
            (collections.OrderedDict(b=1, a=2), {"b": 1, "a": 2}),
            (-0.0, -0.0),
            (2**64 + 1, 2**64 + 1),
            (-(2**100), -(2**100)),
        ],
    )
    def test_value(self, value: Any, expected: Any) -> None:
        """Each kind of value follows the module's rule, on both paths."""
        assert both({"v": value}) == {"v": expected}

    def test_dataclass(self) -> None:
        """A dataclass becomes an object of its fields (init=False ones too, not ClassVars)."""
        got = both(Point(1, 2.5, ["t"]))
        assert got == {"x": 1, "y": 2.5, "tags": ["t"], "computed": 7}
        assert both(Slotted(dt.date(2024, 1, 2))) == {"when": "2024-01-02"}

    def test_huge_int(self) -> None:
        """An int too long for str() becomes a short marker instead of breaking the event."""
        got = both({"big": 10**5000, "ok": 1})
        assert got["ok"] == 1
        assert got["big"].startswith("<int of ") and len(got["big"]) < 40
        assert both({10**5000: 1}) == {got["big"]: 1}

    def test_dict_cycle(self) -> None:
        """A dict containing itself: the cycle becomes "<cycle>"."""
        d: dict[str, Any] = {"a": 1}
        d["me"] = d
        assert both(d) == {"a": 1, "me": "<cycle>"}

    def test_list_cycle(self) -> None:
        """A list containing itself, through a dict."""
        items: list[Any] = [1]
        items.append({"back": items})
        assert both(items) == [1, {"back": "<cycle>"}]

    def test_shared_reference_is_not_a_cycle(self) -> None:
        """The same object twice, side by side, is encoded twice."""
        shared = {"s": 1}
        assert both({"x": [shared, shared], "d": shared}) == {
            "x": [{"s": 1}, {"s": 1}], "d": {"s": 1}
        }

    def test_deep_nesting(self) -> None:
        """Absurdly deep nesting gives valid JSON, never RecursionError."""
        deep: Any = "bottom"
        for _ in range(5000):
            deep = [deep]
        text = encode({"deep": deep})
        assert strict_loads(text)["deep"][0][0] is not None
        strict_loads(encode_std(deep))

    def test_non_str_keys(self) -> None:
        """int, float, bool, None, Enum, tuple and object keys become strings."""
        value = {1: "a", 2.5: "b", None: "d", Level.INFO: "e", Mode.FAST: "f",
                 (1, 2): "g", Plain(): "h", BadRepr(): "i", Color.RED: "j"}
        assert both(value) == {
            "1": "a", "2.5": "b", "null": "d", "20": "e", "fast": "f",
            "(1, 2)": "g", "<Plain>": "h", "<unrepresentable BadRepr>": "i", "red": "j",
        }
        assert both({True: "c", False: "x"}) == {"true": "c", "false": "x"}

    def test_lone_surrogates(self) -> None:
        """Lone surrogates (from surrogateescape) become escaped text, in values and keys."""
        got = both({"v": "a\udcffb", "k\ud800": 1})
        assert got == {"v": "a\\udcffb", "k\\ud800": 1}

    def test_unicode_kept(self) -> None:
        """Ordinary non-ASCII text is kept as it is."""
        assert both({"t": "žluťoučký 🐍 \u2028"}) == {"t": "žluťoučký 🐍 \u2028"}

    def test_mixed_everything_in_one_event(self) -> None:
        """One bad value does not spoil the rest of the event."""
        got = both({"ok": "fine", "bad": BadRepr(), "nan": math.nan, "big": 2**70,
                    "s": "\udc80", 1: dt.date(2020, 1, 1)})
        assert got["ok"] == "fine" and got["big"] == 2**70 and got["1"] == "2020-01-01"

    def test_never_raises(self) -> None:
        """A container whose iteration raises is represented, not raised."""

        class BadDict(dict):
            def items(self):  # type: ignore[override]
                raise RuntimeError("boom")

            def __iter__(self):  # type: ignore[override]
                raise RuntimeError("boom")

        bad = BadDict(a=1)
        for encoder in (encode, encode_std):
            strict_loads(encoder({"x": bad}))

    def test_json_default_one_level(self) -> None:
        """json_default converts one level and never raises."""
        assert json_default(dt.date(2020, 1, 2)) == "2020-01-02"
        assert json_default({1, 2}) in ([1, 2], [2, 1])
        assert json_default(BadRepr()) == "<unrepresentable BadRepr>"

    def test_dumps_is_text(self) -> None:
        """dumps returns compact text."""
        assert dumps({"a": [1, 2]}) == '{"a":[1,2]}'

    def test_to_jsonable_does_not_mutate(self) -> None:
        """to_jsonable makes a copy; the input is left alone."""
        value = {"t": (1, 2), "s": {3}}
        copy = to_jsonable(value)
        assert copy == {"t": [1, 2], "s": [3]}
        assert value == {"t": (1, 2), "s": {3}}


# ------------------------------------------------------------------ property: fast == stdlib

any_text = st.text(st.characters(exclude_categories=()), max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | any_text
)
keys = any_text | st.integers(min_value=-(2**70), max_value=2**70)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(keys, children, max_size=5)
    | st.tuples(children, children),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_fast_and_stdlib_paths_agree(value: Any) -> None:
    """orjson and the stdlib path both give valid JSON that parses to the same value."""
    both(value)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(any_text, values, max_size=6))
def test_event_shaped_values_agree(event: dict[str, Any]) -> None:
    """Events (str-keyed dicts) agree on both paths, and dumps gives the same JSON."""
    parsed = both(event)
    assert strict_loads(dumps(event)) == parsed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(any_text, values, max_size=4), max_size=6))
def test_encode_many_matches_per_value(events: list[dict[str, Any]]) -> None:
    """encode_many gives the array of what encode gives per value, or None to ask for that."""
    whole = encoding.encode_many(events)
    expected = [strict_loads(encode(e)) for e in events]
    if whole is not None:
        assert strict_loads(whole) == expected


def test_encode_many_falls_back() -> None:
    """A value only the exact path can carry makes encode_many return None, not raise."""
    assert encoding.encode_many([{"ok": 1}, {"s": "\udc80"}]) is None
    assert strict_loads(encoding.encode_many([{"ok": 1}, {"n": math.nan}]) or b"null") in (
        None, [{"ok": 1}, {"n": None}]
    )
