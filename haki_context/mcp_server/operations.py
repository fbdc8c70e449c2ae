"""The GraphQL operations behind every MCP tool and resource, in one place.

Each tool runs one of these in-process against the served schema, so input checks, limits
and error codes are GraphQL's own; what a tool returns is the operation's `data`, whose
JSON Schema (the tool's `outputSchema`) is derived from the selection (result_schema.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Operation:
    """A named GraphQL document holding one operation."""

    name: str
    document: str

    @property
    def writes(self) -> bool:
        """True for a mutation: its consistency token is the session's to send back."""
        return self.document.lstrip().startswith("mutation")


GET_CONTEXT = Operation(
    "GetContext",
    """
query GetContext($subject: String!, $query: String!, $budget: Int, $asOf: DateTime, $tokenizer: Tokenizer) {
  context(subjectId: $subject, query: $query, budget: $budget, asOf: $asOf, tokenizer: $tokenizer) {
    traceId
    rendered
    budgetTokens
    usedTokens
    status
    warnings
    emptyReason
    facts {
      id
      predicate
      value
      confidence
      validFrom
      validTo
      score
      reasonCode
      viaEntity
      sourceEventIds
      fact { status version recordedAt }
    }
    episodes { eventId chunk kind occurredAt excerpt score }
  }
}
""",
)

REMEMBER = Operation(
    "Remember",
    """
mutation Remember($inputs: [EventInput!]!) {
  recordEvents(inputs: $inputs) { id kind occurredAt recordedAt }
}
""",
)

ASSERT_FACT = Operation(
    "AssertFact",
    """
mutation AssertFact($input: FactInput!) {
  assertFact(input: $input) {
    outcome
    fact { id predicate value confidence status version validFrom validTo recordedAt sourceEventIds }
    superseded { id value }
    conflict { id status }
  }
}
""",
)

RETRACT_FACT = Operation(
    "RetractFact",
    """
mutation RetractFact($id: ID!, $reason: String) {
  retractFact(id: $id, reason: $reason) { id predicate value status version }
}
""",
)

EXPLAIN = Operation(
    "Explain",
    """
query Explain($id: ID!) {
  trace(id: $id) {
    id
    subjectId
    query
    budgetTokens
    usedTokens
    status
    emptyReason
    warnings
    createdAt
    counts { included excluded blocked }
    decisions {
      itemKind
      itemId
      chunk
      decision
      reasonCode
      rank
      score
      similarity
      fullText
      recency
      tokens
      viaEntity
      fact { predicate value }
      event { kind excerpt }
    }
  }
}
""",
)

# A replay's changes name each decision with its fact, so a model reads what changed without a
# second call; the packet's traceId is left out (a replay through MCP writes no trace).
REPLAY = Operation(
    "Replay",
    """
query Replay($traceId: ID!, $with: ReplayOverrides, $now: Boolean!) {
  replay(traceId: $traceId, with: $with, compareWithNow: $now) {
    asOf
    comparedWithNow
    notes
    original { id subjectId query budgetTokens createdAt asOf }
    packet { rendered budgetTokens usedTokens status }
    diff {
      identical
      added
      removed
      moved
      scoreChanged
      decisionChanged
      changes {
        itemKind
        itemId
        chunk
        kinds
        rankDelta
        componentsChanged
        why
        before { decision reasonCode rank score fact { predicate value } event { kind excerpt } }
        after { decision reasonCode rank score fact { predicate value } event { kind excerpt } }
      }
    }
  }
}
""",
)

FORGET_SUBJECT = Operation(
    "ForgetSubject",
    """
mutation ForgetSubject($subject: String!) {
  forgetSubject(subjectId: $subject) {
    erasureId
    subjectId
    forgottenAt
    events
    episodeChunks
    facts
    conflictSets
    conflictMembers
    traces
    traceDecisions
    scopeLexemes
    scopeIndexes
  }
}
""",
)

# The most facts one page holds (the `facts` field's limit); the resource reads page by page.
FACTS_PAGE = 100

ACTIVE_FACTS = Operation(
    "ActiveFacts",
    f"""
query ActiveFacts($subject: String!, $after: String) {{
  facts(subjectId: $subject, status: ACTIVE, first: {FACTS_PAGE}, after: $after) {{
    edges {{
      node {{
        id
        predicate
        value
        confidence
        volatility
        validFrom
        validTo
        recordedAt
        lastReinforcedAt
        version
        sourceEventIds
      }}
    }}
    pageInfo {{ hasNextPage endCursor }}
  }}
}}
""",
)
