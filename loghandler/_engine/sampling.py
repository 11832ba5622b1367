"""Sampling (``sample_levels``, ``sample_loggers``): decided on the caller's thread, before the
event is built or queued, from its level, its logger and its trace id alone.

An event whose level and logger have a rate below 1 is kept with that probability: by the
fraction its trace id gives (the low 64 bits of a W3C trace id are random, so every shipper in
every process keeps or drops a trace's events together), else by the random source. The trace
id is the one the shipped event would carry: the event's own ``trace_id`` field, else the
current span's, else the context's field, else ``fields=``'s (a ``trace_id`` left out by
``exclude_fields`` is none). What is sampled out is counted ``dropped_sampled`` at once.

Deciding here, not on the flusher, means a sampled-out event costs the caller a few lookups and
the flusher nothing, and that an event kept is never made a dict for the decision's sake: the
compiled path (``_speedups.c``) makes the same decision from the same tables (``table()``) and
queues what it keeps as its final JSON. tests/test_speedups.py holds the two equal.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from .hold import level_number
from .model import LEVELS

__all__ = ["ABSENT", "Sampler", "span_fraction", "trace_fraction"]

# No trace id of that kind (a value of None is one: a trace id that is no trace id).
ABSENT: Any = object()

_MASK = (1 << 64) - 1
_TWO64 = 2.0**64


def trace_fraction(trace_id: Any) -> float | None:
    """The fraction in [0, 1) a trace id (its last 16 hex digits) gives; None for a value that
    is no trace id (then the random source decides)."""
    if type(trace_id) is not str or len(trace_id) < 16:
        return None
    try:
        return int(trace_id[-16:], 16) / _TWO64
    except ValueError:
        return None


def span_fraction(trace_id: int) -> float:
    """``trace_fraction`` of a span's trace id (a positive int below 2**128) written in hex, as
    the event carries it: its low 64 bits."""
    return (trace_id & _MASK) / _TWO64


class Sampler:
    """One shipper's sampling rates (see the module docstring).

    ``decide(level, logger, ...)``: the one decision every caller asks (the front ends, the
    shipper's ``submit``; the compiled path makes the same from ``fastpath.SamplePlan``).
    ``rate(level, logger)``: the fraction kept of events of that level (the event's level
    name, as shipped) and logger (the longest matching prefix among ``sample_loggers``, a
    logger or any of its children); the smaller of the two applies, and 1 at
    ``sample_keep_level`` and above.
    """

    __slots__ = ("keep_level", "kept_levels", "levels", "loggers", "rand", "record_rates",
                 "static", "trace_key")

    def __init__(self, sample_levels: Mapping[str, float] | None,
                 sample_loggers: Mapping[str, float] | None,
                 rand: Callable[[], float] = random.random, *, trace_key: bool = True,
                 fields: Mapping[str, Any] | None = None,
                 keep_level: int | None = None) -> None:
        self.levels = {k.lower(): float(v) for k, v in (sample_levels or {}).items()}
        # Longest prefix first: "app.db" wins over "app".
        self.loggers = tuple(sorted(((k, float(v)) for k, v in (sample_loggers or {}).items()),
                                    key=lambda kv: -len(kv[0])))
        self.rand = rand
        # False when exclude_fields leaves the trace id out: then no event carries one.
        self.trace_key = trace_key
        # The fraction of fields='s trace_id (the last the event can take it from), or None.
        self.static = trace_fraction((fields or {}).get("trace_id"))
        # Events at keep_level (sample_keep_level) and above are never sampled away: a level
        # name's verdict, cached (level names are few; the cache is bounded all the same).
        self.keep_level = keep_level
        self.kept_levels: dict[str, bool] = {}
        # (record's levelname, logger name) -> rate: the pure-Python handler's lookup before
        # it builds an event (record_rate). Bounded: past the bound, computed each time.
        self.record_rates: dict[tuple[Any, Any], float] = {}

    def rate(self, level: Any, logger: Any) -> float:
        rate = 1.0
        if self.levels and type(level) is str:
            r = self.levels.get(level)
            if r is not None:
                rate = r
        if self.loggers and type(logger) is str:
            for prefix, r in self.loggers:
                if logger == prefix or logger.startswith(prefix + "."):
                    if r < rate:
                        rate = r
                    break
        if rate < 1.0 and self.keep_level is not None and self.kept(level):
            return 1.0
        return rate

    def record_rate(self, levelname: Any, logger: Any) -> float:
        """``rate`` for a ``logging.LogRecord``'s ``levelname`` and ``name`` (the level as the
        event ships it: LEVELS' name, else the name in lower case), cached per pair."""
        key = (levelname, logger)
        rate = self.record_rates.get(key)
        if rate is None:
            level = (LEVELS.get(levelname) or levelname.lower()
                     if type(levelname) is str else levelname)
            rate = self.rate(level, logger)
            if len(self.record_rates) < 1024:
                self.record_rates[key] = rate
        return rate

    def kept(self, level: Any) -> bool:
        """Is ``level`` (a level name, as shipped) at or above ``keep_level``?"""
        if type(level) is not str:
            return False
        verdict = self.kept_levels.get(level)
        if verdict is None:
            verdict = level_number(level) >= (self.keep_level or 0)
            if len(self.kept_levels) < 256:
                self.kept_levels[level] = verdict
        return verdict

    def decide(self, level: Any, logger: Any, trace_id: Any = ABSENT, span_trace: int = 0,
               context_trace: Any = ABSENT, rate: float | None = None) -> bool:
        """Keep this event? Its level (as shipped) and logger give its rate (``rate``: given
        already, the handler's cached ``record_rate``); below 1, the trace id it ships with
        decides: its own ``trace_id``, else the current span's (``span_trace``, an int; 0:
        none), else the context's ``trace_id``, else ``fields=``'s (``ABSENT``: none of that
        kind)."""
        if rate is None:
            rate = self.rate(level, logger)
        if rate >= 1.0:
            return True
        if trace_id is not ABSENT:
            fraction = trace_fraction(trace_id)
        elif span_trace:
            fraction = span_fraction(span_trace)
        elif context_trace is not ABSENT:
            fraction = trace_fraction(context_trace)
        else:
            fraction = self.static
        # A trace id's fraction, when it ships with one (and exclude_fields leaves it): every
        # shipper keeps or drops a trace's events together; else the random source.
        if fraction is None or not self.trace_key:
            return self.rand() < rate
        return fraction < rate
