"""The local service's web page, in a real headless Chromium driven by selenium.

The browser comes from the distribution (``apt-get install chromium chromium-driver``); selenium
is given the system chromedriver and never downloads anything. Without the browser these tests
skip, unless ``LOGHANDLER_REQUIRE_BROWSER=1`` (set by ``.ci/run``): then they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loghandler._wire.client import Client

pytestmark = pytest.mark.slow

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 15.0  # seconds; each wait ends as soon as its condition holds


def _missing(reason: str) -> None:
    if os.environ.get("LOGHANDLER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LOGHANDLER_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[dev]')")
    binary = next((b for b in CHROMIUM if os.path.exists(b)), None) or shutil.which("chromium")
    if not binary or not os.path.exists(CHROMEDRIVER):
        _missing("chromium and chromedriver are not installed "
                 "(apt-get install chromium chromium-driver)")
    before = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must not fetch anything
    options = Options()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,900", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update"):
        options.add_argument(arg)
    drv = None
    try:
        drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        drv.set_page_load_timeout(30)
        yield drv
    finally:
        if drv is not None:
            drv.quit()
        if before is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = before


def wait_until(drv: Any, condition: Any, what: str) -> Any:
    """Wait for ``condition(driver)`` to be true; the page re-renders while we look, so an
    element gone stale in between means "look again", not a failure."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(drv, WAIT, poll_frequency=0.1, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(
        lambda d: condition(d), message=f"timed out waiting for {what}")


def rows(drv: Any) -> list[str]:
    # One script call reads all rows at once: no element can go stale half-way.
    return list(drv.execute_script(
        "return [...document.querySelectorAll('#events tr.row')].map(r => r.innerText);"))


def click(drv: Any, xpath: str, what: str) -> None:
    from selenium.webdriver.common.by import By

    wait_until(drv, lambda d: d.find_element(By.XPATH, xpath).click() or True, what)


VIEWS = [
    {"id": "1", "name": "Payment errors",
     "aplQuery": "['shop'] | where level == 'error' and message contains 'payment'",
     "datasets": ["shop"], "description": "", "sharedByOrg": "", "sharedByOrgName": ""},
    {"id": "2", "name": "Order lines",
     "aplQuery": "['shop'] | mv-expand lines", "datasets": ["shop"], "description": "",
     "sharedByOrg": "", "sharedByOrgName": ""},
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """`loghandler serve` in a subprocess: (the page's URL it prints, the token)."""
    tmp = tmp_path_factory.mktemp("serve")
    views = tmp / "views.json"
    views.write_text(json.dumps(VIEWS), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "loghandler", "serve", "--port", "0",
                             "--quiet", "--create-datasets", "--views", str(views)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        page = None
        for _ in range(20):
            line = proc.stdout.readline()
            m = re.match(r"web page: (http://127\.0\.0\.1:\d+/#token=(\S+))$", line.strip())
            if m:
                page, token = m.group(1), m.group(2)
                break
        assert page is not None, "serve printed no page URL"
        yield page, token
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_page_shows_events_live_filters_and_opens_views(
        driver: Any, served: tuple[str, str], tmp_path: Path) -> None:
    """Open the printed URL; events ingested later appear without a reload; the filter
    narrows them; a click shows the JSON; a view shows its query's rows or why not."""
    from selenium.webdriver.common.by import By

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    client.ingest("shop", [{"level": "info", "message": "shop opened", "user": "ann"}])
    driver.get(page)
    wait_until(driver, lambda d: any("shop opened" in r for r in rows(d)), "the first event")
    assert "shop" in driver.find_element(By.ID, "datasets").text
    driver.execute_script("window.__notReloaded = true;")

    client.ingest("shop", [
        {"level": "error", "message": "payment declined", "user": "bob", "order": 17},
        {"level": "warning", "message": "stock low", "user": "cy"},
        {"level": "info", "message": "order shipped", "user": "ann"},
    ])
    wait_until(driver, lambda d: len(rows(d)) == 4, "the events ingested later")
    assert driver.execute_script("return window.__notReloaded === true;")
    wait_until(driver, lambda d: "4" in d.find_element(By.CSS_SELECTOR,
                                                        "#datasets .count").text, "the count")
    text, error_bg, info_bg, error_fg = driver.execute_script(
        "const s = (q) => getComputedStyle(document.querySelector(q));"
        "return [document.querySelector('#events .level.error').innerText,"
        "        s('#events .level.error').backgroundColor,"
        "        s('#events .level.info').backgroundColor,"
        "        s('#events .level.error').color];")
    assert text.lower() == "error" and error_bg != info_bg
    assert error_fg != error_bg  # the level's name is readable on its colour

    def histogram_levels(d: Any) -> set[str]:
        return set(d.execute_script(
            "return [...document.querySelectorAll('#histogram svg rect')]"
            ".map(r => r.dataset.level);"))

    wait_until(driver, lambda d: {"info", "error", "warning"} <= histogram_levels(d),
               "the histogram's bars by level")

    box = driver.find_element(By.ID, "filter")
    box.send_keys("ann")
    wait_until(driver, lambda d: len(rows(d)) == 2, "the filter")
    assert all("ann" in r for r in rows(driver))
    box.clear()
    box.send_keys("x")
    box.send_keys("\b")
    wait_until(driver, lambda d: len(rows(d)) == 4, "the filter cleared")

    click(driver, "//tr[contains(., 'payment declined')]", "a click on an event")
    detail = json.loads(driver.find_element(By.ID, "detail-json").text)
    assert detail["order"] == 17 and detail["user"] == "bob" and "_rowId" in detail
    from selenium.webdriver.common.keys import Keys

    wait_until(driver, lambda d: d.find_element(By.XPATH, "//tr[contains(., 'stock low')]")
               .send_keys(Keys.ENTER) or True, "Enter on an event")
    assert json.loads(driver.find_element(By.ID, "detail-json").text)["message"] == "stock low"
    driver.save_screenshot(str(tmp_path / "events.png"))

    click(driver, "//li[@data-view='1']", "a click on the first view")
    wait_until(driver, lambda d: len(rows(d)) == 1 and "payment declined" in rows(d)[0],
               "the view's rows")
    assert "View: Payment errors" in driver.find_element(By.ID, "title").text
    driver.save_screenshot(str(tmp_path / "view.png"))

    click(driver, "//li[@data-view='2']", "a click on the second view")
    notice = wait_until(driver, lambda d: d.find_element(By.ID, "notice").is_displayed()
                        and d.find_element(By.ID, "notice"), "the unsupported-view notice")
    assert "outside the APL subset" in notice.text and "'mv-expand'" in notice.text
    assert (tmp_path / "events.png").stat().st_size > 10_000
    client.close()


def test_a_wrong_token_asks_for_one(driver: Any, served: tuple[str, str]) -> None:
    """With a token the service refuses, the page says so and asks for one."""
    from selenium.webdriver.common.by import By

    page, _ = served
    driver.get(page.split("#", 1)[0] + "#token=wrong")
    driver.refresh()
    wait_until(driver, lambda d: d.find_element(By.ID, "login").is_displayed(), "the login")
    assert "did not accept" in driver.find_element(By.ID, "login-error").text


def test_a_token_with_url_characters_works(driver: Any) -> None:
    """A token with + & % = in it, quoted in the fragment, reaches the API unchanged."""
    from urllib.parse import quote

    from loghandler.testing import LocalService

    with LocalService(token="p+q&r%s=t") as svc:
        svc.client().ingest("odd", [{"level": "info", "message": "odd token ok"}])
        driver.get(svc.url + "/#token=" + quote(svc.token, safe=""))
        wait_until(driver, lambda d: any("odd token ok" in r for r in rows(d)), "the event")


def test_static_files_need_no_token_and_the_api_does(served: tuple[str, str]) -> None:
    """The page's files are served without a token and with a strict CSP; data needs one."""
    page, _ = served
    base = page.split("/#", 1)[0]
    for path, kind in (("/", "text/html"), ("/app.js", "javascript"), ("/style.css", "css")):
        with urllib.request.urlopen(base + path, timeout=10) as resp:
            assert kind in resp.headers["Content-Type"]
            assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
            body = resp.read().decode().replace("http://www.w3.org/2000/svg", "")
            assert "http://" not in body and "https://" not in body  # no external assets
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(base + "/v1/datasets", timeout=10)
    assert info.value.code == 403


def test_page_time_budget() -> None:
    """The page polls the query API at a bounded pace (a guard against a busy loop)."""
    from importlib import resources

    script = (resources.files("loghandler._local") / "web" / "app.js").read_text()
    every = {name: int(value) for name, value in
             re.findall(r"const (\w+_EVERY_MS) = (\d+);", script)}
    assert every and min(every.values()) >= 1000


def test_a_missing_browser_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the browser: skipped, or failed when LOGHANDLER_REQUIRE_BROWSER=1 (CI)."""
    monkeypatch.setenv("LOGHANDLER_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="REQUIRE_BROWSER"):
        _missing("no chromium")
    monkeypatch.delenv("LOGHANDLER_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception):
        _missing("no chromium")


def test_first_paint_says_loading_not_no_events(served: tuple[str, str]) -> None:
    """Before the dataset list is known the page says "Loading…", never "No events yet"."""
    base = served[0].split("/#", 1)[0]
    with urllib.request.urlopen(base + "/", timeout=10) as resp:
        html = resp.read().decode()
    assert '<p id="loading"' in html and "Loading…" in html
    assert '<div id="welcome" class="welcome" hidden>' in html


def test_search_covers_the_dataset_and_the_address_keeps_it(
        driver: Any, served: tuple[str, str]) -> None:
    """Issue 27: the search runs on the service over the whole dataset (not the 200 rows on
    screen), with field filters; the query line shows the APL that ran; the dataset, search
    and range are in the address, so a reload (or a shared link) shows the same; a view does
    not inherit the search."""
    import time as _time

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    now = _time.time()
    old = [{"_time": now - 1800 + i, "level": "error", "message": f"card {i} declined",
            "order": i} for i in range(50)]
    new = [{"_time": now - 600 + i, "level": "info", "message": f"page {i} served"}
           for i in range(250)]
    client.ingest("checkout", old + new)
    driver.get(page.split("#", 1)[0] + "#token=" + token + "&dataset=checkout")
    wait_until(driver, lambda d: len(rows(d)) == 200, "the newest 200 events")
    assert not any("declined" in r for r in rows(driver))  # all 50 are older than those

    box = driver.find_element(By.ID, "filter")
    box.send_keys("declined")
    wait_until(driver, lambda d: len(rows(d)) == 50 and all("declined" in r for r in rows(d)),
               "the search's 50 events, beyond the 200 shown before")
    assert driver.find_element(By.ID, "query").text == (
        "['checkout'] | search \"declined\" | sort by _time desc, _rowId desc | take 200")
    assert "dataset=checkout" in driver.current_url and "q=declined" in driver.current_url

    box.clear()
    box.send_keys("level:error order>=40")
    wait_until(driver, lambda d: len(rows(d)) == 10, "a field filter and a comparison")
    assert "where level =~ \"error\" | where order >= 40" in driver.find_element(
        By.ID, "query").text

    box.clear()
    box.send_keys("-level:info")
    wait_until(driver, lambda d: len(rows(d)) == 50, "a negation")

    Select(driver.find_element(By.ID, "range")).select_by_value("15m")
    wait_until(driver, lambda d: len(rows(d)) == 0 and d.find_element(By.ID, "empty")
               .is_displayed(), "the range leaves the older errors out")
    assert "ago(15m)" in driver.find_element(By.ID, "query").text
    assert "range=15m" in driver.current_url

    driver.refresh()
    wait_until(driver, lambda d: d.find_element(By.ID, "filter").get_attribute("value")
               == "-level:info" and "ago(15m)" in d.find_element(By.ID, "query").text,
               "the reload keeping the search and the range")
    assert Select(driver.find_element(By.ID, "range")).first_selected_option.get_attribute(
        "value") == "15m"

    box = driver.find_element(By.ID, "filter")
    box.send_keys(" status>=oops")
    notice = wait_until(driver, lambda d: d.find_element(By.ID, "notice").is_displayed()
                        and d.find_element(By.ID, "notice"), "a search that cannot run")
    assert "a comparison needs a number" in notice.text

    click(driver, "//li[@data-view='1']", "a view")
    wait_until(driver, lambda d: "View: Payment errors" in d.find_element(By.ID, "title").text,
               "the view")
    assert driver.find_element(By.ID, "filter").get_attribute("value") == ""
    assert "view=1" in driver.current_url and "q=" not in driver.current_url
    client.close()


def test_events_read_as_events(driver: Any, served: tuple[str, str]) -> None:
    """Issue 27: a structlog event's text (`event`) is its message; the application's own
    fields come before where the code ran; a traceback shows as a trace, line by line."""
    from selenium.webdriver.common.by import By

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    trace = 'Traceback (most recent call last):\n  File "app.py", line 3, in pay\nKeyError: 7'
    client.ingest("reading", [
        {"level": "error", "message": "payment failed", "exception": trace, "order": 7,
         "logger": "shop", "module": "pay", "line": 3},
        {"level": "info", "event": "user signed in", "user": "ann"},
    ])
    driver.get(page.split("#", 1)[0] + "#token=" + token + "&dataset=reading")
    wait_until(driver, lambda d: len(rows(d)) == 2, "the two events")
    structlog_row = next(r for r in rows(driver) if "ann" in r)
    assert "user signed in" in structlog_row
    failed = next(r for r in rows(driver) if "payment failed" in r)
    assert failed.index("order=7") < failed.index("logger=shop")  # own fields first
    assert "Traceback" not in failed
    click(driver, "//tr[contains(., 'payment failed')]", "the failed event")
    shown = wait_until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#detail-traces pre")
                       .text, "the trace")
    assert shown.splitlines() == trace.splitlines()
    assert "event=" in driver.current_url  # the event opened is in the address
    client.close()


def test_facets_show_top_values_and_filter_in_and_out(
        driver: Any, served: tuple[str, str]) -> None:
    """Issue 27: for the current search, the fields present with their top values and
    counts; a value filters in, its − button filters out (the search box says so)."""
    from selenium.webdriver.common.by import By

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    client.ingest("facets", [{"level": "error", "service": "checkout", "n": i} for i in range(3)]
                  + [{"level": "info", "service": "checkout", "n": i} for i in range(5)]
                  + [{"level": "info", "service": "search", "n": i} for i in range(2)])
    driver.get(page.split("#", 1)[0] + "#token=" + token + "&dataset=facets")
    wait_until(driver, lambda d: len(rows(d)) == 10, "the events")

    def values(d: Any, field: str) -> list[str]:
        return list(d.execute_script(
            "const sel = `#facets li button.in[data-field='${arguments[0]}']`;"
            "return [...document.querySelectorAll(sel)]"
            ".map(b => b.innerText + ' ' + b.nextElementSibling.innerText);", field))

    wait_until(driver, lambda d: values(d, "level") == ["info 7", "error 3"], "level's values")
    assert values(driver, "service") == ["checkout 8", "search 2"]
    click(driver, "//button[@data-field='level' and .='error']", "filter in level:error")
    wait_until(driver, lambda d: len(rows(d)) == 3, "only the errors")
    assert driver.find_element(By.ID, "filter").get_attribute("value") == "level:error"
    wait_until(driver, lambda d: values(d, "level") == ["error 3"], "facets of the search")
    driver.find_element(By.ID, "filter").clear()
    driver.find_element(By.ID, "filter").send_keys(" ")
    wait_until(driver, lambda d: len(rows(d)) == 10, "the search cleared")
    click(driver, "//button[@data-field='service' and .='search']/following-sibling::button",
          "filter out service:search")
    wait_until(driver, lambda d: len(rows(d)) == 8, "all but service:search")
    assert driver.find_element(By.ID, "filter").get_attribute("value") == "-service:search"
    client.close()


def test_paging_past_the_first_page_pauses_live(driver: Any, served: tuple[str, str]) -> None:
    """Issue 27: Older events pages on past the first 200 (the query API's time and row id:
    none twice, none skipped, events at one instant included); live updates pause meanwhile."""
    from selenium.webdriver.common.by import By

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    # 450 events, 150 of them at one and the same instant (a page boundary falls among them).
    events = [{"_time": "2024-05-01T12:00:00Z", "n": i} for i in range(150)]
    events += [{"_time": f"2024-05-01T12:{1 + i // 60:02d}:{i % 60:02d}Z", "n": 150 + i}
               for i in range(300)]
    client.ingest("paging", events)
    driver.get(page.split("#", 1)[0] + "#token=" + token + "&dataset=paging")
    wait_until(driver, lambda d: len(rows(d)) == 200, "the first page")
    assert driver.find_element(By.ID, "live").is_selected()
    # Scrolling down the events pauses live updates; back at the top they resume.
    driver.execute_script("document.getElementById('events-wrap').scrollTop = 2000;")
    wait_until(driver, lambda d: not d.find_element(By.ID, "live").is_selected(),
               "live paused by the scroll")
    driver.execute_script("document.getElementById('events-wrap').scrollTop = 0;")
    wait_until(driver, lambda d: d.find_element(By.ID, "live").is_selected(),
               "live resumed at the top")
    click(driver, "//button[@id='older']", "Older events")
    wait_until(driver, lambda d: len(rows(d)) == 400, "the second page")
    assert not driver.find_element(By.ID, "live").is_selected()
    click(driver, "//button[@id='older']", "Older events again")
    wait_until(driver, lambda d: len(rows(d)) == 450, "the last page")
    ids = driver.execute_script(
        "return [...document.querySelectorAll('#events tr.row')].map(r => r.dataset.rowId);")
    assert len(set(ids)) == 450
    wait_until(driver, lambda d: not d.find_element(By.ID, "older").is_displayed(),
               "no more pages")
    client.close()


def test_query_editor_charts_aggregates_and_saves_views(
        driver: Any, served: tuple[str, str]) -> None:
    """Issue 27: an APL editor; a summarize answer shows as a chart and a table (not as event
    rows with blank levels); saved as a view, the view renders the same; the query is in the
    address."""
    from selenium.webdriver.common.by import By

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    events = [{"_time": f"2024-05-01T12:0{m}:{s:02d}Z", "level": lv, "n": s}
              for m, (count, lv) in enumerate([(3, "info"), (5, "error"), (2, "info")])
              for s in range(count)]
    client.ingest("sales", events)
    driver.get(page.split("#", 1)[0] + "#token=" + token + "&dataset=sales")
    wait_until(driver, lambda d: len(rows(d)) == 10, "the events")
    driver.find_element(By.ID, "editor-toggle").click()
    box = driver.find_element(By.ID, "editor-apl")
    box.clear()
    apl = "['sales'] | summarize count() by bin(_time, 1m)"
    box.send_keys(apl)
    driver.find_element(By.ID, "editor-run").click()

    def bars(d: Any) -> list[tuple[str, float]]:
        return [(b, float(v)) for b, v in d.execute_script(
            "return [...document.querySelectorAll('#chart rect')]"
            ".map(r => [r.dataset.label, r.dataset.value]);")]

    wait_until(driver, lambda d: [v for _, v in bars(d)] == [3.0, 5.0, 2.0],
               "a bar per minute, in time order")
    assert bars(driver)[0][0].startswith("2024-05-01 12:00")
    headers = driver.execute_script(
        "return [...document.querySelectorAll('#events th')].map(t => t.innerText);")
    assert headers == ["_time", "count_"]  # a table, not event rows
    assert not driver.find_elements(By.CSS_SELECTOR, "#events .level")
    assert "apl=" in driver.current_url

    driver.find_element(By.ID, "editor-name").send_keys("Sales per minute")
    driver.find_element(By.ID, "editor-save").click()
    wait_until(driver, lambda d: "View: Sales per minute" in d.find_element(By.ID, "title").text
               and [v for _, v in bars(d)] == [3.0, 5.0, 2.0], "the saved view, charted")
    assert "Sales per minute" in driver.find_element(By.ID, "views").text

    box = driver.find_element(By.ID, "editor-apl")
    box.clear()
    box.send_keys("['sales'] | summarize count() by level")
    driver.find_element(By.ID, "editor-run").click()
    wait_until(driver, lambda d: sorted(bars(d)) == [("error", 5.0), ("info", 5.0)],
               "a bar per group")
    client.close()


def test_time_zone_zoom_and_grouping(driver: Any, served: tuple[str, str]) -> None:
    """Issue 27: one time convention, switchable UTC/local; a drag on the histogram zooms to
    that time (a custom range, in the query and the address); events grouped by request."""
    import time as _time

    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    now = _time.time()
    early = [{"_time": now - 3000 + i, "level": "debug", "message": f"early {i}",
              "request_id": "r-1"} for i in range(3)]
    late = [{"_time": now - 300 + i, "level": "error", "message": f"late {i}",
             "request_id": f"r-{2 + i % 2}"} for i in range(4)]
    client.ingest("zoom", early + late)
    driver.get(page.split("#", 1)[0] + "#token=" + token + "&dataset=zoom")
    wait_until(driver, lambda d: len(rows(d)) == 7, "the events")
    first_time = driver.find_element(By.CSS_SELECTOR, "#events td.time").text
    assert first_time.endswith("Z") and " " in first_time  # UTC, said so
    Select(driver.find_element(By.ID, "tz")).select_by_value("local")
    wait_until(driver, lambda d: not d.find_element(By.CSS_SELECTOR, "#events td.time")
               .text.endswith("Z"), "local times")
    assert "tz=local" in driver.current_url

    Select(driver.find_element(By.ID, "group")).select_by_value("request_id")
    groups = wait_until(driver, lambda d: d.execute_script(
        "return [...document.querySelectorAll('#events tr.group')].map(r => r.innerText);"),
        "group headers")
    assert sorted(groups) == ["request_id = r-1 · 3 events", "request_id = r-2 · 2 events",
                              "request_id = r-3 · 2 events"]

    wait_until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#histogram rect"),
               "the histogram's bars")
    svg = driver.find_element(By.CSS_SELECTOR, "#histogram svg")
    width = svg.size["width"]
    # The last hour in 60 bins: drag over the last tenth (the late errors only).
    ActionChains(driver).move_to_element_with_offset(svg, int(width * 0.38), 0).click_and_hold()\
        .move_to_element_with_offset(svg, int(width * 0.49), 0).release().perform()
    wait_until(driver, lambda d: len(rows(d)) == 4 and all("late" in r for r in rows(d)),
               "the zoomed range")
    assert "datetime('" in driver.find_element(By.ID, "query").text
    assert "range=" in driver.current_url and "%2F" in driver.current_url
    client.close()


def test_from_an_error_to_its_request_and_the_lines_around_it(
        driver: Any, served: tuple[str, str]) -> None:
    """Issue 27's done-when, on the page alone: the errors of the checkout service in the last
    15 minutes, grouped by request, then the debug lines around one of them."""
    import time as _time

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page, token = served
    base = page.split("/#", 1)[0]
    client = Client(token, url=base)
    now = _time.time()
    events = []
    for r in range(4):  # four requests, 2 minutes apart; each: debug, info, then an error
        t = now - 600 + r * 120
        for dt, level, message in ((0, "debug", "cart loaded"), (1, "info", "paying"),
                                   (2, "error", "payment declined")):
            events.append({"_time": t + dt, "level": level, "message": message,
                           "service": "checkout", "request_id": f"req-{r}"})
    events.append({"_time": now - 2400, "level": "error", "message": "too old",
                   "service": "checkout", "request_id": "req-old"})
    events.append({"_time": now - 100, "level": "error", "message": "other service",
                   "service": "search", "request_id": "req-s"})
    client.ingest("journey", events)
    driver.get(page.split("#", 1)[0] + "#token=" + token + "&dataset=journey")
    wait_until(driver, lambda d: len(rows(d)) == len(events), "the events")

    box = driver.find_element(By.ID, "filter")
    box.send_keys("level:error service:checkout")
    Select(driver.find_element(By.ID, "range")).select_by_value("15m")
    Select(driver.find_element(By.ID, "group")).select_by_value("request_id")
    wait_until(driver, lambda d: len(rows(d)) == 4 and all("payment declined" in r
                                                            for r in rows(d)),
               "the checkout errors of the last 15 minutes")
    heads = driver.execute_script(
        "return [...document.querySelectorAll('#events tr.group')].map(r => r.innerText);")
    assert len(heads) == 4 and all(h.endswith("· 1 event") for h in heads)

    click(driver, "//tr[contains(., 'payment declined') and contains(., 'req-2')]",
          "one of the errors")
    click(driver, "//button[@id='detail-around']", "around it")
    wait_until(driver, lambda d: sorted(r.split()[2] for r in rows(d)) == [
        "DEBUG", "ERROR", "INFO"], "the minute around it: its debug and info lines too")
    assert all("req-2" in r for r in rows(driver))
    assert driver.find_element(By.ID, "filter").get_attribute("value") == ""

    click(driver, "//tr[contains(., 'payment declined')]", "the error again")
    click(driver, "//button[@id='detail-request']", "its request")
    wait_until(driver, lambda d: len(rows(d)) == 3 and all("req-2" in r for r in rows(d)),
               "every event of the request")
    assert driver.find_element(By.ID, "filter").get_attribute("value") == "request_id:req-2"
    client.close()
