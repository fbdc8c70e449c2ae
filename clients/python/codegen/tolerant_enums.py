"""An ariadne-codegen plugin: every generated output enum accepts a value it does not list.

The server may add a value to an enum (a new reason code, say); a client generated before must
still read the response. Each enum gets a `_missing_` that keeps such a value as a member of
its own (`ReasonCode("NEW").value == "NEW"`), where pydantic would otherwise refuse the whole
response. Run by clients/python/generate.py (`plugins` in its configuration).
"""

from __future__ import annotations

import ast

from ariadne_codegen.plugins.base import Plugin
from graphql import GraphQLEnumType

MISSING = '''
@classmethod
def _missing_(cls, value: object) -> "typing.Any":
    """A value this client does not list (a newer server's): kept as a member of its own."""
    if not isinstance(value, str):
        return None
    member = str.__new__(cls, value)
    member._name_ = value
    member._value_ = value
    return member
'''


class TolerantEnums(Plugin):
    """Adds `_missing_` to every generated enum class."""

    def generate_enum(self, class_def: ast.ClassDef, enum_type: GraphQLEnumType) -> ast.ClassDef:
        class_def.body.extend(ast.parse(MISSING).body)
        return class_def

    def generate_enums_module(self, module: ast.Module) -> ast.Module:
        module.body.insert(0, ast.Import(names=[ast.alias(name="typing")]))
        return module
