"""One JSON encoder for everything loghandler sends: events, views, CLI input.

Rules (identical with and without the optional ``orjson`` accelerator; tests compare the two):

- datetime / date / time -> ISO 8601 (``isoformat()``); Decimal -> its exact string;
  UUID -> string; bytes -> UTF-8 text (undecodable bytes backslash-escaped);
  set / frozenset / tuple / deque -> list; Enum -> its value; dataclass -> object of its fields;
  NaN / Infinity -> null (JSON has no such numbers and a service would reject the whole batch);
  non-string keys -> strings (``1`` -> ``"1"``, ``None`` -> ``"null"``), and a key that then
  collides with another is renamed ``extra_<key>`` (``free_name``), never lost;
  a cycle -> the string ``"<cycle>"``;
  anything else -> ``repr(obj)``, or ``"<unrepresentable T>"`` when ``repr`` itself raises.
- Encoding never raises.

``encode`` is the fast path used by the flusher thread: orjson (when installed) or the C-accelerated
stdlib encoder, with ``to_jsonable`` as the exact, slower fallback for the odd value they refuse.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import json
import math
import threading
import uuid
from collections import deque
from collections.abc import Container, Mapping
from typing import Any

__all__ = ["dumps", "encode", "free_name", "json_default", "key_to_str", "to_jsonable"]

_PRIMITIVES = (str, bool, type(None))
_MAX_DEPTH = 64


def _float(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _bytes(value: bytes | bytearray | memoryview) -> str:
    return bytes(value).decode("utf-8", "backslashreplace")


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def _int(value: int) -> int | str:
    # Python refuses to print ints of more than 4300 digits (sys.set_int_max_str_digits), and
    # no service would parse one: name it instead of failing the whole event.
    try:
        int.__repr__(value)
    except ValueError:
        return f"<int of {value.bit_length()} bits>"
    return int(value)


# The shipper's ``json_default`` (the user's converter for their own types), per thread: set
# by a front end around its slow path (``using_default``) and by the flusher thread for itself,
# so one shipper's converter never applies to another's events.
_hook = threading.local()
_CONTAINERS = frozenset({dict, list, tuple})


def _user_default(user: Any, value: Any) -> Any:
    try:
        return user(value)
    except Exception:
        return value  # the built-in rules then apply


class using_default:
    """``with using_default(fn):`` applies ``fn`` first to values JSON cannot carry, on this
    thread (``fn`` None: nothing changes)."""

    __slots__ = ("_fn", "_prev")

    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def __enter__(self) -> None:
        self._prev = getattr(_hook, "default", None)
        _hook.default = self._fn

    def __exit__(self, *exc: object) -> None:
        _hook.default = self._prev


def set_thread_default(fn: Any) -> None:
    """The flusher thread's converter, for the rest of its life."""
    _hook.default = fn


def json_default(obj: Any) -> Any:
    """``default=`` hook for json/orjson: one level of conversion; never raises."""
    user = getattr(_hook, "default", None)
    if user is not None:
        converted = _user_default(user, obj)
        if converted is not obj:
            return converted
    try:
        if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
            return obj.isoformat()
        if isinstance(obj, decimal.Decimal):
            return str(obj) if obj.is_finite() else None
        if isinstance(obj, uuid.UUID):
            return str(obj)
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return _bytes(obj)
        if isinstance(obj, enum.Enum):
            return obj.value
        # Subclasses the stdlib encoder takes as their base type but orjson hands to us
        # (namedtuple, float subclasses): same answer on both paths.
        if isinstance(obj, (set, frozenset, deque, tuple, list)):
            return list(obj)
        if isinstance(obj, float):
            return _float(float(obj))
        if isinstance(obj, int):
            return _int(obj)
        if isinstance(obj, str):
            return str.__str__(obj)
        if isinstance(obj, dict):
            return _str_keyed(list(obj.items()))
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
        if isinstance(obj, Mapping):
            return _str_keyed(list(obj.items()))
    except Exception:
        pass
    return _repr(obj)


def to_jsonable(value: Any, _depth: int = 0, _seen: set[int] | None = None) -> Any:
    """A deep, JSON-safe copy of ``value`` following the module's rules. Never raises."""
    t = type(value)
    if t in _PRIMITIVES:
        if t is str and _has_surrogate(value):
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if t is float:
        return _float(value)
    if t is int:
        return _int(value)
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, _depth + 1, _seen)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, float):
        return _float(float(value))
    if isinstance(value, str):
        # str.__str__: a subclass (a str Enum, a markup type) may override __str__.
        return to_jsonable(str.__str__(value))
    if _depth >= _MAX_DEPTH:
        return _repr_short(value)
    user = getattr(_hook, "default", None)
    if user is not None and type(value) not in _CONTAINERS:
        converted = _user_default(user, value)
        if converted is not value:
            return to_jsonable(converted, _depth + 1, _seen)
    if _seen is None:
        _seen = set()
    if isinstance(value, (dict, list, tuple, set, frozenset, deque)) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        key = id(value)
        if key in _seen:
            return "<cycle>"
        _seen.add(key)
        try:
            if isinstance(value, dict):
                out: dict[str, Any] = {}
                for k, v in list(value.items()):
                    name = _key(k)
                    if name in out:  # 1 and "1", None and "null": rename, never lose
                        name = free_name(name, out)
                    out[name] = to_jsonable(v, _depth + 1, _seen)
                return out
            if dataclasses.is_dataclass(value):
                return to_jsonable(json_default(value), _depth + 1, _seen)
            return [to_jsonable(v, _depth + 1, _seen) for v in list(value)]
        except Exception:
            return _repr(value)
        finally:
            _seen.discard(key)
    converted = json_default(value)
    if converted is value or type(converted) is str:
        return to_jsonable(converted) if type(converted) is str else _repr(value)
    return to_jsonable(converted, _depth + 1, _seen)


def _repr_short(value: Any) -> str:
    text = _repr(value)
    return text if len(text) <= 200 else text[:199] + "…"


def free_name(key: str, *taken: Container[str]) -> str:
    """The name a field gets when ``key`` is taken: ``extra_<key>``, or ``extra_extra_<key>``
    and so on, the first that none of ``taken`` holds."""
    name = f"extra_{key}"
    while any(name in t for t in taken):
        name = f"extra_{name}"
    return name


def _str_keyed(items: list[tuple[Any, Any]]) -> dict[str, Any]:
    # One level, for json_default: keys as strings, collisions renamed; values left to the
    # encoder that called us.
    out: dict[str, Any] = {}
    for k, v in items:
        name = k if type(k) is str else _key(k)
        if name in out:
            name = free_name(name, out)
        out[name] = v
    return out


def key_to_str(key: Any) -> str:
    """A dict key as JSON needs it: a string (``1`` -> ``"1"``, ``None`` -> ``"null"``)."""
    return _key(key)


def _key(key: Any) -> str:
    if type(key) is str:
        text: str = to_jsonable(key)  # a str stays a str (its lone surrogates escaped)
        return text
    if isinstance(key, float):
        return json.dumps(_float(key))
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, enum.Enum):
        return _key(key.value)
    if isinstance(key, int):
        return str(_int(key))
    try:
        name: str = to_jsonable(str(key))
        return name
    except Exception:
        return _repr(key)


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_std_encoder = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=json_default
)
# The exact path writes UTF-8 as the fast ones do, so that an event is the same bytes whichever
# path wrote it (a NaN sends an event here); ASCII only for what UTF-8 cannot carry (a lone
# surrogate in a repr()).
_safe_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ascii_encoder = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def _encode_std(value: Any) -> bytes:
    # The stdlib encoder turns int/float/bool/None keys into strings by itself, so 1 and "1"
    # would both become "1" and one of them be lost: such values take the exact path instead.
    if not _str_keys_only(value, 0):
        raise TypeError("non-string keys")
    return _std_encoder.encode(value).encode("utf-8")


def _str_keys_only(value: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return True  # the encoder refuses such depth anyway (and the exact path takes it)
    if isinstance(value, dict):
        for k, v in value.items():
            if type(k) is not str:
                return False
            if isinstance(v, (dict, list, tuple)) and not _str_keys_only(v, depth + 1):
                return False
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, (dict, list, tuple)) and not _str_keys_only(v, depth + 1):
                return False
    return True


def _encode_safe(value: Any) -> bytes:
    safe = to_jsonable(value)
    try:
        return _safe_encoder.encode(safe).encode("utf-8")
    except UnicodeEncodeError:
        return _ascii_encoder.encode(safe).encode("ascii")


try:  # the optional accelerator: loghandler-ingest[fast]
    import orjson as _orjson

    _orjson_dumps = _orjson.dumps

    # orjson turns NaN into null by itself and refuses what the stdlib path also cannot carry
    # (non-str keys, lone surrogates, ints over 64 bits, cycles): those take the exact fallback.
    # Datetimes and dataclasses go through json_default too: orjson's own rules differ from
    # isoformat() (offsets with seconds) and from dataclasses.fields() (init=False fields).
    _ORJSON_OPTIONS = _orjson.OPT_PASSTHROUGH_DATETIME | _orjson.OPT_PASSTHROUGH_DATACLASS

    def _encode_fast(value: Any) -> bytes:
        return _orjson_dumps(value, default=json_default, option=_ORJSON_OPTIONS)

    HAVE_ORJSON = True
except ImportError:  # pragma: no cover - depends on the environment
    _encode_fast = _encode_std
    HAVE_ORJSON = False


def encode(value: Any) -> bytes:
    """Compact UTF-8 JSON for ``value``. Never raises."""
    try:
        return _encode_fast(value)
    except Exception:
        pass
    try:
        return _encode_safe(value)
    except Exception:  # pragma: no cover - to_jsonable already removed everything unsafe
        return json.dumps(_repr(value)).encode("ascii")


def dumps(value: Any) -> str:
    """``encode`` as text."""
    return encode(value).decode("utf-8")


# Events per encoder call in encode_many: one C call holds the GIL throughout, so a batch is
# encoded in slices, letting application threads run between them (a 5,000-event batch in one
# call would stall them for milliseconds).
ENCODE_SLICE = 256


def encode_many(values: list[Any]) -> bytes | None:
    """A JSON array of ``values``, encoded a slice at a time (the flusher's fast path), or None
    when some value needs the exact per-value fallback of ``encode``."""
    try:
        n = len(values)
        if n <= ENCODE_SLICE:
            return _encode_fast(values)
        # Each slice's array without its brackets, joined once: views, not copies (a batch's
        # body was copied three times over).
        parts: list[Any] = [b"["]
        for i in range(0, n, ENCODE_SLICE):
            if i:
                parts.append(b",")
            parts.append(memoryview(_encode_fast(values[i:i + ENCODE_SLICE]))[1:-1])
        parts.append(b"]")
        return b"".join(parts)
    except Exception:
        return None
