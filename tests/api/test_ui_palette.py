"""The Control UI's palette in a real browser (Debian's chromium driven by Playwright) against a real
`sessionsearch serve` on loopback: one box, sessions by title (Sessions) above transcript hits
(Messages), both within the filters the operator set, sent to the server as one `scope`.

With SESSIONSEARCH_SAVE_SCREENSHOTS=1 (`make screenshots`) the last test saves docs/screenshots/palette.png.
"""

from __future__ import annotations

import json
import time
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, Request, Route, expect

from ..helpers import chain
from ..server import Server
from .test_search_modes import store_server  # noqa: F401 (a fixture: a server on the `backend` store)
from .test_ui import browser, import_without_index, page, shot, write_state  # noqa: F401 (fixtures among them)

DAY = 86_400_000


def roster(server: Server, now: int) -> None:
    """Sessions of every kind in two agents, most of them about Lisbon, by title or by what was said."""
    def session(key: str, events: list[dict], **meta: Any) -> None:
        assert server.post("sessions.upsert", {"sessionKey": key, **meta})[0] == 200
        assert server.post("transcript.append", {"sessionKey": key, "events": events})[0] == 200

    session("agent:main:trip", chain("t", [
        ("user", "Draft a budget for the Lisbon trip in May."),
        ("assistant", "Flights 420 EUR, an Alfama guesthouse 690 EUR, the Lisbon ferry to Cacilhas 3 EUR.")], ts=now - DAY),
        label="Lisbon trip", kind="direct", group="Travel")
    session("agent:main:office", chain("o", [
        ("user", "The Lisbon lease is signed; movers come on Friday."),
        ("assistant", "Noted: the desks arrive Monday.")], ts=now - 2 * DAY),
        label="Lisbon office move", kind="group")
    session("agent:main:digest", chain("d", [
        ("assistant", "Nightly digest: Lisbon 24°C, light wind.")], ts=now - 3 * DAY),
        label="Weather digest", kind="cron")
    session("agent:main:helper", chain("h", [
        ("assistant", "Subagent: I compared three Lisbon hotels.")], ts=now - 3 * DAY),
        label="Lisbon hotel research", kind="subagent", spawnedBy="agent:main:trip")  # ungrouped: not in the palette
    session("agent:ops:desk", chain("k", [
        ("user", "Is the Lisbon datacenter on the new power contract?")], ts=now - 4 * DAY),
        label="Ops desk", kind="group")
    session("agent:main:notes", chain("n", [
        ("user" if i % 2 == 0 else "assistant",
         f"Note {i}: " + ("the tram to Belém leaves from Lisbon's Praça da Figueira" if i == 40 else "nothing new"))
        for i in range(80)], ts=now - 5 * DAY),
        label="Daily notes", kind="direct")


def requests_to(tab: Page) -> dict[str, list[dict]]:
    """The JSON bodies the page sends to sessions.list and sessions.search, as sent."""
    sent: dict[str, list[dict]] = {"sessions.list": [], "sessions.search": []}

    def seen(request: Request) -> None:
        method = request.url.rsplit("/", 1)[-1]
        if method in sent:
            sent[method].append(json.loads(request.post_data or "{}"))

    tab.on("request", seen)
    return sent


def shown(tab: Page) -> tuple[list[str], list[str]]:
    """The palette's options as (Sessions, Messages): session keys, and `sessionKey messageId` of hits."""
    keys = tab.locator("#palette [role=option]").evaluate_all("os => os.map(o => [o.id, o.dataset.key])")
    sessions = [key.split(" ", 1)[1] for id_, key in keys if id_.startswith("palette-s-")]
    messages = [" ".join(key.split(" ")[1::2]) for id_, key in keys if id_.startswith("palette-m-")]
    return sessions, messages


def answered(server: Server, query: str, scope: dict, match: str = "prefix") -> tuple[list[str], list[str]]:
    """What the server itself answers for that scope: the titles, then the messages."""
    status, listed = server.post("sessions.list", {"scope": {**scope, "search": query}, "limit": 8})
    assert status == 200, listed
    status, found = server.post("sessions.search", {"query": query, "match": match, "limit": 25, "scope": scope})
    assert status == 200, found
    return ([s["sessionKey"] for s in listed["sessions"]],
            [f"{hit['sessionKey']} {hit['messageId']}" for hit in found["results"]])


def expect_palette(tab: Page, server: Server, query: str, scope: dict) -> tuple[list[str], list[str]]:
    want = answered(server, query, scope)
    tab.wait_for_function("([s, m]) => document.querySelectorAll('#palette-sessions [role=option]').length === s "
                           "&& document.querySelectorAll('#results [role=option]').length === m "
                           "&& !document.querySelector('#search-state').hasAttribute('aria-busy')",
                           arg=[len(want[0]), len(want[1])])
    assert shown(tab) == want
    return want


def test_typing_shows_sessions_by_title_then_messages_and_the_filters_narrow_both_as_the_scope_says(
        store_server, page):  # noqa: F811 (fixtures)
    server = store_server
    roster(server, int(time.time() * 1000))
    page.goto(f"{server.url}/ui")
    expect(page.locator("#agent option[value=ops]")).to_have_count(1)
    sent = requests_to(page)
    box = page.locator("#q")
    box.press_sequentially("lisb")
    sessions, messages = expect_palette(page, server, "lisb", {"palette": True})
    # Sessions first, then Messages, each under its heading
    assert sessions == ["agent:main:office", "agent:main:trip"]  # newest first; the subagent run is not in the palette
    assert "agent:main:helper" not in {m.split()[0] for m in messages}
    assert len(messages) == 6
    titles = page.locator("#palette .group-title")
    expect(titles).to_have_text(["Sessions", "Messages"])
    order = page.evaluate("[...document.querySelectorAll('#palette .group-title, #palette [role=option]')]"
                          ".map(n => n.classList.contains('group-title') ? n.textContent : n.id.slice(0, 10))")
    assert order == ["Sessions", "palette-s-", "palette-s-", "Messages", *["palette-m-"] * 6], order
    expect(page.locator("#palette-sessions .hit-title mark")).to_have_text(["Lisbon", "Lisbon"])
    expect(box).to_have_attribute("aria-expanded", "true")
    # one scope on both requests, the palette's, with no roster downloaded to filter by
    assert sent["sessions.list"][-1] == {"scope": {"palette": True, "search": "lisb"}, "limit": 8}
    last = sent["sessions.search"][-1]
    assert (last["query"], last["match"], last["scope"]) == ("lisb", "prefix", {"palette": True})
    assert "agentId" not in last and "sessionKeys" not in last
    assert all("search" in body["scope"] for body in sent["sessions.list"])  # every listing was a title search

    # a kind: both groups change as the server's scope selects
    page.locator("#kinds input[value=group]").check()
    scope: dict[str, Any] = {"palette": True, "kinds": ["group"]}
    sessions, messages = expect_palette(page, server, "lisb", scope)
    assert sessions == ["agent:main:office"] and {m.split()[0] for m in messages} == {"agent:main:office", "agent:ops:desk"}
    assert sent["sessions.search"][-1]["scope"] == scope
    assert sent["sessions.list"][-1]["scope"] == {**scope, "search": "lisb"}

    # an agent beside it: the ops desk alone, and no session of its has Lisbon in its title
    page.locator("#agent").select_option("ops")
    scope = {"palette": True, "agentIds": ["ops"], "kinds": ["group"]}
    sessions, messages = expect_palette(page, server, "lisb", scope)
    assert sessions == [] and messages == ["agent:ops:desk k1"]
    expect(page.locator("#palette-sessions")).to_be_hidden()
    assert sent["sessions.search"][-1]["scope"] == scope and sent["sessions.list"][-1]["scope"]["agentIds"] == ["ops"]

    # a label (equal, any case) and a group, typed, instead of the kind and the agent
    page.locator("#agent").select_option("")
    page.locator("#kinds input[value=group]").uncheck()
    page.locator("#label").fill("lisbon TRIP")
    scope = {"palette": True, "label": "lisbon TRIP"}
    sessions, messages = expect_palette(page, server, "lisb", scope)
    assert sessions == ["agent:main:trip"] and {m.split()[0] for m in messages} == {"agent:main:trip"}
    page.locator("#label").fill("")
    page.locator("#group").fill("Travel")
    page.locator("#active").select_option("1440")
    scope = {"palette": True, "group": "Travel", "activeMinutes": 1440}
    sessions, messages = expect_palette(page, server, "lisb", scope)
    assert sessions == ["agent:main:trip"] and len(messages) == 2
    assert sent["sessions.search"][-1]["scope"] == scope
    assert sent["sessions.list"][-1]["scope"] == {**scope, "search": "lisb"}
    page.console.check()


def test_active_within_leaves_out_a_session_last_active_long_ago_in_both_groups(server, page, tmp_path):  # noqa: F811
    roster(server, int(time.time() * 1000))
    # imported beside the server: its activity is sessions.json's updatedAt, January 2026 (write_state)
    import_without_index(server, write_state(tmp_path / "state", {
        "agent:main:old": ("Lisbon archive", chain("a", [("user", "Lisbon notes from the year before")]))}))
    page.goto(f"{server.url}/ui")
    page.locator("#q").press_sequentially("lisb")
    expect(page.locator("#search-state")).to_have_attribute("data-state", "results", timeout=30_000)  # reconciled
    sessions, messages = expect_palette(page, server, "lisb", {"palette": True})
    assert "agent:main:old" in sessions and "agent:main:old a1" in messages
    page.locator("#active").select_option("43200")
    sessions, messages = expect_palette(page, server, "lisb", {"palette": True, "activeMinutes": 43200})
    assert sessions == ["agent:main:office", "agent:main:trip"] and len(messages) == 6
    assert "agent:main:old" not in {m.split()[0] for m in messages}
    page.console.check()


def test_the_keyboard_walks_both_groups_and_opens_a_message_marked_and_scrolled_into_view(server, page):  # noqa: F811
    roster(server, int(time.time() * 1000))
    page.goto(f"{server.url}/ui")
    box = page.locator("#q")
    box.press_sequentially("lisbon")
    expect_palette(page, server, "lisbon", {"palette": True})
    options = page.locator("#palette [role=option]")
    sessions = page.locator("#palette-sessions [role=option]")
    note = page.locator("#results [role=option]").filter(has_text="tram to Belém")
    # ↓ from the box: the first session, the second, then on into the messages; the focus never leaves the box
    box.press("ArrowDown")
    expect(box).to_have_attribute("aria-activedescendant", "palette-s-0")
    expect(sessions.first).to_have_attribute("aria-selected", "true")
    box.press("ArrowDown")
    box.press("ArrowDown")
    expect(box).to_have_attribute("aria-activedescendant", "palette-m-0")
    assert options.evaluate_all("os => os.filter(o => o.getAttribute('aria-selected') === 'true').length") == 1
    box.press("ArrowUp")
    expect(box).to_have_attribute("aria-activedescendant", "palette-s-1")
    for _ in range(10):
        if note.get_attribute("aria-selected") == "true":
            break
        box.press("ArrowDown")
    expect(box).to_be_focused()
    expect(box).to_have_attribute("aria-activedescendant", note.get_attribute("id"))
    box.press("Enter")
    # the history around it: the message marked, in view, after the 30-message read put it mid-list
    anchor = page.locator("#history .anchor")
    expect(anchor).to_contain_text("Note 40: the tram to Belém leaves from Lisbon's Praça da Figueira")
    expect(anchor).to_have_attribute("aria-current", "true")
    expect(anchor).to_be_focused()
    expect(anchor).to_be_in_viewport()
    expect(page.locator("#history .msg")).to_have_count(30)
    assert page.evaluate("window.scrollY") > 0  # scrolled to it: it was below the fold
    assert page.locator("#history .msg").first.evaluate("n => n.getBoundingClientRect().bottom") < 0
    # Escape: back to the palette, the box focused and the message active again
    page.keyboard.press("Escape")
    expect(box).to_be_focused()
    expect(note).to_have_attribute("aria-selected", "true")
    # a session chosen by keyboard opens its history at its newest messages
    for _ in range(10):
        if box.get_attribute("aria-activedescendant") == "palette-s-0":
            break
        box.press("ArrowUp")
    title = sessions.first.locator(".hit-title").text_content()
    box.press("Enter")
    expect(page.locator("#history-title")).to_have_text(title)
    expect(page.locator("#history .msg").last).to_be_in_viewport()
    expect(page.locator("#history .anchor")).to_have_count(0)
    page.keyboard.press("Escape")
    # Escape in the box: first lets the option go, then clears the box and closes the palette
    expect(box).to_have_attribute("aria-activedescendant", "palette-s-0")
    box.press("Escape")
    expect(box).not_to_have_attribute("aria-activedescendant", "palette-s-0")
    expect(box).to_have_value("lisbon")
    box.press("Escape")
    expect(box).to_have_value("")
    expect(options).to_have_count(0)
    expect(box).to_have_attribute("aria-expanded", "false")
    expect(page.locator("#search-state")).to_have_attribute("data-state", "idle")
    # the roles a screen reader needs
    assert box.get_attribute("role") == "combobox" and box.get_attribute("aria-controls") == "palette"
    assert page.locator("#palette").get_attribute("role") == "listbox"
    assert page.locator("#palette [role=group]").count() == 2
    page.console.check()


def test_an_older_answer_arriving_last_does_not_replace_the_newer_one(server, page):  # noqa: F811
    """The first query's requests are held at the network (the real server answers them, later);
    the second query's pass. Released after the second query's answer is shown, the first's must
    not replace it."""
    roster(server, int(time.time() * 1000))
    page.goto(f"{server.url}/ui")
    held: list[Route] = []

    def hold_the_first_query(route: Route) -> None:
        body = json.loads(route.request.post_data or "{}")
        if body.get("query") == "ferry" or body.get("scope", {}).get("search") == "ferry":
            held.append(route)
        else:
            route.continue_()

    page.route("**/v1/sessions.*", hold_the_first_query)
    box = page.locator("#q")
    box.fill("ferry")
    expect(page.locator("#search-state")).to_have_attribute("aria-busy", "true")
    for _ in range(100):  # the title search and the message search, both held
        if len(held) == 2:
            break
        page.wait_for_timeout(50)
    assert sorted(r.request.url.rsplit("/", 1)[-1] for r in held) == ["sessions.list", "sessions.search"]
    box.fill("lease")
    expect(page.locator("#results [role=option]")).to_have_count(1)
    expect(page.locator("#results [role=option]")).to_contain_text("Lisbon lease is signed")
    for route in held:  # the server's real answers to the first query, now
        answer = route.fetch()
        assert "ferry" in answer.text() or "sessions" in answer.json()
        try:
            route.fulfill(response=answer)
        except PlaywrightError:
            pass  # the page had already aborted it
    page.evaluate("() => new Promise(r => setTimeout(r, 300))")  # what the page does with them, done
    expect(page.locator("#results [role=option]")).to_have_count(1)
    expect(page.locator("#results [role=option]")).to_contain_text("Lisbon lease is signed")
    expect(page.locator("#palette")).not_to_contain_text("ferry")
    expect(page.locator("#search-state")).to_contain_text("1 result")
    page.console.check()


def test_the_palette_screenshot_shows_both_groups_with_a_filter_set(server, page):  # noqa: F811
    """docs/screenshots/palette.png: the palette over real data, with a kind filter set."""
    roster(server, int(time.time() * 1000))
    page.set_viewport_size({"width": 1100, "height": 720})
    page.goto(f"{server.url}/ui")
    page.locator("#kinds input[value=direct]").check()
    page.locator("#kinds input[value=group]").check()
    page.locator("#active").select_option("1440")
    page.locator("#q").press_sequentially("lisb")
    scope = {"palette": True, "kinds": ["direct", "group"], "activeMinutes": 1440}
    sessions, messages = expect_palette(page, server, "lisb", scope)
    assert len(sessions) == 2 and len(messages) == 5  # the cron digest is not of those kinds
    page.locator("#q").press("ArrowDown")
    page.locator("#q").press("ArrowDown")
    page.locator("#q").press("ArrowDown")
    expect(page.locator("#results [role=option]").first).to_have_attribute("aria-selected", "true")
    shot(page, "palette")
    page.console.check()
