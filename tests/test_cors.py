"""CORS for the origins of HAKI_CORS_ORIGINS: a listed origin's preflight and calls get the
headers, another origin's do not, and with none listed no response carries them. The key check
still comes first for a cross-origin call."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from conftest import client_for, make_settings, new_project_key
from pydantic import ValidationError

from haki_context.core.serving.runtime import Runtime
from haki_context.settings import Settings

APP = "https://app.example.com"
OTHER = "https://evil.example.net"


def preflight_headers(origin: str) -> dict[str, str]:
    return {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


@pytest.fixture
async def cors_http(runtime: Runtime, migrated: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app with one allowed origin, outside development mode (every call needs a key)."""
    client = client_for(runtime, make_settings(migrated, dev_mode=False, cors_origins=[APP]))
    yield client.http
    await client.http.aclose()


@pytest.fixture
async def plain_http(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """The app as configured by default: no origin listed."""
    client = client_for(runtime)
    yield client.http
    await client.http.aclose()


async def test_the_preflight_of_a_listed_origin_allows_the_key_and_json(cors_http: httpx.AsyncClient) -> None:
    response = await cors_http.options("/graphql", headers=preflight_headers(APP))
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == APP
    assert {"GET", "POST", "OPTIONS"} <= {
        m.strip() for m in response.headers["access-control-allow-methods"].split(",")
    }
    allowed = {h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed
    assert "access-control-allow-credentials" not in response.headers  # keys travel in a header, not cookies
    assert int(response.headers["access-control-max-age"]) > 0


async def test_the_preflight_of_another_origin_is_not_allowed(cors_http: httpx.AsyncClient) -> None:
    response = await cors_http.options("/graphql", headers=preflight_headers(OTHER))
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers


async def test_a_call_from_a_listed_origin_may_read_the_answer_and_retry_after(
    cors_http: httpx.AsyncClient, runtime: Runtime
) -> None:
    key = await new_project_key(runtime, "cors-project")
    response = await cors_http.post(
        "/graphql", json={"query": "{ __typename }"}, headers={"origin": APP, "authorization": f"Bearer {key}"}
    )
    assert response.status_code == 200 and response.json() == {"data": {"__typename": "Query"}}
    assert response.headers["access-control-allow-origin"] == APP
    assert "retry-after" in response.headers["access-control-expose-headers"].lower()


async def test_a_page_may_send_back_and_read_the_consistency_token(
    cors_http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """A client holding a write's token sends it on every later call: its preflight must pass."""
    headers = {**preflight_headers(APP), "access-control-request-headers": "authorization, haki-consistency-token"}
    preflight = await cors_http.options("/graphql", headers=headers)
    assert preflight.status_code == 200, preflight.text
    assert "haki-consistency-token" in preflight.headers["access-control-allow-headers"].lower()
    key = await new_project_key(runtime, "cors-token")
    write = 'mutation { recordEvent(input: {subjectId: "s", kind: "note", payload: {text: "hi"}}) { id } }'
    response = await cors_http.post(
        "/graphql", json={"query": write}, headers={"origin": APP, "authorization": f"Bearer {key}"}
    )
    assert response.status_code == 200, response.text
    assert "haki-consistency-token" in response.headers["access-control-expose-headers"].lower()


async def test_the_key_is_still_checked_first_for_a_cross_origin_call(cors_http: httpx.AsyncClient) -> None:
    response = await cors_http.post("/graphql", json={"query": "{ __typename }"}, headers={"origin": APP})
    assert response.status_code == 401
    assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert response.headers["access-control-allow-origin"] == APP  # the page may read why it was refused


async def test_an_options_request_that_is_no_preflight_never_reaches_the_endpoint(cors_http: httpx.AsyncClient) -> None:
    response = await cors_http.options("/graphql", headers={"origin": APP})
    assert response.status_code == 405


async def test_a_call_from_another_origin_is_not_allowed_to_read_the_answer(cors_http: httpx.AsyncClient) -> None:
    response = await cors_http.post("/graphql", json={"query": "{ __typename }"}, headers={"origin": OTHER})
    assert response.status_code == 401
    assert "access-control-allow-origin" not in response.headers  # the browser keeps the answer from the page


async def test_with_no_origin_listed_no_response_carries_cors_headers(plain_http: httpx.AsyncClient) -> None:
    preflight = await plain_http.options("/graphql", headers=preflight_headers(APP))
    assert preflight.status_code == 405
    assert cors_headers(preflight) == {}
    call = await plain_http.post("/graphql", json={"query": "{ __typename }"}, headers={"origin": APP})
    assert call.status_code == 200
    assert cors_headers(call) == {}


def test_origins_are_read_comma_separated_or_as_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAKI_CORS_ORIGINS", " https://App.example.com/ , http://localhost:5173")
    assert Settings().cors_origins == ("https://app.example.com", "http://localhost:5173")
    monkeypatch.setenv("HAKI_CORS_ORIGINS", '["https://app.example.com", "*"]')
    assert Settings().cors_origins == ("https://app.example.com", "*")
    monkeypatch.setenv("HAKI_CORS_ORIGINS", "")
    assert Settings().cors_origins is None
    monkeypatch.delenv("HAKI_CORS_ORIGINS")
    assert Settings().cors_origins is None


@pytest.mark.parametrize("origin", ["app.example.com", "https://app.example.com/path", "ftp://files.example.com"])
def test_a_value_that_is_no_origin_is_refused_at_start_up(monkeypatch: pytest.MonkeyPatch, origin: str) -> None:
    monkeypatch.setenv("HAKI_CORS_ORIGINS", origin)
    with pytest.raises(ValidationError, match="cors_origins"):
        Settings()
