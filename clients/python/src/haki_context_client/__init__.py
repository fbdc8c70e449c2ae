"""Typed Python client of haki-context, the GraphQL memory server for AI agents.

    from haki_context_client import HakiClientSync

    with HakiClientSync("http://127.0.0.1:8000", api_key="hk_...") as haki:
        haki.remember("user-42", [{"speaker": "Ann", "text": "Please send my invoices in French."}])
        haki.assert_fact("user-42", "invoice_language", "French")
        print(haki.context("user-42", "Which language should invoices use?").rendered)

`HakiClient` is the same client for asyncio. Results are the generated pydantic models (see
`haki_context_client.types`); failures raise `HakiError` subclasses carrying the server's code.
"""

from ._transport import RetryPolicy
from .client import HakiClient, HakiClientSync
from .errors import (
    BudgetExceededError,
    ForbiddenError,
    GraphQLRequestError,
    HakiError,
    HttpStatusError,
    IllegalTransitionError,
    IncompleteExportError,
    InternalError,
    InvalidInputError,
    InvalidResponseError,
    NotFoundError,
    PayloadTooLargeError,
    QueryTooComplexError,
    StatementTimeoutError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "ForbiddenError",
    "GraphQLRequestError",
    "HakiClient",
    "HakiClientSync",
    "HakiError",
    "HttpStatusError",
    "IllegalTransitionError",
    "IncompleteExportError",
    "InternalError",
    "InvalidInputError",
    "InvalidResponseError",
    "NotFoundError",
    "PayloadTooLargeError",
    "QueryTooComplexError",
    "RetryPolicy",
    "StatementTimeoutError",
    "TransportError",
    "UnauthenticatedError",
    "UnavailableError",
]
