"""The dashboard, used as a person uses it: Debian's headless Chromium against a live server.

A real `haki-context serve` (its own process and database, development mode, the hashing
embedder) serves /dashboard; Chromium opens it with the network closed to anything but the
server (tests/browser_support.py, shared with the GraphiQL browser test). Each test does what a
person would: opens a view, clicks, reads what is on screen, and checks it against the GraphQL API.

With HAKI_DASHBOARD_SCREENSHOTS=<dir> set, each test writes its view's screenshot there
(docs/img/ holds the committed ones); otherwise under the test's tmp_path.

In CI (env CI set) a missing chromium fails the tests; locally they are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_support import CLI, Page, Served, haki_env, require_chromium, serve, wait_for

# Enough fact candidates for a trace of 500+ decisions (the default takes 64 per axis).
RETRIEVAL_TOP_K = "256"


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; checked before the database starts."""
    return require_chromium("the dashboard browser tests")


@pytest.fixture(scope="module")
def served(chromium: str, pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`haki-context serve` on a free loopback port in development mode, once /readyz says ready."""
    with serve(pg_uri, tmp_path_factory, HAKI_RETRIEVAL_TOP_K=RETRIEVAL_TOP_K) as running:
        yield running


@pytest.fixture
def server(served: Served) -> str:
    """The server's base URL."""
    return served.base


# ---------------------------------------------------------------- the API, as an agent calls it


def gql(base: str, query: str, variables: dict[str, Any] | None = None, key: str | None = None) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = httpx.post(
        f"{base}/graphql", json={"query": query, "variables": variables or {}}, headers=headers, timeout=30
    ).json()
    assert not body.get("errors"), body
    data: dict[str, Any] = body["data"]
    return data


def new_subject(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


ASSERT = "mutation($i: FactInput!) { assertFact(input: $i) { fact { id } outcome conflict { id } } }"
CONTEXT = """query($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    traceId usedTokens rendered facts { id predicate }
    trace { decisions { itemKind itemId decision reasonCode rank overallRank similarity fullText recency tokens } }
  }
}"""


def assert_fact(base: str, subject: str, predicate: str, value: Any, **more: Any) -> dict[str, Any]:
    fact: dict[str, Any] = gql(
        base, ASSERT, {"i": {"subjectId": subject, "predicate": predicate, "value": value, **more}}
    )["assertFact"]
    return fact


def assert_facts(base: str, subject: str, facts: list[dict[str, Any]]) -> list[str]:
    """Many facts, 15 to a request (the alias limit); returns their ids in order."""
    ids: list[str] = []
    for start in range(0, len(facts), 15):
        chunk = facts[start : start + 15]
        fields = " ".join(f"f{i}: assertFact(input: $i{i}) {{ fact {{ id }} }}" for i in range(len(chunk)))
        params = ", ".join(f"$i{i}: FactInput!" for i in range(len(chunk)))
        variables = {f"i{i}": {"subjectId": subject, **f} for i, f in enumerate(chunk)}
        data = gql(base, f"mutation({params}) {{ {fields} }}", variables)
        ids += [data[f"f{i}"]["fact"]["id"] for i in range(len(chunk))]
    return ids


def open_conflicts(base: str, pairs: list[tuple[str, str]]) -> None:
    for start in range(0, len(pairs), 15):
        chunk = pairs[start : start + 15]
        fields = " ".join(f'c{i}: openConflict(factIds: ["{a}", "{b}"]) {{ id }}' for i, (a, b) in enumerate(chunk))
        gql(base, f"mutation {{ {fields} }}")


def record_events(base: str, subject: str, texts: list[str], occurred: datetime | None = None) -> list[str]:
    inputs = [
        {
            "subjectId": subject,
            "kind": "conversation.message",
            "payload": {"role": "user", "text": text},
            **({"occurredAt": (occurred + timedelta(minutes=i)).isoformat()} if occurred else {}),
        }
        for i, text in enumerate(texts)
    ]
    data = gql(base, "mutation($e: [EventInput!]!) { recordEvents(inputs: $e) { id } }", {"e": inputs})
    return [e["id"] for e in data["recordEvents"]]


def context(base: str, subject: str, query: str, budget: int = 900, key: str | None = None) -> dict[str, Any]:
    packet: dict[str, Any] = gql(base, CONTEXT, {"s": subject, "q": query, "b": budget}, key)["context"]
    return packet


# ---------------------------------------------------------------- the browser, as a person uses it


class Dashboard(Page):
    """A tab of the dashboard."""

    async def open(self, fragment: str) -> None:
        await self.navigate(f"/dashboard{fragment}")
        await wait_for(lambda: self.js("document.readyState === 'complete' && !!window.haki"), "the dashboard to load")

    async def explain(self) -> str:
        """The page's error banner and view."""
        banner = await self.text("#banner")
        shown = (await self.text("#view"))[:1500]
        return f"\nbanner: {banner!r}\nview: {shown}"


@contextlib.asynccontextmanager
async def dashboard(chromium: str, base: str, tmp_path: Path) -> AsyncIterator[Dashboard]:
    shots = Path(os.environ.get("HAKI_DASHBOARD_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    async with Dashboard.opened(chromium, base, shots) as page:
        await page.cdp.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 860, "deviceScaleFactor": 1, "mobile": False},
            session=page.session,
        )
        yield page


# ---------------------------------------------------------------- the tests


async def test_the_live_list_shows_a_context_call_made_after_the_page_opened(
    chromium: str, server: str, tmp_path: Path
) -> None:
    subject, other = new_subject("live"), new_subject("other")
    assert_fact(server, subject, "invoice_language", "German")
    assert_fact(server, subject, "preferred_currency", "EUR")
    record_events(server, subject, ["Please send the invoices in German from now on."])
    context(server, subject, "Which currency?")  # one call before the page opens
    async with dashboard(chromium, server, tmp_path) as page:
        await page.open(f"#/traces?subject={subject}")
        await page.wait("document.querySelectorAll('#trace-rows tr').length", "the first call's row")
        await wait_for(lambda: page.text("#live-state"), "the list to go live", lambda s: s.startswith("live"))

        context(server, other, "Which language?")  # another subject: filtered out
        packet = context(server, subject, "Which language should invoices be written in?")
        row = f"#trace-rows tr[data-trace='{packet['traceId']}']"
        # Within 2 s of the call's answer, the new call is at the top of the list.
        await page.wait(f"!!document.querySelector({json.dumps(row)})", "the new call's row", timeout=2)
        cells = await page.js(f"Array.from(document.querySelectorAll({json.dumps(row + ' td')}), c => c.innerText)")
        assert cells[1] == subject
        assert cells[2] == "Which language should invoices be written in?"
        assert cells[3].startswith("OK")
        served_facts = len(packet["facts"])
        served_episodes = sum(
            1 for d in packet["trace"]["decisions"] if d["itemKind"] == "EPISODE" and d["decision"] == "INCLUDED"
        )
        assert cells[5].split()[0] == str(served_facts) and cells[6] == str(served_episodes), cells
        assert cells[7].startswith(f"{packet['usedTokens']} / 900"), cells
        first = await page.js("document.querySelector('#trace-rows tr').dataset.trace")
        assert first == packet["traceId"], "the newest call is listed first"
        ids = await page.js("Array.from(document.querySelectorAll('#trace-rows tr'), r => r.dataset.trace)")
        assert len(ids) == 2, "the other subject's call is not listed under this filter"
        mode = await page.text("#live-state")
        print(f"live list mode: {mode}")

        # Unfiltered, with a status filter: only the degraded calls of every subject.
        a, b = (
            assert_fact(server, subject, "vat_id", "DE1"),
            assert_fact(server, subject, "vat_id", "DE2", mode="CONTEST"),
        )
        assert b["outcome"] == "CONFLICT_OPENED", (a, b)
        degraded = context(server, subject, "What is the VAT id?")
        await page.open("#/traces?status=DEGRADED")
        await page.wait("document.querySelectorAll('#trace-rows tr').length", "a degraded row")
        statuses = await page.js(
            "Array.from(document.querySelectorAll('#trace-rows tr td:nth-child(4)'), c => c.innerText)"
        )
        assert statuses and all(s.startswith("DEGRADED") for s in statuses), statuses
        assert await page.js(f"!!document.querySelector(\"tr[data-trace='{degraded['traceId']}']\")")
        await page.open("#/traces")
        await page.wait("document.querySelectorAll('#trace-rows tr').length >= 4", "every call")
        await wait_for(lambda: page.text("#live-state"), "the list to go live", lambda s: s.startswith("live"))
        await page.screenshot("dashboard-traces", height=420)
        page.check_clean()


async def test_without_a_websocket_the_live_list_polls_and_still_shows_a_new_call(
    chromium: str, server: str, tmp_path: Path
) -> None:
    subject = new_subject("poll")
    assert_fact(server, subject, "invoice_language", "German")
    async with dashboard(chromium, server, tmp_path) as page:
        # A browser (or a proxy) where WebSocket is unavailable.
        await page.cdp.send(
            "Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.WebSocket;"}, session=page.session
        )
        await page.open(f"#/traces?subject={subject}")
        await wait_for(lambda: page.text("#live-state"), "the fallback", lambda s: s.startswith("live (polling"))
        packet = context(server, subject, "Which language?")
        row = f"#trace-rows tr[data-trace='{packet['traceId']}']"
        await page.wait(f"!!document.querySelector({json.dumps(row)})", "the new call's row", timeout=2)
        page.check_clean()


def create_key(served: Served, project: str) -> str:
    env = haki_env(HAKI_DATABASE_URL=served.dsn, HAKI_EMBED_PROVIDER="hashing")
    done = subprocess.run(
        [CLI, "keys", "create", "--project", project], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip().splitlines()[-1]


async def test_a_key_typed_into_the_page_shows_its_project_and_nothing_else(
    chromium: str, served: Served, tmp_path: Path
) -> None:
    base = served.base
    project = f"acme-{uuid.uuid4().hex[:6]}"
    key = create_key(served, project)
    subject = new_subject("keyed")
    gql(base, ASSERT, {"i": {"subjectId": subject, "predicate": "plan", "value": "enterprise"}}, key)
    mine = context(base, subject, "Which plan?", key=key)
    theirs = context(base, subject, "Which plan?")  # the same subject id in the development project
    async with dashboard(chromium, base, tmp_path) as page:
        await page.open("#/traces")
        await page.js("document.querySelector('#key-input').value = 'not-a-key'")
        await page.click("#key-form button")
        await page.wait("document.querySelector('#banner').innerText", "the refusal")
        assert (await page.text("#banner")).startswith("UNAUTHENTICATED"), await page.text("#banner")

        await page.js(f"document.querySelector('#key-input').value = {json.dumps(key)}")
        await page.click("#key-form button")
        await page.wait(f"!!document.querySelector(\"tr[data-trace='{mine['traceId']}']\")", "the key's call")
        assert await page.js("sessionStorage.getItem('haki-dashboard-key')") == key
        ids = await page.js("Array.from(document.querySelectorAll('#trace-rows tr'), r => r.dataset.trace)")
        assert ids == [mine["traceId"]], "another project's calls are not listed"
        assert theirs["traceId"] not in ids
        await wait_for(lambda: page.text("#live-state"), "the list to go live", lambda s: s.startswith("live"))
        later = context(base, subject, "Which plan again?", key=key)
        context(base, subject, "Which plan again?")  # development project: never listed here
        await page.wait(
            f"!!document.querySelector(\"tr[data-trace='{later['traceId']}']\")", "the next call", timeout=2
        )
        ids = await page.js("Array.from(document.querySelectorAll('#trace-rows tr'), r => r.dataset.trace)")
        assert ids == [later["traceId"], mine["traceId"]], ids

        # A reload keeps the key for the tab.
        await page.cdp.send("Page.reload", session=page.session)
        await page.wait("!!window.haki && document.querySelectorAll('#trace-rows tr').length === 2", "the reload")
        assert await page.js("document.querySelector('#key-input').value") == key
        page.check_clean(allow=["401 "])


def fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


async def test_opening_a_call_shows_every_decision_with_its_score_components(
    chromium: str, server: str, tmp_path: Path
) -> None:
    subject = new_subject("trace")
    long_ago = (datetime.now(UTC) - timedelta(days=120)).isoformat()
    assert_facts(
        server,
        subject,
        [
            {"predicate": "invoice_language", "value": "German"},
            {"predicate": "invoice_format", "value": "PDF invoices, one per order"},
            {"predicate": "billing_contact", "value": "Anna Berg in Hamburg handles invoices"},
            {"predicate": "shipping_address", "value": {"city": "Hamburg", "street": "Elbchaussee 1"}},
            {
                "predicate": "current_project",
                "value": "invoice migration",
                "volatility": "VOLATILE",
                "validFrom": long_ago,
            },
            {"predicate": "notes", "value": "Long invoice notes " + "about payment terms and dunning " * 40},
        ],
    )
    a = assert_fact(server, subject, "invoice_currency", "EUR")
    b = assert_fact(server, subject, "invoice_currency", "CHF", mode="CONTEST")
    assert b["conflict"], b
    record_events(
        server,
        subject,
        ["The invoices should be in German, please.", "Anna said invoices go out on Fridays.", "Unrelated chat"],
        occurred=datetime.now(UTC) - timedelta(days=2),
    )
    packet = context(server, subject, "In which language and currency are invoices written?", budget=120)
    decisions = packet["trace"]["decisions"]
    reasons = {d["reasonCode"] for d in decisions}
    assert {"CONFLICT_OPEN", "VOLATILITY_EXPIRED", "OVER_BUDGET", "TOP_SCORE"} <= reasons, reasons

    async with dashboard(chromium, server, tmp_path) as page:
        await page.open(f"#/traces?subject={subject}")
        link = f"tr[data-trace='{packet['traceId']}'] a.open-trace"
        await page.wait(f"!!document.querySelector({json.dumps(link)})", "the call in the list")
        await page.click(link)
        await page.wait(
            "document.querySelectorAll('#decisions tbody tr').length",
            "every decision",
            lambda n: n == len(decisions),
        )
        rows = await page.js(
            """Array.from(document.querySelectorAll('#decisions tbody tr'), r => {
                 const cell = (c) => r.querySelector(`td[data-c="${c}"]`).innerText;
                 const tds = r.querySelectorAll('td');
                 return {rank: tds[0].innerText, kind: tds[1].innerText, decision: tds[3].innerText, reason: tds[4].innerText,
                         similarity: cell('similarity'), fullText: cell('fullText'), recency: cell('recency'),
                         tokens: cell('tokens'), why: tds[11].innerText};
               })"""
        )
        # Every candidate, in the order the call packed them in (one ranking of facts and episodes),
        # the blocked facts last, with its decision, reason and score components.
        packed = sorted(decisions, key=lambda d: d["overallRank"] or len(decisions) + 1)
        ranked = [r for r in rows if r["rank"]]
        assert [r["rank"] for r in ranked] == [str(n) for n in range(1, len(ranked) + 1)]
        assert {r["kind"] for r in ranked} == {"fact", "episode"}, "ranks run across kinds"
        for shown, d in zip(rows, packed, strict=True):
            assert shown["rank"] == ("" if d["overallRank"] is None else str(d["overallRank"]))
            assert shown["kind"] == d["itemKind"].lower()
            assert (shown["decision"], shown["reason"]) == (d["decision"], d["reasonCode"])
            assert shown["similarity"] == fmt(d["similarity"]), (shown, d)
            assert shown["fullText"] == fmt(d["fullText"]), (shown, d)
            assert shown["recency"] == fmt(d["recency"]), (shown, d)
            assert shown["tokens"] == str(d["tokens"])
            if d["reasonCode"] == "CONFLICT_OPEN":
                assert shown["why"].startswith("conflict ") and "still open" in shown["why"], shown
            if d["reasonCode"] == "VOLATILITY_EXPIRED":
                assert "VOLATILE: 60 d from" in shown["why"] and "expired" in shown["why"], shown
            if d["reasonCode"] == "OVER_BUDGET":
                assert shown["why"] == f"needed {d['tokens']} tokens", shown
        blocked = {d["itemId"] for d in decisions if d["reasonCode"] == "CONFLICT_OPEN"}
        assert blocked == {a["fact"]["id"], b["fact"]["id"]}

        # The packet as served: exactly the text the agent got, turns in their own words.
        packet_text = await page.js("document.querySelector('#packet').textContent")
        assert packet_text == packet["rendered"], packet_text
        assert "- invoice language: German (" in packet_text, packet_text
        assert "] user: The invoices should be in German, please." in packet_text, packet_text
        assert "conversation.message {" not in packet_text, packet_text
        assert "context.rendered" in await page.text("#packet-caption")
        # The budget bar: what the served items took, and what was left.
        legend = await page.text(".legend")
        served = sum(d["tokens"] for d in decisions if d["decision"] == "INCLUDED")
        assert served == packet["usedTokens"]
        assert f"Unused {120 - served}" in legend, legend
        # A fact's source link leads to the event.
        await page.screenshot("dashboard-trace", height=1180)

        # An episode's source opens its event, payload and all.
        event = next(d["itemId"] for d in decisions if d["itemKind"] == "EPISODE" and d["decision"] == "INCLUDED")
        await page.click(f"#decisions td.sources a[href='#/event/{event}']")
        payload = await page.wait("document.querySelector('.event-view pre')?.innerText ?? ''", "the event")
        assert json.loads(payload)["role"] == "user", payload
        page.check_clean()


async def test_an_item_left_out_as_said_already_names_what_said_it(chromium: str, server: str, tmp_path: Path) -> None:
    subject = new_subject("cited")
    (turn,) = record_events(server, subject, ["I adopted a dog named Rex last May, he is a beagle."])
    assert_fact(server, subject, "pet", "a dog named Rex", sourceEventIds=[turn])
    packet = context(server, subject, "pet: a dog named Rex")  # the fact's own text ranks it first
    (left_out,) = [d for d in packet["trace"]["decisions"] if d["itemId"] == turn]
    assert left_out["reasonCode"] == "CITED_BY_FACT", left_out
    async with dashboard(chromium, server, tmp_path) as page:
        await page.open(f"#/trace/{packet['traceId']}")
        row = "#decisions tbody tr.excluded"
        await page.wait(f"!!document.querySelector({json.dumps(row)})", "the turn left out")
        assert "CITED_BY_FACT" in await page.text(row)
        assert await page.text(f"{row} td.detail") == "the served fact “pet: a dog named Rex” cites this turn"
        page.check_clean()

    # Asked in the turn's own words, the turn ranks first; with HAKI_SKIP_RESTATED_FACTS (off by
    # default; here a persisted replay under it) the fact citing it is left out.
    turn_first = context(server, subject, "I adopted a dog named Rex last May, he is a beagle.")
    replayed = gql(
        server,
        "query($id: ID!, $w: ReplayOverrides) { replay(traceId: $id, with: $w, persist: true) { packet { traceId } } }",
        {"id": turn_first["traceId"], "w": {"settings": {"skip_restated_facts": True}}},
    )["replay"]["packet"]["traceId"]
    async with dashboard(chromium, server, tmp_path) as page:
        await page.open(f"#/trace/{replayed}")
        row = "#decisions tbody tr.excluded"
        await page.wait(f"!!document.querySelector({json.dumps(row)})", "the fact left out")
        assert "SOURCES_SERVED" in await page.text(row)
        detail = await page.text(f"{row} td.detail")
        assert detail.startswith("its source turns are served above it: ") and "adopted a dog" in detail, detail
        page.check_clean()


REPLAY = """query($id: ID!, $with: ReplayOverrides, $now: Boolean!) {
  replay(traceId: $id, with: $with, compareWithNow: $now) {
    diff { identical added removed moved scoreChanged decisionChanged
           changes { itemId kinds why after { reasonCode } } }
  }
}"""


def replay(base: str, trace_id: str, overrides: dict[str, Any] | None = None, now: bool = False) -> dict[str, Any]:
    diff: dict[str, Any] = gql(base, REPLAY, {"id": trace_id, "with": overrides, "now": now})["replay"]["diff"]
    return diff


def summary_of(diff: dict[str, Any]) -> str:
    """The replay's summary line as the page words it."""
    if diff["identical"]:
        return "Identical: every candidate was decided as the stored call decided it."
    counts = (
        (diff["added"], "added"),
        (diff["removed"], "removed"),
        (diff["moved"], "moved"),
        (diff["scoreChanged"], "rescored"),
        (diff["decisionChanged"], "decision changed"),
    )
    return " · ".join(f"{n} {label}" for n, label in counts)


async def test_replay_and_compare_with_now_show_what_changed_in_the_trace_view(
    chromium: str, server: str, tmp_path: Path
) -> None:
    subject = new_subject("replay")
    record_events(server, subject, ["Ann moved to Lisbon last spring with her dog Rex."])
    city, pet, employer, _ = assert_facts(
        server,
        subject,
        [
            {"predicate": "home_city", "value": "Lisbon"},
            {"predicate": "pet", "value": "a dog named Rex"},
            {"predicate": "employer", "value": "Acme"},
            {"predicate": "invoice_language", "value": "French"},
        ],
    )
    stored = context(server, subject, "Where does Ann live, with her dog, and who employs her?", budget=2000)
    # Since the call: the city is superseded, the pet retracted, the employer contested.
    new_city = assert_fact(server, subject, "home_city", "Porto")["fact"]["id"]
    gql(server, "mutation($id: ID!) { retractFact(id: $id) { id } }", {"id": pet})
    assert assert_fact(server, subject, "employer", "Globex", mode="CONTEST")["conflict"]

    async def run(page: Dashboard, button: str, state: str) -> list[dict[str, Any]]:
        await page.js("document.querySelector('#replay').dataset.state = ''")
        await page.click(button)
        await page.wait(
            "document.querySelector('#replay').dataset.state", f"the replay ({state})", lambda v: v == state
        )
        rows: list[dict[str, Any]] = await page.js(
            """Array.from(document.querySelectorAll('#replay-changes tbody tr'), r => ({
                 item: r.dataset.item, kinds: r.dataset.kinds.split(' '),
                 after: r.querySelector('td[data-c="after"]').innerText,
                 why: r.querySelector('td[data-c="why"]').innerText}))"""
        )
        return rows

    async with dashboard(chromium, server, tmp_path) as page:
        await page.open(f"#/trace/{stored['traceId']}")
        await page.wait("!!document.querySelector('#replay-form')", "the replay form")
        assert (await page.text(".facts-line")).count("default") == 1  # the settings it ran under

        # At its own instant, under its own settings: the same decisions, the same packet.
        assert await run(page, "#replay-run", "replayed") == []
        assert await page.text("#replay-summary") == summary_of(replay(server, stored["traceId"]))
        assert await page.js("document.querySelector('#replay-packet').textContent") == stored["rendered"]

        # With a smaller budget: what no longer fits is over budget.
        await page.js("document.querySelector('#replay-form input[name=budget]').value = '20'")
        small = await run(page, "#replay-run", "replayed")
        api_small = replay(server, stored["traceId"], {"budget": 20})
        assert await page.text("#replay-summary") == summary_of(api_small)
        assert [r["item"] for r in small] == [c["itemId"] for c in api_small["changes"]]
        changed = [r for r in small if "DECISION_CHANGED" in r["kinds"]]
        assert changed and all("OVER_BUDGET" in r["after"] for r in changed), changed

        # Under another ranking profile: the settings that differ are named.
        await page.js("document.querySelector('#replay-form input[name=budget]').value = ''")
        await page.js("document.querySelector('#replay-form select[name=profile]').value = 'CLASSIC'")
        await run(page, "#replay-run", "replayed")
        assert await page.text("#replay-summary") == summary_of(
            replay(server, stored["traceId"], {"profile": "CLASSIC"})
        )
        assert (await page.text("#replay-settings")).startswith("Settings changed: "), await page.text("#replay")
        await page.js("document.querySelector('#replay-form select[name=profile]').value = ''")

        # Of the memory now: superseded, retracted, recorded since, and held in a conflict.
        now = {r["item"]: r for r in await run(page, "#replay-now", "now")}
        api_now = replay(server, stored["traceId"], now=True)
        assert set(now) == {c["itemId"] for c in api_now["changes"]}
        assert now[city]["kinds"] == ["REMOVED"] and now[city]["why"].startswith("superseded ")
        assert new_city in now[city]["why"]
        assert now[pet]["kinds"] == ["REMOVED"] and now[pet]["why"].startswith("retracted ")
        assert now[new_city]["kinds"] == ["ADDED"] and "after the call" in now[new_city]["why"]
        assert "DECISION_CHANGED" in now[employer]["kinds"] and "CONFLICT_OPEN" in now[employer]["after"]
        assert now[employer]["why"].startswith("held in the open conflict set")
        await page.screenshot("dashboard-replay", height=900)

        # Once the subject is forgotten, the trace is gone with it, and the page says so.
        gql(server, "mutation($s: String!) { forgetSubject(subjectId: $s) { erasureId } }", {"s": subject})
        await run(page, "#replay-run", "failed")
        assert (await page.text("#replay-error")).startswith("NOT_FOUND: "), await page.text("#replay-error")
        page.check_clean()


async def test_resolving_a_conflict_in_the_subject_view_changes_the_next_context_call(
    chromium: str, server: str, tmp_path: Path
) -> None:
    subject = new_subject("subject")
    source = record_events(server, subject, ["I moved to Lisbon last month."])[0]
    assert_facts(
        server,
        subject,
        [
            {"predicate": "employer", "value": "Acme GmbH", "validFrom": "2024-01-01T00:00:00+00:00"},
            {"predicate": "timezone", "value": "Europe/Berlin"},
            {"predicate": "phone", "value": "+49 30 1234567"},
        ],
    )
    assert_fact(server, subject, "timezone", "Europe/Lisbon", sourceEventIds=[source])  # supersedes Berlin
    old = assert_fact(server, subject, "home_city", "Berlin")
    new = assert_fact(server, subject, "home_city", "Lisbon", mode="CONTEST", sourceEventIds=[source])
    conflict = new["conflict"]["id"]
    before = context(server, subject, "Which city does the user live in?")
    assert not any(f["predicate"] == "home_city" for f in before["facts"])

    async with dashboard(chromium, server, tmp_path) as page:
        await page.open(f"#/subject/{subject}")
        card = f"#open-conflicts [data-conflict='{conflict}']"
        await page.wait(f"!!document.querySelector({json.dumps(card)})", "the open conflict")
        await page.wait("document.querySelectorAll('#facts-active tbody tr[data-fact]').length >= 4", "the facts")
        # Each list loads on its own: wait for each.
        await page.wait(
            "document.querySelector('#facts-superseded')?.innerText ?? ''",
            "the superseded facts",
            lambda t: "Europe/Berlin" in t,
        )
        await page.wait(
            "document.querySelector('#events')?.innerText ?? ''", "the events", lambda t: "I moved to Lisbon" in t
        )
        await page.screenshot("dashboard-subject")

        await page.click(f"{card} button.keep[data-keep='{new['fact']['id']}']")
        await wait_for(lambda: page.text("#last-action"), "the resolution", lambda s: s.startswith("Conflict resolved"))
        assert not await page.js(f"!!document.querySelector({json.dumps(card)})"), "the conflict is no longer open"
        assert f"conflict-{conflict}" in await page.js("document.querySelector('#closed-conflicts').innerHTML")
        superseded = f"#facts-superseded tr[data-fact='{old['fact']['id']}']"
        assert await page.js(f"!!document.querySelector({json.dumps(superseded)})"), "Berlin is superseded"
        page.check_clean()

    after = context(server, subject, "Which city does the user live in?")
    served = {f["id"]: f["predicate"] for f in after["facts"]}
    assert new["fact"]["id"] in served and old["fact"]["id"] not in served, after
    assert not any(d["reasonCode"] == "CONFLICT_OPEN" for d in after["trace"]["decisions"])


async def test_dismissing_a_conflict_in_the_subject_view_serves_its_facts_again(
    chromium: str, server: str, tmp_path: Path
) -> None:
    subject = new_subject("dismiss")
    first = assert_fact(server, subject, "diet", "vegetarian")
    second = assert_fact(server, subject, "diet", "no fish on Fridays", mode="CONTEST")
    conflict = second["conflict"]["id"]
    context(server, subject, "What does the user eat?")
    async with dashboard(chromium, server, tmp_path) as page:
        # The subject picker lists the subjects of the latest calls.
        await page.open("#/subject")
        link = f"#recent-subjects a[href='#/subject/{subject}']"
        await page.wait(f"!!document.querySelector({json.dumps(link)})", "the subject among the latest calls'")
        await page.click(link)
        card = f"#open-conflicts [data-conflict='{conflict}']"
        await page.wait(f"!!document.querySelector({json.dumps(card)})", "the open conflict")
        await page.click(f"{card} button.dismiss")
        await wait_for(lambda: page.text("#last-action"), "the dismissal", lambda s: s.startswith("Conflict dismissed"))
        await page.wait(
            "document.querySelector('#closed-conflicts')?.innerText ?? ''", "the closed set", lambda t: "DISMISSED" in t
        )
        page.check_clean()
    after = context(server, subject, "What does the user eat?")
    assert {f["id"] for f in after["facts"]} == {first["fact"]["id"], second["fact"]["id"]}, after
    assert after["trace"]["decisions"] and not any(d["decision"] == "BLOCKED" for d in after["trace"]["decisions"])


async def test_the_stats_plots_render(chromium: str, server: str, tmp_path: Path) -> None:
    subject = new_subject("stats")
    assert_fact(server, subject, "invoice_language", "German")
    for query in ("Which language?", "What about the weather?", "Invoice language?"):
        context(server, subject, query)
    context(server, new_subject("empty"), "Nothing here")
    async with dashboard(chromium, server, tmp_path) as page:
        await page.open("#/stats?window=day")
        await page.wait("document.querySelectorAll('.plot').length", "the plots", lambda n: n == 5)
        plots = await page.js(
            """Array.from(document.querySelectorAll('.plot'), p => ({
                 id: p.id, title: p.querySelector('figcaption').innerText,
                 drawn: p.querySelectorAll('svg polyline.series, svg circle.series').length,
                 width: p.querySelector('svg').getBoundingClientRect().width}))"""
        )
        for plot in plots:
            assert plot["drawn"] > 0 and plot["width"] > 100, plot
        # The calls plot's highest point is the calls of this hour, as statsSeries counts them.
        since = (datetime.now(UTC) - timedelta(days=1)).isoformat()
        rows = gql(
            server, "query($s: DateTime!) { statsSeries(since: $s, bucket: HOUR) { contextCalls } }", {"s": since}
        )
        assert max(r["contextCalls"] for r in rows["statsSeries"]) >= 4
        calls = await page.text("#tiles")
        assert "Context calls" in calls
        await page.screenshot("dashboard-stats", height=1240)
        page.check_clean()


async def test_older_traces_page_in_with_the_cursor(chromium: str, server: str, tmp_path: Path) -> None:
    subject = new_subject("pages")
    assert_fact(server, subject, "invoice_language", "German")
    made = [context(server, subject, f"Question number {i}?")["traceId"] for i in range(65)]
    async with dashboard(chromium, server, tmp_path) as page:
        await page.open(f"#/traces?subject={subject}")
        rows = "Array.from(document.querySelectorAll('#trace-rows tr'), r => r.dataset.trace)"
        first = await page.wait(rows, "the first page", lambda ids: len(ids) == 50)
        assert first == made[::-1][:50], "the newest 50 calls, newest first"
        assert await page.js("!document.querySelector('#older').hidden")
        await page.click("#older")
        every = await page.wait(rows, "the next page", lambda ids: len(ids) == 65)
        assert every == made[::-1], "every call once, in order"
        assert await page.js("document.querySelector('#older').hidden"), "no page after the last"
        page.check_clean()


@pytest.mark.slow
async def test_a_trace_of_500_decisions_renders_whole(chromium: str, server: str, tmp_path: Path) -> None:
    subject = new_subject("big")
    words = ["invoice", "payment", "order", "customer", "language", "currency", "delivery", "contract"]
    facts = [
        {"predicate": f"note_{i}", "value": f"{words[i % 8]} detail {i} of the account {words[(i * 3) % 8]}"}
        for i in range(300)
    ]
    ids = assert_facts(server, subject, facts)
    conflicted = assert_facts(
        server, subject, [{"predicate": f"disputed_{i}", "value": f"invoice dispute {i}"} for i in range(240)]
    )
    open_conflicts(server, list(zip(conflicted[::2], conflicted[1::2], strict=True)))
    record_events(server, subject, [f"Customer message {i} about the invoice and the payment" for i in range(100)])
    packet = context(server, subject, "invoice payment customer currency", budget=4000)
    decisions = packet["trace"]["decisions"]
    assert len(ids) == 300 and len(decisions) >= 500, len(decisions)
    kinds = Counter(f"{d['itemKind']} {d['decision']}" for d in decisions)
    print(f"decisions: {dict(kinds)}")

    async with dashboard(chromium, server, tmp_path) as page:
        await page.open("#/traces")
        started = await page.js("performance.now()")
        await page.js(f"location.hash = '#/trace/{packet['traceId']}'")
        await page.wait(
            "document.querySelectorAll('#decisions tbody tr').length",
            "every decision",
            lambda n: n == len(decisions),
        )
        shown = await page.js("performance.now()")
        # The page records its timings at the next animation frame after the rows are in.
        await page.wait("document.body.dataset.traceLoadMs", "the page's timings", lambda v: v is not None)
        render_ms = int(await page.js("document.body.dataset.traceRenderMs"))
        load_ms = int(await page.js("document.body.dataset.traceLoadMs"))
        print(
            f"trace of {len(decisions)} decisions: rendered in {render_ms} ms after the data arrived,"
            f" {load_ms} ms with the query, {shown - started:.0f} ms from the click as polled"
        )
        page.check_clean()
