"""The base class of the generated async operations: each operation hands its document and
variables to the client's transport (auth, retries, errors) and gets the `data` back."""

from typing import Any

from .._transport import AsyncTransport


class AsyncBaseClient:
    """What every generated async operation calls: `execute`, then `get_data`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self.transport = transport

    async def execute(
        self,
        query: str,
        operation_name: str | None = None,
        variables: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Send one operation; its `data`, or a HakiError."""
        return await self.transport.execute(query, operation_name, variables)

    def get_data(self, response: dict[str, Any]) -> dict[str, Any]:
        """The transport already checked the response and returned its `data`."""
        return response
