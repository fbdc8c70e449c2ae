"""GraphQL type of `forgetSubject`'s answer."""

from __future__ import annotations

from datetime import datetime

import strawberry


@strawberry.type(
    name="ForgetResult",
    description=(
        "What forgetSubject deleted, by kind, in one transaction. The audit record it wrote "
        "(erasureId) holds these counts, the time and the key, never the subject's id or content."
    ),
)
class ForgetResultType:
    erasure_id: strawberry.ID = strawberry.field(description="The id of the audit record of this forget.")
    subject_id: str = strawberry.field(description="The subject forgotten.")
    forgotten_at: datetime = strawberry.field(description="When the forget ran.")
    events: int = strawberry.field(description="Events deleted.")
    episode_chunks: int = strawberry.field(description="Episode chunks (searchable pieces of events) deleted.")
    facts: int = strawberry.field(description="Facts deleted, whatever their status.")
    conflict_sets: int = strawberry.field(description="Conflict sets deleted, whatever their status.")
    conflict_members: int = strawberry.field(description="Memberships of facts in those conflict sets deleted.")
    traces: int = strawberry.field(description="Context traces of the subject deleted.")
    trace_decisions: int = strawberry.field(description="Decisions of those traces deleted.")
    scope_lexemes: int = strawberry.field(description="Common-word counts of the subject's search index deleted.")
    scope_indexes: int = strawberry.field(
        description="Vector indexes of the subject's own (large subjects only) dropped."
    )
