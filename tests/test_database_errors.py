"""A database that goes away, or changes primary, is UNAVAILABLE (503, retry), never INTERNAL."""

from __future__ import annotations

import asyncpg
import pytest

from haki_context.core.errors import Unavailable
from haki_context.schema.errors import domain_error


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError(),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_a_lost_or_changing_database_is_unavailable(exc: BaseException) -> None:
    assert isinstance(domain_error(exc), Unavailable)
