"""The Subscription root, served over WebSocket (graphql-transport-ws) at /graphql. Every
field asks for the READ scope, as the queries do."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator

import strawberry
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from ..core.errors import BadRequest
from ..core.serving.auth import Scope
from ..resolvers import live
from .packet import ContextTrace


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="Each trace of the caller's project as it is written (by any server process sharing the "
        "database), optionally of one subject. A subscriber that falls too far behind is dropped with UNAVAILABLE."
    )
    async def trace_added(
        self, info: strawberry.Info, subject_id: str | None = None
    ) -> AsyncGenerator[ContextTrace, None]:
        info.context.require(Scope.READ)
        return live.trace_added(info.context, subject_id)


class SubscriptionsOverSockets(SchemaExtension):
    """Refuses a subscription sent over HTTP: there its fields would resolve to their root value
    (null) rather than to a stream. Over a socket the context carries the live traces."""

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        if context.operation_type is OperationType.SUBSCRIPTION and getattr(context.context, "live", None) is None:
            raise BadRequest("subscriptions are served over WebSocket (graphql-transport-ws) at /graphql")
        yield
