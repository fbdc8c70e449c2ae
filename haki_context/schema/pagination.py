"""One small generic Connection / Edge / PageInfo (no relay.Node: ids stay plain UUIDs)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import strawberry

from ..core.models import Page

T = TypeVar("T")


@strawberry.type
class PageInfo:
    has_next_page: bool = strawberry.field(description="True when another page follows this one.")
    end_cursor: str | None = strawberry.field(description="Pass as `after` to get the next page.")


@strawberry.type
class Edge(Generic[T]):
    cursor: str = strawberry.field(description="Opaque keyset cursor of this item.")
    node: T = strawberry.field(description="The item.")


@strawberry.type
class Connection(Generic[T]):
    edges: list[Edge[T]] = strawberry.field(description="The items of this page, in order.")
    page_info: PageInfo = strawberry.field(description="Where this page ends.")


def to_connection(page: Page[Any]) -> Connection[Any]:
    """A page of (cursor, item) pairs as a GraphQL connection.

    The items are the core's records, served as the connection's Strawberry node type
    by name, so the node type is the caller's annotation, not the page's item type."""
    edges = [Edge(cursor=cursor, node=item) for cursor, item in page.items]
    end = edges[-1].cursor if edges else None
    return Connection(edges=edges, page_info=PageInfo(has_next_page=page.has_next_page, end_cursor=end))
