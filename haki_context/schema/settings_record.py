"""The GraphQL type of a settings record: what a context call ran under."""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON

from ..core.context.settings_records import SettingsRecord


@strawberry.type(
    name="SettingsRecord",
    description="Every setting that changes a context call's decisions, and the embedder, as the call ran under them.",
)
class SettingsRecordType:
    id: strawberry.ID = strawberry.field(
        description="The first 32 hex characters of the SHA-256 of the record's canonical JSON."
    )
    ranking_profile: str = strawberry.field(description='The ranking profile named, e.g. "default" or "classic".')
    values: JSON = strawberry.field(
        description="Each decision setting by name (snake_case, as HAKI_<NAME> sets it) and its value."
    )
    embedder_name: str = strawberry.field(description="The embedder's model.")
    embedder_space: str = strawberry.field(description="The embedder's vector space.")


def settings_type(record: SettingsRecord) -> SettingsRecordType:
    """The GraphQL view of a settings record."""
    values = record.settings
    return SettingsRecordType(
        id=strawberry.ID(record.id),
        ranking_profile=str(values.get("ranking_profile", "")),
        values=JSON(values),
        embedder_name=record.embedder.get("name", ""),
        embedder_space=record.embedder.get("space", ""),
    )
