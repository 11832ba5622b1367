"""What ships: the policies that shape, thin and scrub events, on the flusher thread.

Each policy is off until configured (``ShipperOptions``), and each runs where it costs the
application nothing: on the flusher thread, between taking events from the queue and encoding
them. Hold-until-error is the exception: it must decide before an event is queued, so it lives
beside the context (``hold.py``) and is reached only inside a ``loghandler.context``.

- ``Finisher``: per event, leaves out the default fields the user excluded (``exclude_fields``)
  and scrubs secrets (``scrub``): by key anywhere in the event (the default, "keys": a dict
  lookup per key), and with "all" by value pattern in every string (the message, extras,
  nested values, the exception's text: a scan of each string, about 1.5 us an event).
- ``Selector``: per batch, repeat suppression (``repeat_limit`` per ``repeat_window``: after N
  identical events, the rest of the window is counted and one summary event says how many were
  suppressed; a window opens at a message's second sighting, started at its first).
  Sampling is decided earlier, on the callers' threads (``sampling.py``).

Every event a policy drops is counted under its own reason (``dropped_sampled``,
``dropped_repeat``, ``dropped_held``), so the accounting invariant holds under every policy.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._encoding import free_name
from .events import admit_repeats, wire_view

__all__ = ["REDACTED", "Finisher", "Scrubber", "Selector"]

REDACTED = "[redacted]"

# Keys whose value is a secret whatever it holds, compared lowercased with "-", "_", "." and
# spaces removed: exactly one of these, or ending in one ("db_password", "csrf_token"). A key
# that merely contains one ("token_count", "max_tokens", "secretary") is no secret.
SECRET_KEYS = frozenset({
    "password", "passwd", "pwd", "pass", "secret", "token", "apikey", "accesskey",
    "secretkey", "privatekey", "authorization", "auth", "cookie", "setcookie", "session",
    "sessionid", "credential", "credentials", "jwt", "creditcard", "cardnumber", "cvv", "ssn",
    "clientsecret", "accesstoken", "refreshtoken", "idtoken", "xapikey",
})
_SECRET_SUFFIXES = ("password", "passwd", "secret", "token", "apikey", "accesskey",
                    "secretkey", "privatekey", "sessionid", "cookie", "authorization",
                    "credentials")
_NORMALIZE = re.compile(r"[-_. ]")

# Values that are secrets wherever they appear. Each pattern's first group (when it has one) is
# kept, so "Bearer abc..." reads "Bearer [redacted]" and "password=x" reads "password=[redacted]".
_VALUE_PATTERNS = [
    r"(?i)(\b(?:bearer|basic|token)\s+)[A-Za-z0-9\-._~+/]{12,}=*",  # Authorization schemes
    r"()\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
    r"()\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key id
    r"()\bgh[pousr]_[A-Za-z0-9]{36,}\b",  # GitHub token
    r"()\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack token
    r"()\bAIza[0-9A-Za-z_-]{35}\b",  # Google API key
    r"()\bsk_(?:live|test)_[0-9A-Za-z]{16,}\b",  # Stripe secret key
    r"()-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    # key=value and key: value in text ("login failed, password=hunter2")
    r"(?i)(\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|token)\b\s*[=:]\s*)"
    r"[^\s,;&'\"]{3,}",
]
_CARD = re.compile(r"(?<![\d.])\d(?:[ -]?\d){12,18}(?![\d.])")
# One cheap scan first, of the lowercased string: a string with no trigger word and no nine
# digits close together (a card number has them) skips every pattern. Almost every string does.
_TRIGGERS = re.compile(  # the words of _VALUE_PATTERNS, factored: fewer tries per position
    r"b(?:earer|asic)|token|eyj|a(?:kia|sia|iza|ccess|pi.?key)|gh[pousr]_|xox|sk_|-----begin"
    r"|p(?:assw|wd)|secret|(\d{4}[ -]?\d{4}[ -]?\d)")
# Fields the event's own machinery fills from the code, never from data: not scanned.
_CODE_FIELDS = frozenset({"_time", "level", "logger", "module", "function", "line", "file",
                          "process", "thread"})


def luhn_ok(digits: str) -> bool:
    """True when ``digits`` (13-19 of them) pass the Luhn check card numbers carry."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", match.group(0))
    return REDACTED if 13 <= len(digits) <= 19 and luhn_ok(digits) else match.group(0)


class Scrubber:
    """Replaces secrets in an event, in place: values under secret keys (at any depth) and,
    with ``text`` (or ``patterns`` given), secret-looking substrings of every string. ``keys``
    and ``patterns`` add to the defaults.

    Bounded: strings are looked at whole, containers to a depth of 16 (deeper values are
    replaced, since they cannot be checked)."""

    __slots__ = ("_keys", "_known", "_own", "_suffixes", "_text", "_triggers", "clean",
                 "scans_text")

    MAX_DEPTH = 16

    def __init__(self, keys: Iterable[str] = (), patterns: Iterable[str] = (),
                 text: bool = True) -> None:
        extra = {_NORMALIZE.sub("", k.lower()) for k in keys}
        self._keys = SECRET_KEYS | extra
        self._suffixes = _SECRET_SUFFIXES + tuple(sorted(extra))
        self._text = [re.compile(p) for p in _VALUE_PATTERNS]
        own = []
        for p in patterns:
            compiled = re.compile(p)
            self._text.append(re.compile("()" + p) if compiled.groups == 0 else compiled)
            own.append(f"(?:{p})")
        # The user's patterns cannot be matched on a lowercased string: they run every time.
        self._own = bool(own)
        self._triggers = _TRIGGERS
        # key -> is it secret: keys repeat from event to event (bounded: see secret_key).
        self._known: dict[str, bool] = {}
        # Keys known to be no secret, for flat events (see event()): the code's own fields to
        # begin with.
        self.clean: set[Any] = set(_CODE_FIELDS)
        self.scans_text = text or bool(own)

    def secret_key(self, key: str) -> bool:
        known = self._known.get(key)
        if known is None:
            k = _NORMALIZE.sub("", key.lower())
            known = k in self._keys or k.endswith(self._suffixes)
            if len(self._known) < 4096:
                self._known[key] = known
        return known

    def text(self, value: str) -> str:
        n = len(value)
        if n < 8 or not self.scans_text:
            return value
        lower = value.lower()
        search = self._triggers.search
        m = search(lower)
        if m is None and not self._own:
            return value
        digits = words = self._own
        while m is not None and not (digits and words):
            # Four digits in a row may start a card number; a word may start a secret.
            if m.group(1) is not None:
                digits = True
            else:
                words = True
            m = search(lower, m.end())
        if words:
            for pattern in self._text:
                if pattern.search(value) is not None:
                    value = pattern.sub(lambda m: (m.group(1) or "") + REDACTED, value)
        if digits and n >= 13 and _CARD.search(value) is not None:
            value = _CARD.sub(_card, value)
        return value

    def learn(self, key: str) -> bool:
        """True when ``key`` is known to be no secret's, now added to the clean keys (bounded
        as ``event`` bounds them). The compiled fast path asks on a key's first use, so that
        its events can be written on the caller's thread (events.py "Wire items")."""
        if key in self.clean:
            return True
        if self.scans_text or len(self.clean) >= 4096 or self.secret_key(key):
            return False
        self.clean.add(key)
        return True

    def event(self, event: dict[str, Any], plain: bool = False) -> None:
        """Scrub ``event`` in place. ``plain``: every value is a str, number, bool or None
        (the handler's fast path makes only such events)."""
        if plain and not self.scans_text:
            # By key only, on a flat event: a set difference in C leaves the keys not seen yet
            # (the same dozen recur event after event), and only those are looked at.
            clean = self.clean
            if clean.issuperset(event):  # the common case, in C, with no set built
                return
            rest = event.keys() - clean
            for key in rest:
                if type(key) is str and self.secret_key(key):
                    value = event[key]
                    if value is not None and value != "":
                        event[key] = REDACTED
                elif len(self.clean) < 4096:
                    self.clean.add(key)
            return
        # Inlined for the common event (flat, short strings): this runs for every event on the
        # flusher thread, where its cost is the shipper's throughput.
        code = _CODE_FIELDS
        known = self._known
        text = self.text
        scan = self.scans_text
        changes: list[tuple[str, Any]] | None = None
        for key, value in event.items():
            if key in code:
                continue
            secret = known.get(key)
            if secret is None:
                secret = self.secret_key(key) if type(key) is str else False
            t = type(value)
            if secret:
                if value is not None and value != "":
                    new = REDACTED
                else:
                    continue
            elif t is str:
                if len(value) < 8 or not scan:
                    continue
                new = text(value)
            elif t is dict or t is list or t is tuple:
                new = self._value(value, set())
            else:
                continue
            if new is not value:
                if changes is None:
                    changes = []
                changes.append((key, new))
        if changes:
            event.update(changes)

    def _value(self, value: Any, path: set[int]) -> Any:
        # Copy on write: a container comes back as itself when nothing in it changed, so the
        # application's objects are never modified, and a cycle (a container already on the
        # path) is left to the encoder, which names it.
        t = type(value)
        if t is str:
            return self.text(value)
        if t is not dict and t is not list and t is not tuple:
            return value
        ident = id(value)
        if ident in path:
            return value
        if len(path) >= self.MAX_DEPTH:
            return REDACTED  # deeper than anything we check: it could hide a secret
        path.add(ident)
        try:
            if t is dict:
                out: dict[Any, Any] | None = None
                for key, item in value.items():
                    if type(key) is str and self.secret_key(key):
                        new = REDACTED if item is not None and item != "" else item
                    else:
                        new = self._value(item, path)
                    if new is not item:
                        if out is None:
                            out = dict(value)
                        out[key] = new
                return value if out is None else out
            items: list[Any] | None = None
            for i, item in enumerate(value):
                new = self._value(item, path)
                if new is not item:
                    if items is None:
                        items = list(value)
                    items[i] = new
            return value if items is None else items
        finally:
            path.discard(ident)


class Finisher:
    """The last step per event on the flusher thread: exclusions, scrubbing, then the field
    names the user ships under (``field_names``; the steps before and the selector read the
    event's usual names)."""

    __slots__ = ("_exclude", "_rename", "_renames", "_scrubber")

    def __init__(self, exclude: Iterable[str], scrubber: Scrubber | None,
                 renames: Mapping[str, str] | None = None) -> None:
        self._exclude = tuple(exclude)
        self._scrubber = scrubber
        self._renames = tuple((renames or {}).items())
        chained = {new for _, new in self._renames} & {old for old, _ in self._renames}
        self._rename = rename_chained if chained else rename

    def clean_keys(self) -> set[Any] | None:
        """The keys a flat event may hold with nothing to do (the scrubber's plain path, which
        grows the set), for the compiled item_events to skip the call; None when every event
        needs the call (exclusions, renames, text scanning)."""
        scrubber = self._scrubber
        if self._exclude or self._renames or scrubber is None or scrubber.scans_text:
            return None
        return scrubber.clean

    def wire_scrubber(self) -> tuple[set[Any] | None, Callable[[str], bool] | None] | None:
        """For a writer that leaves the excluded fields out and renames the fields itself (the
        compiled path's wire items, events.py): the scrubber's clean keys and its ``learn``
        ((None, None): nothing to scrub); None when the scrubber must see every value
        (scanning text)."""
        scrubber = self._scrubber
        if scrubber is None:
            return None, None
        if scrubber.scans_text:
            return None
        return scrubber.clean, scrubber.learn

    @property
    def renames(self) -> tuple[tuple[str, str], ...]:
        """``field_names`` as (old, new) pairs, in their order."""
        return self._renames

    def learn(self, key: str) -> bool:
        """``Scrubber.learn``: True when an event may hold ``key`` with nothing to do."""
        scrubber = self._scrubber
        return (not self._exclude and not self._renames and scrubber is not None
                and scrubber.learn(key))

    def __call__(self, event: dict[str, Any], plain: bool = False) -> None:
        for key in self._exclude:
            event.pop(key, None)
        if self._scrubber is not None:
            self._scrubber.event(event, plain)
        if self._renames:
            self._rename(event, self._renames)


def rename(event: dict[str, Any], renames: tuple[tuple[str, str], ...]) -> None:
    """``field_names`` on one event, in place. A field the event already has under a new name
    is kept, renamed as a clash with a reserved key is (``extra_<name>``): never lost."""
    pop = event.pop
    for old, new in renames:
        if old in event:
            value = pop(old)
            if new in event:
                event[free_name(new, event)] = pop(new)
            event[new] = value


def rename_chained(event: dict[str, Any], renames: tuple[tuple[str, str], ...]) -> None:
    """``rename`` when a new name is also an old one (``{"message": "level", "level":
    "severity"}``): every field taken out first, then put back under its new name."""
    moved = [(new, event.pop(old)) for old, new in renames if old in event]
    for new, value in moved:
        if new in event:
            event[free_name(new, event)] = event.pop(new)
        event[new] = value


def make_finisher(exclude: Iterable[str], scrub: bool | str, scrub_keys: Iterable[str],
                  scrub_patterns: Iterable[str],
                  field_names: Mapping[str, str] | None = None) -> Finisher | None:
    exclude = tuple(exclude)
    scrubber = (Scrubber(scrub_keys, scrub_patterns, text=scrub != "keys") if scrub
                else None)
    if not exclude and scrubber is None and not field_names:
        return None
    return Finisher(exclude, scrubber, field_names)


# ------------------------------------------------------------------ selecting


def sightings_table(max_keys: int) -> bytearray:
    """The compiled repeat loop's first sightings, empty: a header of two 8-byte counts, then
    two generations of slots of 16 bytes (a hash, a time), each a power of two at most three
    quarters full with max_keys (``admit_repeats`` checks the same)."""
    cap = 8
    while cap * 3 < max_keys * 4:
        cap *= 2
    return bytearray(16 + 2 * cap * 16)


class Selector:
    """Decides, per batch on the flusher thread, which events ship: repeats (see the module
    docstring). Sampling is not its: it is decided on the callers' threads
    (``sampling.Sampler.decide``).

    ``select(events, now)`` returns ``(kept, repeats_suppressed, summaries)``; summaries are
    new events the caller submits (they are counted as submitted)."""

    __slots__ = ("_head", "_key", "_limit", "_max_keys", "_once", "_order", "_seen", "_sightings",
                 "_window")

    MAX_KEYS = 10_000  # repeated messages tracked at once, and first sightings per generation

    def __init__(self, repeat_limit: int, repeat_window: float,
                 field_names: Mapping[str, str] | None = None, *,
                 max_keys: int = MAX_KEYS) -> None:
        # The events reach the selector with their shipped names (Finisher ran first): a
        # repeat's key is its message (else structlog's event), its logger and its level.
        names = field_names or {}
        self._key = (names.get("message", "message"), "event", names.get("logger", "logger"),
                     names.get("level", "level"))
        self._limit = repeat_limit
        self._window = repeat_window
        # A message's first sighting opens no window (repeat_limit is at least 1: it ships
        # whatever follows): its time is kept in _once, [young, old], key -> time, two
        # generations of at most max_keys keys each (when young is full, old is dropped and
        # young becomes old: no per-event eviction). The second sighting within repeat_window
        # of the first opens the window, started at the first (so a window counts what it
        # always did). With every message new, this keeps a time in a dict an event instead of
        # a window's entry, its place in _order and its summary's check at close.
        self._once: list[dict[Any, float]] = [{}, {}]
        # The compiled loop's twin of _once: a table of (hash, time) slots in a bytearray
        # (_speedups.c, admit_repeats: a probe and a store an event, no object), made at its
        # first use.
        self._sightings: bytearray | None = None
        # The open windows: key -> [window start, count, last event, the key in _seen, the
        # (logger, level, message)], and the same entries in the order their windows opened,
        # in _order from _head on, where the oldest is found at once. The compiled loop keys
        # _seen and _once by a 64-bit hash of (logger, level, message) read from the wire
        # item's bytes, never decoded for it; this loop by the tuple itself. A place in _order
        # whose key holds another entry now (its window ended and a new one opened) is passed
        # over; the places passed are cut off in one go (_compact). Not an OrderedDict, which
        # kept the order in the mapping at twice a dict's cost per new window; not a dict
        # alone, whose first key is found only past every key deleted before it.
        self._seen: dict[Any, list[Any]] = {}
        self._order: list[list[Any]] = []
        self._head = 0
        self._max_keys = max_keys

    def select(self, events: list[Any], now: float | None = None, *,
               admit: Callable[..., Any] | None = admit_repeats
               ) -> tuple[list[Any], int, list[dict[str, Any]]]:
        """``admit``: the compiled twin of the repeat loop (``events.admit_repeats``), or
        None for the Python reference (the property tests run both). A selector keeps to one
        of the two: their keys differ (a hash, a tuple), and so do their first sightings."""
        now = time.monotonic() if now is None else now
        summaries = self.expired(now)
        if admit is not None:
            # The compiled twin of the loop below (_admit), over the batch at once.
            if self._sightings is None:
                self._sightings = sightings_table(self._max_keys)
            kept, repeats, ended, self._head = admit(
                events, self._seen, self._order, self._head, float(now), float(self._window),
                self._limit, self._max_keys, self._key, self._sightings)
            summaries += [self._summary(key, entry) for key, entry in ended]
            self._compact()
            return kept, repeats, summaries
        kept = []
        repeats = 0
        for event in events:
            if not self._admit(event, now, summaries):
                repeats += 1
                continue
            kept.append(event)
        self._compact()
        return kept, repeats, summaries

    def _admit(self, event: Any, now: float, summaries: list[dict[str, Any]]) -> bool:
        # _order holds the windows by start (a new window is appended), so the oldest is
        # always first: expiring and evicting cost O(1) per event.
        item = event
        if type(event) is bytes:  # a wire item: the fields read here, from its JSON
            event = wire_view(event, self._key)
        message_key, _, logger_key, level_key = self._key
        message = event.get(message_key, event.get("event"))
        if type(message) is not str:
            return True
        key = (event.get(logger_key), event.get(level_key), message)
        seen = self._seen
        entry = seen.get(key)
        if entry is not None and now - entry[0] < self._window:
            entry[1] += 1
            if entry[1] <= self._limit:
                return True
            entry[2] = item
            return False
        if entry is not None:
            del seen[key]  # its place in _order is passed over
            if entry[1] > self._limit:
                summaries.append(self._summary(key, entry))
        # No window open: a first sighting is noted, a second within the window opens one.
        once = self._once
        young = once[0]
        at = young
        first = young.get(key)
        if first is None:
            at = once[1]
            first = at.get(key)
        if first is None or now - first >= self._window:
            young[key] = now
            if len(young) >= self._max_keys:  # a new generation: the old one is forgotten
                old = once[1]
                old.clear()
                once[0], once[1] = old, young
            return True
        del at[key]
        if len(seen) >= self._max_keys:
            # _take_oldest, inlined. An open window is in _order from _head on: the loop ends.
            order, head = self._order, self._head
            while seen.get(order[head][3]) is not order[head]:
                head += 1
            gone = order[head]
            self._head = head + 1
            del seen[gone[3]]
            if gone[1] > self._limit:
                summaries.append(self._summary(gone[4], gone))
        entry = [first, 2, None, key, key]
        seen[key] = entry
        self._order.append(entry)
        if self._limit >= 2:
            return True
        entry[2] = item
        return False

    def _oldest(self) -> list[Any] | None:
        """The oldest open window, left open; None when none is. Places whose key holds
        another window now are passed over."""
        order, seen, head = self._order, self._seen, self._head
        entry = None
        while head < len(order):
            if seen.get(order[head][3]) is order[head]:
                entry = order[head]
                break
            head += 1
        self._head = head
        return entry

    def _take_oldest(self) -> list[Any] | None:
        entry = self._oldest()
        if entry is not None:
            del self._seen[entry[3]]
            self._head += 1
        return entry

    def _compact(self) -> None:
        # The places passed over, cut off once they are half of _order: O(1) an event.
        head = self._head
        if head >= 64 and 2 * head >= len(self._order):
            del self._order[:head]
            self._head = 0

    def expired(self, now: float) -> list[dict[str, Any]]:
        """Summaries of the windows that ended (called every flusher pass, and at exit)."""
        out: list[dict[str, Any]] = []
        limit = self._limit or 0
        while (entry := self._oldest()) is not None and now - entry[0] >= self._window:
            self._take_oldest()
            if entry[1] > limit:
                out.append(self._summary(entry[4], entry))
        self._compact()
        return out

    def flush_all(self) -> list[dict[str, Any]]:
        """Summaries of every open window (at close)."""
        limit = self._limit or 0
        seen = self._seen
        out = [self._summary(e[4], e) for e in self._order[self._head:]
               if seen.get(e[3]) is e and e[1] > limit]
        seen.clear()
        for once in self._once:
            once.clear()
        self._sightings = None
        self._order.clear()
        self._head = 0
        return out

    def _summary(self, key: tuple[Any, Any, Any], entry: list[Any]) -> dict[str, Any]:
        logger, level, message = key
        n = entry[1] - (self._limit or 0)
        last = entry[2]
        if type(last) is bytes:  # a wire item
            last = wire_view(last, ("_time",))
        last = last or {}
        event: dict[str, Any] = {
            "level": level,
            "message": f"{message} (repeated {n:,} more time{'s' if n != 1 else ''} in "
                       f"{self._window:g} s, suppressed)",
            "logger": logger,
            "repeats_suppressed": n,
            "repeated_message": message,
        }
        if "_time" in last:
            event["last_time"] = last["_time"]
        return event
