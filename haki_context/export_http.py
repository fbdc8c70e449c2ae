"""`GET /export?subjectId=<subject>`: a subject's memory as JSON lines, streamed (core/memory/portability.py).

The same Bearer keys as GraphQL, with the `read` scope, and the same development-mode rule.
A refusal comes before any line, as `{"errors": [...]}` in the GraphQL error shape, with its status
(401 no or bad key, 403 no `read` scope, 400 no or bad subjectId, 503 the database or too
many exports at once); once lines flow the status is 200, and an export cut short lacks its
last line (`{"type": "end", ...}`), which `haki-context import` checks.

Each export holds one pooled connection and one snapshot while it streams, so at most
MAX_CONCURRENT_EXPORTS run at once per process, and a client that stops reading for
IDLE_TIMEOUT_S has its snapshot ended by the database (the stream then stops short).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .core.errors import BadRequest, HakiError, Unavailable
from .core.limits import check_subject_id
from .core.memory import portability
from .core.serving.admission import RETRY_AFTER_S
from .core.serving.auth import Authenticator, Scope, authorization_of
from .core.serving.consistency import TOKEN_HEADER, parse_token
from .core.serving.runtime import Runtime
from .schema.errors import domain_error

log = logging.getLogger(__name__)

MAX_CONCURRENT_EXPORTS = 2
IDLE_TIMEOUT_S = 60.0


class _ExportSlots:
    """How many exports this app is streaming; past MAX_CONCURRENT_EXPORTS a new one is refused."""

    def __init__(self) -> None:
        self.running = 0


async def export_subject(request: Request) -> Response:
    """Stream the subject's events, facts and conflict sets as `application/x-ndjson`."""
    slots: _ExportSlots = getattr(request.app.state, "export_slots", None) or _ExportSlots()
    request.app.state.export_slots = slots
    try:
        authenticator: Authenticator = request.app.state.authenticator
        caller = await authenticator.caller_for(authorization_of(request.headers.getlist("authorization")))
        caller.require(Scope.READ)
        subject = request.query_params.get("subjectId")
        if subject is None:
            raise BadRequest("`subjectId` is required: GET /export?subjectId=<subject>", field="subjectId")
        try:
            check_subject_id(subject)
        except HakiError as exc:
            raise BadRequest(exc.message, field="subjectId") from exc
        if slots.running >= MAX_CONCURRENT_EXPORTS:
            raise Unavailable(f"{MAX_CONCURRENT_EXPORTS} exports are running; retry later")
        token = parse_token(request.headers.get(TOKEN_HEADER))
        rt: Runtime = request.app.state.runtime
        reads = rt.routed(token).reads
        stream = _stream(portability.export_lines(reads, caller, subject, idle_timeout_s=IDLE_TIMEOUT_S), slots)
        # The header comes once the snapshot is open: a database that is down is a 503, not a
        # stream cut short. Started here, the stream's clean-up (its slot, its connection) runs
        # even if the response never reads it (asyncio closes a started generator it collects).
        header = await anext(stream)
    except Exception as exc:  # every refusal gets a coded answer
        domain = exc if isinstance(exc, HakiError) else domain_error(exc)
        if domain is None:
            raise
        return _refusal(domain)
    return StreamingResponse(_Resumed(header, stream), media_type=portability.MEDIA_TYPE, headers=_NO_STORE)


_NO_STORE = {"Cache-Control": "no-store"}


async def _stream(lines: AsyncGenerator[bytes, None], slots: _ExportSlots) -> AsyncGenerator[bytes, None]:
    """The export's lines, holding one of the app's export slots until they end or are dropped."""
    slots.running += 1
    try:
        first = True
        async for line in lines:
            yield line
            first = False
    except Exception as exc:
        if first:
            raise  # nothing sent yet: the handler answers with the error's status
        # The status is sent: the stream stops without its last line, which an import checks.
        domain = domain_error(exc)
        log.warning("an export stopped short: %s", domain.message if domain else type(exc).__name__)
    finally:
        slots.running -= 1
        await lines.aclose()


class _Resumed:
    """`first`, then the rest of `stream`: an iterator, not a generator, so that nothing needs
    starting for the started `stream` to be closed when the response drops it."""

    def __init__(self, first: bytes, stream: AsyncGenerator[bytes, None]) -> None:
        self._first: bytes | None = first
        self._stream = stream

    def __aiter__(self) -> _Resumed:
        return self

    async def __anext__(self) -> bytes:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await anext(self._stream)


def _refusal(exc: HakiError) -> JSONResponse:
    body = {"errors": [{"message": exc.message, "extensions": exc.extensions()}]}
    headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, Unavailable) else None
    return JSONResponse(body, status_code=exc.http_status, headers=headers)
