"""The page at many events, in a real browser (issue 46): a search's histogram comes from the
counts kept at ingest and its fields from a bounded sample, said so with the exact count
(finding 1), and a word's events, histogram and fields from the index of the events' text;
the page's queries reach the service marked as the page's, so they yield to the API's
(finding 2).
"""

from __future__ import annotations

import json
import random
import re
import time
from typing import Any

import pytest
from test_web import (  # noqa: F401  (the browser fixture, shared)
    _big_events,
    driver,
    facet,
    ingest,
    open_page,
    rows,
    svc,
    wait_until,
)

from loghandler._local import ep_page, reader, rollups, words


def test_a_search_histogram_from_the_counts_and_its_fields_from_a_bounded_sample(
        driver: Any, svc: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    monkeypatch.setattr(ep_page, "FACET_SCAN", 3000)  # 30,000 events read one in ten
    counted: list[str] = []
    real = rollups.answer_rows

    def spy(db: Any, parsed: Any, compiled: Any, *args: Any) -> Any:
        got = real(db, parsed, compiled, *args)
        if got is not None:
            counted.append(compiled.sql)
        return got

    monkeypatch.setattr(rollups, "answer_rows", spy)
    events = _big_events(time.time())
    r = random.Random(5)  # the 500s at random (a sample by row id would miss every 50th)
    for e in events:
        e["status"] = 500 if r.random() < 0.02 else 200
    want = sum(e["status"] == 500 for e in events)
    ingest(svc, "big", events)
    open_page(driver, svc, dataset="big")
    wait_until(driver, lambda d: len(rows(d)) == 200, "the events")
    driver.find_element(By.ID, "filter").send_keys("status:500", Keys.ENTER)
    total = lambda d: d.execute_script(  # noqa: E731
        "const t = document.querySelector('#histogram .total');"
        "return t && document.getElementById('histogram').getAttribute('aria-busy') === 'false'"
        " ? Number(t.dataset.total) : null;")
    wait_until(driver, lambda d: total(d) == want, "the histogram of the search")
    assert any("status" in sql for sql in counted), "the histogram was a scan"
    said = wait_until(driver, lambda d: "sample" in d.find_element(By.ID, "facets-said").text
                      and d.find_element(By.ID, "facets-said").text, "the fields' sample")
    # The matches among the 3,000 events read (every tenth: about 60), of exactly all.
    m = re.search(rf"a sample of (\d+) of {want:,}, spread evenly", said)
    assert m and 20 <= int(m.group(1)) <= 120, said
    values = wait_until(driver, lambda d: facet(d, "status"), "the status field")
    assert values == [f"500 {m.group(1)}"], values


def test_a_words_events_histogram_and_fields_come_from_the_word_index(
        driver: Any, svc: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A rare word, in messages and in another field's value, in any case: the page's
    events, histogram and fields read the events the word index gives, and show what the
    scan finds (every event whose stored text holds the word, ASCII case folded)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    matched: list[str] = []
    real = words.match_for

    def spy(db: Any, terms: list[str], events: int) -> Any:
        got = real(db, terms, events)
        if got is not None:
            matched.extend(terms)
        return got

    monkeypatch.setattr(words, "match_for", spy)
    events = _big_events(time.time())
    r = random.Random(9)
    for e in events:
        pick = r.random()
        if pick < 0.002:
            e["message"] = "Deadlock detected while updating orders"
        elif pick < 0.004:
            e["table"] = "orders_DEADLOCK"
        elif pick < 0.006:
            e["message"] = "dead lock is not the word"
    want = sum("deadlock" in json.dumps(e).lower() for e in events)
    assert want > 60
    ingest(svc, "words", events)
    open_page(driver, svc, dataset="words")
    wait_until(driver, lambda d: len(rows(d)) == 200, "the events")
    driver.find_element(By.ID, "filter").send_keys("deadlock", Keys.ENTER)
    total = lambda d: d.execute_script(  # noqa: E731
        "const t = document.querySelector('#histogram .total');"
        "return t && document.getElementById('histogram').getAttribute('aria-busy') === 'false'"
        " ? Number(t.dataset.total) : null;")
    wait_until(driver, lambda d: total(d) == want, "the word's histogram: every event holding it")
    wait_until(driver, lambda d: len(rows(d)) == min(want, 200)
               and all("deadlock" in row.lower() for row in rows(d)), "the word's events")
    said = lambda d: d.execute_script(  # noqa: E731
        "const f = document.getElementById('facets');"
        "return f.getAttribute('aria-busy') === 'false' && f.dataset.key === "
        "document.body.dataset.key ? document.getElementById('facets-said').textContent : '';")
    wait_until(driver, lambda d: said(d).endswith(f"of {want:,} events"),
               "the word's fields, over all its events")
    tables = sum(e.get("table") == "orders_DEADLOCK" for e in events)
    assert wait_until(driver, lambda d: facet(d, "table"), "the table field") == [
        f"orders_DEADLOCK {tables}"]
    # The events, the histogram and the fields each read through the index.
    assert matched.count("deadlock") >= 3, matched


def test_the_page_queries_yield_to_the_api(driver: Any, svc: Any,  # noqa: F811
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every query the page makes (events, histogram, fields) reaches the reader as the
    page's; the same query through the API is not."""
    clients: list[Any] = []
    real = reader.Reader.query

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        clients.append(kwargs.get("client"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(reader.Reader, "query", spy)
    ingest(svc, "big", _big_events(time.time())[:3000])
    open_page(driver, svc, dataset="big")
    wait_until(driver, lambda d: len(rows(d)) == 200, "the events")
    wait_until(driver, lambda d: facet(d, "status"), "the fields")
    assert len(clients) >= 3 and all(isinstance(c, tuple) and c[0] == reader.PAGE
                                     for c in clients), clients
    clients.clear()
    client = svc.client()
    try:
        client.query("['big'] | count")
    finally:
        client.close()
    assert clients and not any(isinstance(c, tuple) for c in clients), clients
