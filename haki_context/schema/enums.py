"""The contract's enums: the core's enums, exposed to GraphQL by name."""

from __future__ import annotations

import strawberry

from ..core import models

FactStatus = strawberry.enum(models.FactStatus)
Volatility = strawberry.enum(models.Volatility)
AssertMode = strawberry.enum(models.AssertMode)
AssertOutcome = strawberry.enum(models.AssertOutcome)
ConflictStatus = strawberry.enum(models.ConflictStatus)
PacketStatus = strawberry.enum(models.PacketStatus)
EmptyReason = strawberry.enum(models.EmptyReason)
ItemKind = strawberry.enum(models.ItemKind)
Decision = strawberry.enum(models.Decision)
ReasonCode = strawberry.enum(models.ReasonCode)
