"""HTTP for the generated operations: the key, the retries on UNAVAILABLE, and the errors.

Both transports send `POST <base_url>/graphql` with `Authorization: Bearer <key>` when a key is
given, and turn every failure into a `HakiError` (never a silent `None`). Only UNAVAILABLE
(HTTP 503: the database is down, the server sheds load, or a concurrent write rolled the call's
back) is retried, and only when no root field answered: nothing of the call was written, so a
retry cannot apply a write twice. Any other error, an UNAVAILABLE beside data (an earlier field of
the document ran), and a call that got no answer at all (which may have run), is raised at once.

Both also carry the server's consistency token (see _consistency.py): every request sends the
highest token the client's mutations got back, so that a read replica serves it only once it has
replayed those writes; a retry sends it again.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from ._consistency import ConsistencyToken, is_mutation
from .errors import (
    HakiError,
    HttpStatusError,
    InvalidResponseError,
    TransportError,
    UnavailableError,
    error_for,
)

# The spec's media type first: a server that negotiates it answers parse and validation
# failures with a 4xx; plain JSON stays acceptable for servers that only speak it.
ACCEPT = "application/graphql-response+json, application/json;q=0.9"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff on UNAVAILABLE, bounded in tries and in total time.

    The n-th retry waits base_delay_s * 2**(n-1), capped at max_delay_s, with jitter (between
    half and all of it) so that many clients refused at once do not come back at once; never less
    than the server's Retry-After. A retry whose wait would end past max_total_s after the first
    try is not made: the UNAVAILABLE error is raised instead.
    """

    attempts: int = 10
    """Tries in all, the first one included (1: never retry); with `max_total_s`, enough to ride
    through a database failover (10-30 s under Patroni's defaults)."""
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0
    max_total_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if min(self.base_delay_s, self.max_delay_s, self.max_total_s) < 0:
            raise ValueError("delays must not be negative")

    def delay(self, failed_tries: int, retry_after: float | None, elapsed_s: float) -> float | None:
        """Seconds to wait before the next try, after `failed_tries` failed ones and `elapsed_s`
        seconds since the first began; None when no try is left in count or in time."""
        if failed_tries >= self.attempts:
            return None
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0 ** (failed_tries - 1))
        wait = max(backoff * random.uniform(0.5, 1.0), retry_after or 0.0)
        if elapsed_s + wait > self.max_total_s:
            return None
        return wait


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """The Retry-After header in seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def jsonable_variables(variables: Mapping[str, Any] | None) -> dict[str, Any]:
    """Variables as JSON values: unset arguments left out, input models by their GraphQL names,
    dates in ISO-8601."""
    # Imported here: the generated package imports this module while it initialises.
    from ._generated.base_model import UNSET

    def convert(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(by_alias=True, exclude_unset=True)
        if isinstance(value, list | tuple):
            return [convert(v) for v in value]
        return value

    jsonable: dict[str, Any] = to_jsonable_python(
        {k: convert(v) for k, v in (variables or {}).items() if v is not UNSET}
    )
    return jsonable


def json_body(response: httpx.Response) -> Any:
    """The response's body read as JSON; None when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        return None


def graphql_data(response: httpx.Response) -> dict[str, Any]:
    """The `data` of a GraphQL answer, or the HakiError it stands for."""
    return graphql_answer(response, json_body(response))


def graphql_answer(response: httpx.Response, body: Any) -> dict[str, Any]:
    """The `data` of a GraphQL answer whose body read as JSON is `body`, or the HakiError it
    stands for."""
    retry_after = retry_after_seconds(response.headers.get("retry-after"))
    if isinstance(body, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        data = body.get("data") if isinstance(body.get("data"), dict) else None
        raise error_for(body["errors"], status_code=response.status_code, data=data, retry_after=retry_after)
    if response.status_code == 503:
        raise UnavailableError("the server is unavailable (HTTP 503)", status_code=503, retry_after=retry_after)
    if not response.is_success:
        raise HttpStatusError(f"HTTP {response.status_code}: {response.text[:200]}", status_code=response.status_code)
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        raise InvalidResponseError(f"not a GraphQL response: {response.text[:200]!r}", status_code=response.status_code)
    answer: dict[str, Any] = body["data"]
    return answer


def ndjson_error(response: httpx.Response, body: bytes) -> HakiError:
    """The HakiError of a refused streaming request (its body read whole)."""
    refused = httpx.Response(response.status_code, headers=response.headers, content=body)
    try:
        graphql_data(refused)
    except HakiError as error:
        return error
    return HttpStatusError(f"HTTP {response.status_code}", status_code=response.status_code)


def _retry_wait(retry: RetryPolicy, error: HakiError, failed: int, started: float) -> float | None:
    """Seconds before the next try after `error`; None when it is not retried or no try is left."""
    if not isinstance(error, UnavailableError):
        return None
    if error.data and any(value is not None for value in error.data.values()):
        return None  # a root field answered: the document ran in part, and must not run again
    return retry.delay(failed, error.retry_after, time.monotonic() - started)


def _headers(api_key: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    headers = {"Accept": ACCEPT, "User-Agent": "haki-context-client"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    headers.update(extra or {})
    return headers


def _endpoint(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base.removesuffix("/graphql")


def _answer(response: httpx.Response, consistency: ConsistencyToken, adopt: bool) -> dict[str, Any]:
    """`graphql_answer`, having first adopted the response's consistency token when `adopt` (a
    mutation's response: a write may have committed even when an error follows)."""
    body = json_body(response)
    if adopt:
        consistency.adopt(response.headers, body)
    return graphql_answer(response, body)


class AsyncTransport:
    """POST /graphql with retries on UNAVAILABLE, over one pooled httpx.AsyncClient."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout: float,
        retry: RetryPolicy,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        consistency_token: str | None = None,
        adopt_query_tokens: bool = False,
    ) -> None:
        self.base_url = _endpoint(base_url)
        self.retry = retry
        self.consistency = ConsistencyToken(consistency_token)
        self.adopt_query_tokens = adopt_query_tokens
        self.http = httpx.AsyncClient(
            base_url=self.base_url, headers=_headers(api_key, headers), timeout=timeout, transport=transport
        )

    async def execute(
        self, query: str, operation_name: str | None, variables: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The operation's `data`; a HakiError when it failed (after the retries, for UNAVAILABLE).
        It sends the consistency token held, and adopts a mutation's."""
        body = {"query": query, "operationName": operation_name, "variables": jsonable_variables(variables)}
        adopt = self.adopt_query_tokens or is_mutation(query, operation_name)
        started, failed = time.monotonic(), 0
        while True:
            try:
                response = await self.http.post("/graphql", json=body, headers=self.consistency.headers())
            except httpx.HTTPError as exc:
                raise TransportError(f"no answer from {self.base_url}: {exc!r}") from exc
            try:
                return _answer(response, self.consistency, adopt)
            except UnavailableError as error:
                failed += 1
                wait = _retry_wait(self.retry, error, failed, started)
                if wait is None:
                    raise
                await asyncio.sleep(wait)

    async def stream_lines(self, path: str, params: Mapping[str, str]) -> AsyncIterator[str]:
        """The non-empty lines of a streamed GET. A refusal (which comes before any line) is
        raised as a HakiError, after the retries for UNAVAILABLE; a stream cut once lines flow
        is not retried (its lines were handed out)."""
        started, failed = time.monotonic(), 0
        while True:
            try:
                headers = {"Accept": NDJSON, **self.consistency.headers()}
                async with self.http.stream("GET", path, params=params, headers=headers) as response:
                    if response.is_success:
                        async for line in response.aiter_lines():
                            if line.strip():
                                yield line
                        return
                    refusal = ndjson_error(response, await response.aread())
            except httpx.HTTPError as exc:
                raise TransportError(f"no answer from {self.base_url}: {exc!r}") from exc
            failed += 1
            wait = _retry_wait(self.retry, refusal, failed, started)
            if wait is None:
                raise refusal
            await asyncio.sleep(wait)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()


class SyncTransport:
    """POST /graphql with retries on UNAVAILABLE, over one pooled httpx.Client."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout: float,
        retry: RetryPolicy,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        consistency_token: str | None = None,
        adopt_query_tokens: bool = False,
    ) -> None:
        self.base_url = _endpoint(base_url)
        self.retry = retry
        self.consistency = ConsistencyToken(consistency_token)
        self.adopt_query_tokens = adopt_query_tokens
        self.http = httpx.Client(
            base_url=self.base_url, headers=_headers(api_key, headers), timeout=timeout, transport=transport
        )

    def execute(self, query: str, operation_name: str | None, variables: Mapping[str, Any] | None) -> dict[str, Any]:
        """The operation's `data`; a HakiError when it failed (after the retries, for UNAVAILABLE).
        It sends the consistency token held, and adopts a mutation's."""
        body = {"query": query, "operationName": operation_name, "variables": jsonable_variables(variables)}
        adopt = self.adopt_query_tokens or is_mutation(query, operation_name)
        started, failed = time.monotonic(), 0
        while True:
            try:
                response = self.http.post("/graphql", json=body, headers=self.consistency.headers())
            except httpx.HTTPError as exc:
                raise TransportError(f"no answer from {self.base_url}: {exc!r}") from exc
            try:
                return _answer(response, self.consistency, adopt)
            except UnavailableError as error:
                failed += 1
                wait = _retry_wait(self.retry, error, failed, started)
                if wait is None:
                    raise
                time.sleep(wait)

    def stream_lines(self, path: str, params: Mapping[str, str]) -> Iterator[str]:
        """The non-empty lines of a streamed GET. A refusal (which comes before any line) is
        raised as a HakiError, after the retries for UNAVAILABLE; a stream cut once lines flow
        is not retried (its lines were handed out)."""
        started, failed = time.monotonic(), 0
        while True:
            try:
                headers = {"Accept": NDJSON, **self.consistency.headers()}
                with self.http.stream("GET", path, params=params, headers=headers) as response:
                    if response.is_success:
                        for line in response.iter_lines():
                            if line.strip():
                                yield line
                        return
                    refusal = ndjson_error(response, response.read())
            except httpx.HTTPError as exc:
                raise TransportError(f"no answer from {self.base_url}: {exc!r}") from exc
            failed += 1
            wait = _retry_wait(self.retry, refusal, failed, started)
            if wait is None:
                raise refusal
            time.sleep(wait)

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()
