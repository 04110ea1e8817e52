"""The Control UI (`GET /ui`) in a real browser: Debian's chromium driven by Playwright, against a
real `sessionsearch serve` on loopback.

With SESSIONSEARCH_SAVE_SCREENSHOTS=1 (`make screenshots`) the tests also save the screenshots
docs/ui.md shows, and the README's (demo.png, from the demo's own sample), under docs/screenshots/.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from sessionsearch.api.server import DEMO_DATA

from ..helpers import chain, header, msg, reset
from ..server import Server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SAVE_SHOTS = os.environ.get("SESSIONSEARCH_SAVE_SCREENSHOTS") == "1"
TOKEN = "ui-test-token-4f9c"
# Chromium reports every 4xx answer to fetch() on the console; where a test provokes one on purpose
# (the token prompt's 401, the error state's 400) only that line is allowed
NETWORK_ERROR = "Failed to load resource: the server responded with a status of {}"


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make install` installs Debian's chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


class Console:
    """What the page said on its console and what it threw; checked after every test."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def check(self, *allowed_statuses: int) -> None:
        allowed = tuple(NETWORK_ERROR.format(s) for s in allowed_statuses)
        unexpected = [e for e in self.errors if not e.startswith(allowed)]
        assert not unexpected, unexpected


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1100, "height": 760}, color_scheme="light")
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.console = Console(page)
    yield page
    context.close()


def shot(page: Page, name: str) -> None:
    if SAVE_SHOTS:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"))


def write_state(root: Path, sessions: dict[str, tuple[str, list[dict]]], agent: str = "main") -> Path:
    """A gateway state dir: {sessionKey: (label, events)}, one window per session."""
    folder = root / "agents" / agent / "sessions"
    folder.mkdir(parents=True)
    index = {}
    for n, (key, (label, events)) in enumerate(sessions.items()):
        sid = f"{agent}-w{n}"
        index[key] = {"sessionId": sid, "updatedAt": 1767323045000 + n, "label": label, "kind": "direct"}
        lines = [header(sid), *events]
        (folder / f"{sid}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    (folder / "sessions.json").write_text(json.dumps(index))
    return root


def import_without_index(server: Server, state: Path) -> None:
    """`sessionsearch import` beside the running server: the windows wait for reconciliation."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    env["SESSIONSEARCH_DATA_DIR"] = str(server.log_path.parent / "data")
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", str(state), "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def search_bodies(page: Page) -> list[dict]:
    bodies: list[dict] = []
    page.on("request", lambda r: bodies.append(json.loads(r.post_data)) if r.url.endswith("/v1/sessions.search") else None)
    return bodies


def test_a_search_that_meets_imported_sessions_shows_indexing_then_completes_by_itself(server, page, tmp_path):
    server.post("transcript.append", {"sessionKey": "agent:main:live", "events": chain("live", [
        ("user", "The ledger for March is closed.")])})
    page.goto(f"{server.url}/ui")
    expect(page.locator("#agent option[value=main]")).to_have_count(1)  # the agent filter, from index.status
    import_without_index(server, write_state(tmp_path / "state", {
        f"agent:main:books-{n}": (f"Books {n}", chain(f"b{n}-", [("user", f"Ledger entry {n}: invoice paid"),
                                                                  ("assistant", "Recorded.")]))
        for n in range(30)}))
    bodies = search_bodies(page)
    page.locator("#q").press_sequentially("ledg")
    state = page.locator("#search-state")
    expect(state).to_have_attribute("data-state", "indexing")  # the partial answer, with the live hit
    expect(state).to_contain_text("Indexing in progress")
    # the page searches again by itself until the worker has reconciled every imported window
    expect(state).to_have_attribute("data-state", "truncated", timeout=30_000)
    expect(state).to_contain_text("Showing the first 25 results; more matched")
    expect(page.locator("#results .hit")).to_have_count(25)
    expect(page.locator("#results .hit mark").first).to_have_text("Ledger")  # the prefix, highlighted to the word's end
    assert {b["match"] for b in bodies} == {"prefix"} and {b["query"] for b in bodies} == {"ledg"}
    assert all(b["limit"] == 25 and b["order"] == "relevance" for b in bodies) and len(bodies) >= 2
    page.locator("#q").press("Enter")  # a submitted search is exact: no word is "ledg"
    expect(state).to_have_attribute("data-state", "empty")
    expect(state).to_contain_text("No messages match “ledg”")
    assert bodies[-1]["match"] == "exact"
    page.console.check()


def lisbon(server: Server) -> None:
    """A session with a reset in place, then rotated to a new window; a long session; a second agent."""
    key = "agent:main:main"
    server.post("sessions.upsert", {"sessionKey": key, "label": "Trip planning", "kind": "direct"})
    day = 1767600000000
    first = [
        msg("m1", "user", "Can you draft a budget for the Lisbon trip in May?", None, ts=day),
        msg("m2", "assistant", "A first budget: flights 420 EUR, six hotel nights 780 EUR, food 300 EUR.", "m1",
            ts=day + 60_000),
        msg("m3", "user", "Move the hotel to Alfama and keep the budget under 1,600 EUR.", "m2", ts=day + 120_000),
        msg("m4", "assistant", "Done: an Alfama guesthouse for 690 EUR, so the budget is now 1,510 EUR.", "m3",
            ts=day + 180_000),
        reset("r1", "m4", reason="daily"),
        msg("n1", "user", "Morning! Any news on the flight prices?", "r1", ts=day + 86_400_000),
        msg("n2", "assistant", "Flights dropped to 380 EUR; the budget falls to 1,470 EUR.", "n1", ts=day + 86_460_000),
    ]
    assert server.post("transcript.append", {"sessionKey": key, "sessionId": "s1", "events": first})[0] == 200
    assert server.post("sessions.rotate", {"sessionKey": key, "sessionId": "s2", "reason": "new"})[0] == 200
    server.post("transcript.append", {"sessionKey": key, "sessionId": "s2", "events": chain("p", [
        ("user", "New week: what was the Lisbon budget again?"),
        ("assistant", "1,470 EUR for six nights in Alfama, flights included.")], ts=day + 7 * 86_400_000)})
    server.post("sessions.upsert", {"sessionKey": "agent:main:notes", "label": "Daily notes", "kind": "direct"})
    server.post("transcript.append", {"sessionKey": "agent:main:notes", "events": chain("d", [
        ("user" if i % 2 == 0 else "assistant", f"Note {i}: " + ("the budget review is on Friday" if i == 40 else "nothing new"))
        for i in range(80)], ts=day)})
    server.post("sessions.upsert", {"sessionKey": "agent:ops:main", "label": "Ops desk", "kind": "group"})
    server.post("transcript.append", {"sessionKey": "agent:ops:main", "events": chain("o", [
        ("user", "Is the Q2 infrastructure budget approved?")], ts=day + 3 * 86_400_000)})


def test_a_hit_opens_its_history_with_the_reset_and_the_rotated_window_marked(server, page):
    lisbon(server)
    page.goto(f"{server.url}/ui")
    expect(page.locator("#agent option[value=ops]")).to_have_count(1)
    page.locator("#q").fill("budget")
    page.locator("#q").press("Enter")
    hits = page.locator("#results .hit")
    expect(hits).to_have_count(8)
    expect(hits.filter(has_text="Alfama guesthouse")).to_contain_text("Trip planning")  # the label, not the key
    expect(hits.filter(has_text="infrastructure")).to_contain_text("group")  # the session's kind
    shot(page, "search")
    page.locator("#order").select_option("recent")  # the newest first: the rotated window's turns
    expect(hits.first).to_contain_text("what was the Lisbon budget again")
    page.locator("#agent").select_option("ops")
    expect(hits).to_have_count(1)
    page.locator("#agent").select_option("")

    # keyboard: the focus stays in the box (a combobox); ArrowDown makes each option the active one
    # in turn, Enter opens it, Escape comes back to the box with that option active again
    page.locator("#q").focus()
    page.keyboard.press("ArrowDown")
    target = hits.filter(has_text="Alfama guesthouse")
    for _ in range(20):
        if target.get_attribute("aria-selected") == "true":
            break
        page.keyboard.press("ArrowDown")
    expect(page.locator("#q")).to_be_focused()
    expect(page.locator("#q")).to_have_attribute("aria-activedescendant", target.get_attribute("id"))
    page.keyboard.press("Enter")
    history = page.locator("#history")
    expect(history.locator(".anchor")).to_contain_text("Alfama guesthouse for 690 EUR")
    expect(history.locator(".anchor")).to_be_focused()
    # the anchor's own view: the four turns before the reset, none after it; the reset marked at its end
    expect(history.locator(".msg")).to_have_count(4)
    expect(history.locator("li").last).to_have_class("reset")
    expect(history.locator(".reset")).to_contain_text("Session reset here")
    expect(page.locator("#history-window")).to_contain_text("earlier window (s1)")
    expect(page.locator("#history-window")).to_contain_text("current window is s2")
    expect(page.locator("#history-older")).to_be_hidden()
    expect(page.locator("#history-newer")).to_be_hidden()
    shot(page, "history")
    page.keyboard.press("Escape")
    expect(page.locator("#q")).to_be_focused()
    expect(target).to_have_attribute("aria-selected", "true")

    # a long session pages older and newer around the anchor
    page.locator("#q").fill("review")
    page.locator("#q").press("Enter")
    expect(hits).to_have_count(1)
    hits.first.click()
    expect(history.locator(".msg")).to_have_count(30)
    page.locator("#history-older").click()
    expect(history.locator(".msg")).to_have_count(45)
    expect(history.locator(".msg").first).to_contain_text("Note 10:")
    page.locator("#history-newer").click()
    expect(history.locator(".msg")).to_have_count(59)
    expect(history.locator(".anchor")).to_contain_text("Note 40: the budget review is on Friday")
    page.console.check()


def test_the_status_view_shows_the_backlog_draining_live(server, page, tmp_path):
    server.post("transcript.append", {"sessionKey": "agent:main:live", "events": chain("live", [("user", "hello")])})
    page.goto(f"{server.url}/ui#status")
    expect(page.locator("#st-complete")).to_have_text("100.0%")
    import_without_index(server, write_state(tmp_path / "state", {
        f"agent:main:archive-{n}": (f"Archive {n}", chain(f"a{n}-", [("user", f"Archived note {n}")] * 1))
        for n in range(12)}))
    # nothing has asked for these windows yet: the backlog waits, and the page shows it without a reload
    expect(page.locator("#st-backlog")).to_have_text("12")
    expect(page.locator("#agents-body tr")).to_have_count(1)
    expect(page.locator("#agents-body")).to_contain_text("1 / 13")
    expect(page.locator("#st-queue")).to_have_text("0")
    assert server.post("sessions.search", {"query": "archived"})[1]["indexing"] is True  # queues them
    expect(page.locator("#st-backlog")).to_have_text("0")
    expect(page.locator("#st-complete")).to_have_text("100.0%")
    expect(page.locator("#agents-body")).to_contain_text("13 / 13")
    expect(page.locator("#st-rate-unit")).to_have_text("windows / s reconciled")
    # the chart: one point per refresh, the line starting at the backlog of 12 and ending at 0
    points = page.locator("#chart polyline").get_attribute("points").split()
    ys = [float(p.split(",")[1]) for p in points]
    assert len(points) >= 3 and min(ys) < ys[-1] == max(ys), points  # SVG y grows downwards
    expect(page.locator("#chart text").first).to_have_text("12")
    if SAVE_SHOTS:  # one more refresh, so that the picture shows the drained backlog staying at zero
        page.wait_for_function("n => document.querySelector('#chart polyline').getAttribute('points')"
                               ".split(' ').length > n", arg=len(points))
    shot(page, "status")
    page.console.check()


def test_with_a_token_the_page_asks_once_and_keeps_it_for_the_tab(tmp_path, page):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN=TOKEN)
    try:
        srv.post("transcript.append", {"sessionKey": "agent:main:main", "events": chain("m", [
            ("user", "The notary appointment is on Tuesday.")])}, headers={"Authorization": f"Bearer {TOKEN}"})
        for path in ("/ui", "/ui/ui.js", "/ui/ui.css"):  # the page loads without the token ...
            with urllib.request.urlopen(srv.url + path) as answer:
                assert answer.status == 200 and "script-src 'self'" in answer.headers["Content-Security-Policy"]
        assert srv.get("/ui/status.json")[0] == 401  # ... what it shows does not
        page.goto(f"{srv.url}/ui")
        dialog = page.locator("#token-dialog")
        expect(dialog).to_be_visible()  # the first API call met a 401
        expect(page.locator("#token")).to_be_focused()
        shot(page, "token")
        page.locator("#token").fill("wrong")
        page.keyboard.press("Enter")
        expect(page.locator("#token-error")).to_contain_text("That token was refused")
        page.locator("#token").fill(TOKEN)
        page.keyboard.press("Enter")
        expect(dialog).to_be_hidden()
        page.locator("#q").fill("notary")
        page.locator("#q").press("Enter")
        expect(page.locator("#results .hit")).to_have_count(1)
        assert page.evaluate("sessionStorage.getItem('sessionsearch.token')") == TOKEN
        page.reload()  # kept for the tab: no second prompt
        page.locator("#q").fill("notary")
        page.locator("#q").press("Enter")
        expect(page.locator("#results .hit")).to_have_count(1)
        expect(dialog).to_be_hidden()
        assert TOKEN not in page.url
        page.console.check(401)
    finally:
        assert srv.stop() == 0


def test_an_api_error_is_shown_with_its_message(server, page):
    page.goto(f"{server.url}/ui")
    page.locator("#q").fill("loan " * 1000)  # past the 4096-character limit
    page.locator("#q").press("Enter")
    state = page.locator("#search-state")
    expect(state).to_have_attribute("data-state", "error")
    expect(state).to_have_text("query must not exceed 4096 characters")
    expect(page.locator("#results .hit")).to_have_count(0)
    page.console.check(400)


def test_the_page_fits_a_phone_shows_markup_as_text_and_has_a_strict_policy(server, page):
    lisbon(server)
    server.post("transcript.append", {"sessionKey": "agent:main:html", "events": chain("h", [
        ("user", 'Paste: <img src=x onerror="document.title=1"> and <b>Lisbon</b> budgeting')])})
    page.set_viewport_size({"width": 390, "height": 800})
    answer = page.goto(f"{server.url}/ui")
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
    page.locator("#q").fill("lisbon budg")
    expect(page.locator("#results .hit")).to_have_count(3)
    markup = page.locator("#results .hit").filter(has_text="Paste:")
    expect(markup).to_contain_text('<img src=x onerror="document.title=1"> and <b>Lisbon</b> budgeting')
    assert page.locator("#results img, #results b").count() == 0  # text, never markup
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing runs off the side
    shot(page, "phone")
    page.console.check()


def test_bidirectional_controls_cannot_disguise_a_key_a_label_or_a_snippet(server, page):
    spoof = "agent:main:\u202egnp.exe"  # shows as agent:main:exe.png when the override acts
    server.post("transcript.append", {"sessionKey": spoof, "events": chain("b", [("user", "invoice \u202eattached")])})
    server.post("sessions.upsert", {"sessionKey": "agent:main:lbl", "label": "\u202eevil label", "kind": "direct"})
    server.post("transcript.append", {"sessionKey": "agent:main:lbl", "events": chain("c", [("user", "invoice two")])})
    page.goto(f"{server.url}/ui")
    page.locator("#q").fill("invoice")
    page.locator("#q").press("Enter")
    hits = page.locator("#results .hit")
    expect(hits).to_have_count(2)
    spoofed = hits.filter(has_text="attached")
    expect(spoofed.locator(".hit-title")).to_have_text("agent:main:<U+202E>gnp.exe")  # the control, shown
    isolation = "n => [n.tagName, getComputedStyle(n).unicodeBidi]"
    for node in (spoofed.locator(".hit-title"), spoofed.locator(".snippet"),
                 hits.filter(has_text="invoice two").locator(".hit-title"),
                 hits.filter(has_text="invoice two").locator(".hit-key")):
        assert node.evaluate(isolation) == ["BDI", "isolate"]
    expect(hits.filter(has_text="invoice two").locator(".hit-title")).to_have_text("\u202eevil label")
    spoofed.click()
    meta = page.locator("#history-meta")
    expect(meta).to_contain_text("agent:main:<U+202E>gnp.exe · window ")
    assert "\u202e" not in meta.text_content()
    assert page.locator("#history-title bdi").evaluate(isolation) == ["BDI", "isolate"]
    assert page.locator("#history .msg-body").first.evaluate("n => getComputedStyle(n).unicodeBidi") == "isolate"
    page.console.check()


def test_search_by_meaning_shows_how_each_hit_was_found_and_the_embedding_progress(server, page):
    server.post("transcript.append", {"sessionKey": "agent:main:main", "events": chain("h", [
        ("user", "I'm applying for a mortgage with Banca Sella."),
        ("assistant", "Over 25 years the monthly payment is about 1,151 EUR.")])})
    page.goto(f"{server.url}/ui")
    bodies = search_bodies(page)
    state = page.locator("#search-state")
    page.locator("#q").fill("how much will I pay each month for the house")
    page.locator("#q").press("Enter")
    expect(state).to_have_attribute("data-state", "empty")  # by words: no message holds them all
    expect(page.locator("#order option[value=recent]")).to_be_enabled()
    page.select_option("#order", "recent")
    page.select_option("#mode", "hybrid")  # searches again at once, by words and meaning
    expect(page.locator("#order")).to_have_value("relevance")  # newest-first is a keyword order
    expect(page.locator("#order option[value=recent]")).to_be_disabled()
    # the page searches again by itself while the worker embeds what the first meaning search queued
    expect(state).to_have_attribute("data-state", "results", timeout=30_000)
    top = page.locator("#results .hit").first
    expect(top).to_contain_text("monthly payment is about 1,151 EUR")
    expect(top.locator(".badge.matched")).to_have_text("by meaning")
    expect(top.locator("mark")).to_have_count(0)  # "the" is in it by chance: found by meaning, nothing marked
    assert bodies[-1]["mode"] == "hybrid" and bodies[-1]["order"] == "relevance"
    page.locator("#q").fill("monthly payment")
    page.locator("#q").press("Enter")
    expect(page.locator("#results .hit").first.locator(".badge.matched")).to_have_text("by words + meaning")
    expect(page.locator("#results .hit").first.locator("mark")).to_have_text(["monthly", "payment"])
    shot(page, "meaning")
    page.select_option("#mode", "keyword")
    expect(page.locator("#results .hit")).to_have_count(1)
    expect(page.locator("#results .badge.matched")).to_have_count(0)
    assert "mode" not in bodies[-1]  # a search by words sends what it always sent
    page.locator("#tab-status").click()
    expect(page.locator("#st-embedded")).to_have_text("100.0%")
    expect(page.locator("#st-embedded-unit")).to_have_text("of messages searchable by meaning")
    expect(page.locator("#agents-body tr td").last).to_have_text("2 / 2")
    page.console.check()


def test_with_the_embedder_off_a_search_by_meaning_says_so(tmp_path, page):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_EMBEDDER="none")
    try:
        srv.post("transcript.append", {"sessionKey": "agent:main:main", "events": chain("h", [
            ("user", "The monthly payment is about 1,151 EUR.")])})
        page.goto(f"{srv.url}/ui")
        page.locator("#q").fill("monthly payment")
        page.locator("#q").press("Enter")
        expect(page.locator("#results .hit")).to_have_count(1)
        page.select_option("#mode", "semantic")
        state = page.locator("#search-state")
        expect(state).to_have_attribute("data-state", "error")
        expect(state).to_have_text("semantic search is disabled")
        expect(page.locator("#results .hit")).to_have_count(0)
        page.select_option("#mode", "keyword")  # words still work
        expect(page.locator("#results .hit")).to_have_count(1)
        page.console.check(400)
    finally:
        assert srv.stop() == 0


def test_the_bare_address_leads_a_browser_to_the_page_with_a_token_configured_too(tmp_path, page):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN=TOKEN)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        connection.request("GET", "/")
        answer = connection.getresponse()
        assert (answer.status, answer.headers["Location"]) == (307, "/ui")  # open, like the page it leads to
        connection.close()
        page.goto(f"{srv.url}/")
        assert page.url == f"{srv.url}/ui"
        expect(page.locator("#token-dialog")).to_be_visible()  # the page, asking for the token as it does
        page.console.check(401)
    finally:
        assert srv.stop() == 0


def test_the_demo_sample_searched_by_words_and_meaning_finds_the_monthly_payment(server, page):
    """The README's picture: what `make demo` imports, searched as its last step does."""
    import_without_index(server, DEMO_DATA)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{server.url}/ui")
    page.select_option("#mode", "hybrid")
    page.locator("#q").fill("how much is the monthly installment on the house")  # the demo's question
    page.locator("#q").press("Enter")
    # the page searches again by itself while the sample is reconciled and embedded
    expect(page.locator("#search-state")).to_have_attribute("data-state", "results", timeout=60_000)
    top = page.locator("#results .hit").first
    expect(top).to_contain_text("monthly payment is about 1,151 EUR")
    expect(top.locator(".badge.matched")).to_have_text("by words + meaning")  # "monthly", and the rest by meaning
    shot(page, "demo")
    page.console.check()


# the width the box's text takes beside what the box shows of it (its content box less the room
# Chromium keeps for the clear button of a search field)
FITS = """text => {
  const box = document.querySelector('#q'), style = getComputedStyle(box);
  const context = document.createElement('canvas').getContext('2d');
  context.font = style.font;
  const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 24;
  return [context.measureText(text).width, room];
}"""


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)])
def test_the_search_box_shows_its_whole_placeholder_and_a_question_on_a_desktop_and_a_phone(server, page,
                                                                                             width, height):
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{server.url}/ui")
    placeholder = page.locator("#q").get_attribute("placeholder")
    assert placeholder
    needed, room = page.evaluate(FITS, placeholder)
    assert needed <= room, (placeholder, needed, room)
    if width >= 1024:  # a question by meaning, as the demo asks it, fits on a desktop too
        needed, room = page.evaluate(FITS, "how much will I pay each month for the house")
        assert needed <= room, (needed, room)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.console.check()
