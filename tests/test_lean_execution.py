"""The lean executor answers exactly as Strawberry's own, errors included, and takes its short path."""

from __future__ import annotations

import enum
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import strawberry
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from haki_context.schema.execution import LeanExecutionContext
from haki_context.schema.scalars import DateTime


@strawberry.enum
class Colour(enum.Enum):
    RED = "red"
    DEEP_BLUE = "deep blue"


@strawberry.type
class Part:
    label: str
    weight: float | None


@strawberry.type
class Item:
    name: str
    count: int
    ratio: float
    flag: bool
    colour: Colour
    at: datetime
    ident: strawberry.ID
    maybe: float | None
    tags: list[str]
    broken: float  # NaN in the data: the Float coercion refuses it
    missing: str  # None in the data: a non-null field with no value
    part: Part
    parts: list[Part]
    nothing: Part | None

    @strawberry.field
    def shout(self) -> str:
        return self.name.upper()

    @strawberry.field
    def scaled(self, by: int = 2) -> float:
        return self.ratio * by

    @strawberry.field
    async def later(self) -> str:
        return self.name + "!"

    @strawberry.field
    async def fails(self) -> str:
        raise ValueError(f"no {self.name}")


@strawberry.type
class Query:
    @strawberry.field
    def items(self) -> list[Item]:
        when = datetime(2026, 12, 4, 9, 30, tzinfo=timezone(timedelta(hours=2)))
        return [
            Item(
                name="a",
                count=1,
                ratio=0.5,
                flag=True,
                colour=Colour.RED,
                at=when,
                ident=strawberry.ID("x1"),
                maybe=None,
                tags=["t"],
                broken=1.0,
                missing="m",
                part=Part(label="p", weight=1.5),
                parts=[Part(label="q", weight=None), Part(label="r", weight=2.0)],
                nothing=None,
            ),
            Item(
                name="b",
                count=-2,
                ratio=1e-9,
                flag=False,
                colour=Colour.DEEP_BLUE,
                at=when,
                ident=strawberry.ID("x2"),
                maybe=2.5,
                tags=[],
                broken=math.nan,
                missing=None,  # type: ignore[arg-type]
                part=Part(label="s", weight=None),
                parts=[],
                nothing=Part(label="t", weight=math.inf),
            ),
        ]


def _schema(execution_context_class: Any) -> strawberry.Schema:
    return strawberry.Schema(
        query=Query,
        config=StrawberryConfig(scalar_map={datetime: DateTime}),
        execution_context_class=execution_context_class,
    )


QUERIES = [
    "{ items { name count ratio flag colour at ident maybe tags shout scaled(by: 3) __typename } }",
    "{ items { n: name again: name c: colour maybe } }",
    "{ items { ...F } } fragment F on Item { name ratio }",
    "{ items { name broken } }",  # a coercion error on the second item
    "{ items { name missing } }",  # null on a non-null field
    # objects: plain leaves answered together, other fields (objects, lists, async) as usual
    "{ items { name part { label weight } parts { label weight } nothing { label } later } }",
    "{ items { later name fails count } }",  # an async resolver's error beside other fields
    "{ items { part { label ...P } nothing { ...P } } } fragment P on Part { weight w2: weight }",
    "{ items { nothing { weight } } }",  # Infinity: a coercion error inside a nested object
]


@pytest.mark.parametrize("query", QUERIES)
async def test_lean_execution_answers_as_strawberrys_own(query: str) -> None:
    lean = await _schema(LeanExecutionContext).execute(query)
    plain = await _schema(None).execute(query)
    # something to compare: the items, or errors located inside them (not the list failing whole)
    assert plain.data is not None or all(len(e.path or []) > 2 for e in plain.errors or [])
    assert lean.data == plain.data
    assert [(e.message, e.path) for e in lean.errors or []] == [(e.message, e.path) for e in plain.errors or []]


async def test_plain_leaf_fields_skip_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    general: list[str] = []
    original = StrawberryGraphQLCoreExecutionContext.execute_field

    def counting(self, parent_type, source, field_details_list, path, position_context):  # type: ignore[no-untyped-def]
        general.append(field_details_list[0].node.name.value)
        return original(self, parent_type, source, field_details_list, path, position_context)

    monkeypatch.setattr(StrawberryGraphQLCoreExecutionContext, "execute_field", counting)
    result = await _schema(LeanExecutionContext).execute("{ items { name count colour at maybe tags shout } }")
    assert result.errors is None and result.data is not None and len(result.data["items"]) == 2
    # the root list, then per item: a list (`tags`) and a resolver (`shout`); leaves never
    assert general == ["items", "tags", "shout", "tags", "shout"]
    general.clear()
    result = await _schema(LeanExecutionContext).execute("{ items { part { label weight } parts { label } } }")
    assert result.errors is None and result.data is not None
    assert result.data["items"][0]["parts"] == [{"label": "q"}, {"label": "r"}]

    assert general == ["items", "part", "parts", "part", "parts"]  # a nested object's leaves never either
