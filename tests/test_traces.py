"""`traces`: newest first, stable cursors, project-scoped, bounded SQL."""

from __future__ import annotations

from conftest import GraphQLClient, ProjectClient, StatementLog
from contextlib_helpers import assert_fact, context, record

PAGE = """query($first: Int, $after: String, $s: String, $since: DateTime) {
  traces(first: $first, after: $after, subjectId: $s, since: $since) {
    edges { cursor node { id subjectId query createdAt counts { included excluded blocked } } }
    pageInfo { hasNextPage endCursor }
  }
}"""


async def _calls(client: GraphQLClient, subject: str, n: int) -> list[str]:
    return [(await context(client, subject, f"question {i}", selection="traceId"))["traceId"] for i in range(n)]


async def _walk(client: GraphQLClient, first: int, on_page=None, **args) -> list[str]:  # type: ignore[no-untyped-def]
    seen: list[str] = []
    after = None
    while True:
        page = (await client.execute(PAGE, {"first": first, "after": after, **args}))["traces"]
        seen += [e["node"]["id"] for e in page["edges"]]
        if on_page:
            await on_page()
        if not page["pageInfo"]["hasNextPage"]:
            return seen
        after = page["pageInfo"]["endCursor"]


async def test_traces_come_newest_first(project_client: ProjectClient, subject: str) -> None:
    ids = await _calls(project_client, subject, 5)
    assert await _walk(project_client, 100) == list(reversed(ids))


async def test_cursors_never_repeat_or_skip_while_new_traces_arrive(
    project_client: ProjectClient, subject: str
) -> None:
    before = await _calls(project_client, subject, 7)

    async def more() -> None:
        await _calls(project_client, subject, 1)

    walked = await _walk(project_client, 2, on_page=more)
    assert walked == list(reversed(before))  # every trace that existed, once, in order; new ones come first


async def test_traces_filter_by_subject_and_since(project_client: ProjectClient, subject: str) -> None:
    await _calls(project_client, subject, 2)
    other = await _calls(project_client, subject + "-b", 3)
    assert await _walk(project_client, 10, s=subject + "-b") == list(reversed(other))
    page = (await project_client.execute(PAGE, {"first": 10, "since": "2999-01-01T00:00:00+00:00"}))["traces"]
    assert page["edges"] == [] and page["pageInfo"] == {"hasNextPage": False, "endCursor": None}


async def test_traces_of_another_project_are_not_listed(
    project_client: ProjectClient, client: GraphQLClient, subject: str
) -> None:
    await _calls(client, subject, 2)  # the default project
    mine = await _calls(project_client, subject, 1)
    assert await _walk(project_client, 100) == mine


async def test_first_above_100_or_below_1_is_invalid_input(project_client: ProjectClient) -> None:
    for first in (0, 101):
        error = await project_client.error(PAGE, {"first": first})
        assert error["extensions"]["code"] == "INVALID_INPUT"
    error = await project_client.error(PAGE, {"first": 5, "after": "bm90LWEtY3Vyc29y"})
    assert error["extensions"]["code"] == "INVALID_INPUT"


async def test_a_trace_page_lists_counts_and_decisions_of_each(project_client: ProjectClient, subject: str) -> None:
    await assert_fact(project_client, subject, "a", "one")
    await _calls(project_client, subject, 3)
    data = await project_client.execute(
        "{ traces(first: 3) { edges { node { counts { included } decisions { itemKind decision fact { predicate } } } } } }"
    )
    nodes = [e["node"] for e in data["traces"]["edges"]]
    assert [n["counts"]["included"] for n in nodes] == [1, 1, 1]
    assert all(
        n["decisions"] == [{"itemKind": "FACT", "decision": "INCLUDED", "fact": {"predicate": "a"}}] for n in nodes
    )


async def test_listing_100_traces_costs_a_bounded_number_of_statements(
    logged: tuple[GraphQLClient, StatementLog], subject: str
) -> None:
    client, log = logged
    await assert_fact(client, subject, "a", "one")
    await record(client, subject, ["an event"])
    await _calls(client, subject, 100)
    log.statements.clear()
    data = await client.execute("{ traces(first: 100) { edges { node { id counts { included excluded blocked } } } } }")
    assert len(data["traces"]["edges"]) == 100
    assert len(log.round_trips()) == 1  # the page itself; decisions are not loaded when not selected
    log.statements.clear()
    data = await client.execute(
        "{ traces(first: 100) { edges { node { id decisions { itemKind fact { predicate } event { id } } } } } }"
    )
    assert all(len(e["node"]["decisions"]) == 2 for e in data["traces"]["edges"][:100] if e)
    assert len(log.round_trips()) == 4  # page, decisions of all 100, their facts, their events
