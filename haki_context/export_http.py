"""`GET /export?subjectId=<subject>`: a subject's memory as JSON lines, streamed (core/portability.py).

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
from collections.abc import AsyncGenerator, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .core import portability
from .core.admission import RETRY_AFTER_S
from .core.auth import Authenticator, Scope, authorization_of
from .core.errors import BadRequest, HakiError, Unavailable
from .core.limits import check_subject_id
from .core.runtime import Runtime
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
        rt: Runtime = request.app.state.runtime
        lines = portability.export_lines(rt.pool, caller, subject, idle_timeout_s=IDLE_TIMEOUT_S)
        slots.running += 1
        try:
            header = await anext(lines)  # the snapshot is open: a database that is down is a 503, not a cut stream
        except BaseException:
            slots.running -= 1
            await lines.aclose()
            raise
    except Exception as exc:  # every refusal gets a coded answer
        domain = exc if isinstance(exc, HakiError) else domain_error(exc)
        if domain is None:
            raise
        return _refusal(domain)
    return StreamingResponse(
        _stream(header, lines, slots),
        media_type=portability.MEDIA_TYPE,
        headers={"Cache-Control": "no-store"},
    )


async def _stream(header: bytes, lines: AsyncGenerator[bytes, None], slots: _ExportSlots) -> AsyncIterator[bytes]:
    try:
        yield header
        async for line in lines:
            yield line
    except Exception as exc:  # the status is sent: the stream stops without its last line
        domain = domain_error(exc)
        log.warning("an export stopped short: %s", domain.message if domain else type(exc).__name__)
    finally:
        slots.running -= 1
        await lines.aclose()


def _refusal(exc: HakiError) -> JSONResponse:
    body = {"errors": [{"message": exc.message, "extensions": exc.extensions()}]}
    headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, Unavailable) else None
    return JSONResponse(body, status_code=exc.http_status, headers=headers)
