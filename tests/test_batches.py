"""batches.py: the one batch rule (``cut``), events on their way (``Chunk``), and the batches a
shipper cuts from its queue (``Cutter``, seen through a ``MemoryTransport``)."""

from __future__ import annotations

import json

import pytest

from loghandler import Shipper
from loghandler._engine.batches import Chunk, chunks, cut, encode_batch, encode_each
from loghandler.testing import MemoryTransport


def parts(n: int, size: int = 20) -> list[bytes]:
    """``n`` encoded events of exactly ``size`` bytes each."""
    out = []
    for i in range(n):
        head = b'{"i":%d,"p":"' % i
        out.append(head + b"x" * (size - len(head) - 2) + b'"}')
    assert all(len(p) == size for p in out)
    return out


class TestCut:
    @pytest.mark.parametrize(("n", "size", "max_events", "max_bytes", "expected"), [
        (10, 20, 3, 10_000, 3),  # by count
        (10, 20, 100, 1 + 3 * 21, 3),  # by bytes: "[" and "]", and a comma between: 1 + 21 each
        (10, 20, 100, 1 + 3 * 21 - 1, 2),  # one byte less: one event less
        (10, 20, 100, 5, 1),  # one event larger than a batch still makes a batch (of one)
        (2, 20, 100, 10_000, 2),  # the rest
    ])
    def test_where_a_batch_ends(self, n: int, size: int, max_events: int, max_bytes: int,
                                expected: int) -> None:
        """At least one event, then as many as fit in max_events and a max_bytes JSON array."""
        got = parts(n, size)
        end = cut(got, 0, max_events, max_bytes)
        assert end == expected
        if end > 1:
            assert len(b"[" + b",".join(got[:end]) + b"]") <= max_bytes

    def test_cut_from_an_offset(self) -> None:
        assert cut(parts(10), 8, 5, 10_000) == 10
        assert cut(parts(10), 4, 5, 10_000) == 9

    def test_chunks_cover_everything_in_order(self) -> None:
        """Consecutive batches, each within both bounds, nothing lost or reordered."""
        got = parts(50, 20)
        batches = list(chunks(got, 7, 100))
        assert [p for b in batches for p in b] == got
        assert all(1 <= len(b) <= 7 for b in batches)
        assert all(len(b"[" + b",".join(b) + b"]") <= 100 for b in batches)


class TestEncoding:
    def test_each_event_alone_and_wire_items_as_they_are(self) -> None:
        wire = b'{"w":1}'
        assert encode_each([{"a": 1}, wire]) == [json.dumps({"a": 1}, separators=(",", ":"))
                                                 .encode(), wire]

    def test_a_batch_in_one_step(self) -> None:
        """Dicts are encoded together, wire items joined; both kinds at once: event by event
        (None)."""
        assert json.loads(encode_batch([{"a": 1}, {"b": 2}]) or b"") == [{"a": 1}, {"b": 2}]
        assert encode_batch([b'{"a":1}', b'{"b":2}']) == b'[{"a":1},{"b":2}]'
        assert encode_batch([b'{"a":1}', {"b": 2}]) is None
        assert encode_batch([{"b": 2}, b'{"a":1}']) is None


class TestChunk:
    def test_events_and_their_parts_agree(self) -> None:
        events = [{"i": i} for i in range(5)]
        chunk = Chunk(events)
        assert len(chunk) == 5
        assert json.loads(chunk.body()) == events
        assert [json.loads(p) for p in chunk.as_parts()] == events
        assert len(Chunk(parts=parts(3))) == 3 and len(Chunk()) == 0

    @pytest.mark.parametrize("kind", ["events", "parts"])
    def test_halves_split_in_order(self, kind: str) -> None:
        """A chunk of n is halved into floor(n/2) and the rest, order kept."""
        events = [{"i": i} for i in range(7)]
        chunk = Chunk(events) if kind == "events" else Chunk(parts=encode_each(events))
        first, second = chunk.halves()
        assert (len(first), len(second)) == (3, 4)
        assert [json.loads(p) for p in first.as_parts() + second.as_parts()] == events


class TestCutter:
    """What a shipper's flusher cuts from its queue, seen in the requests it sends."""

    def test_requests_hold_at_most_batch_size_and_max_batch_bytes(self) -> None:
        transport = MemoryTransport()
        s = Shipper(dataset="ds", transport=transport, batch_size=4, max_batch_bytes=2_000,
                    compression=None, flush_interval=60)
        for i in range(30):
            s.submit({"i": i, "pad": "y" * (50 if i % 3 else 1_200)})
        assert s.flush(5)
        s.close()
        sizes = [len(r.events) for r in transport.requests]
        assert all(1 <= n <= 4 for n in sizes) and sum(sizes) == 30
        assert any(n < 4 for n in sizes[:-1])  # some were cut by bytes, not by count
        assert all(len(json.dumps(r.events, separators=(",", ":"))) <= 2_000
                   for r in transport.requests)
        assert [e["i"] for e in transport.events()] == list(range(30))  # in order

    def test_an_event_larger_than_any_request_is_dropped_alone(self) -> None:
        """One event bigger than max_batch_bytes is counted dropped_too_large; the others are
        delivered, in order."""
        transport = MemoryTransport()
        s = Shipper(dataset="ds", transport=transport, max_batch_bytes=1_000,
                    flush_interval=60)
        for i in range(6):
            s.submit({"i": i, "pad": "z" * (5_000 if i == 3 else 10)})
        assert s.flush(5) is False
        st = s.stats()
        s.close()
        assert st.dropped_too_large == 1 and st.delivered == 5
        assert [e["i"] for e in transport.events()] == [0, 1, 2, 4, 5]
