"""Statement parameters bound by name.

asyncpg sends a statement's arguments by position only: the text says `$1`, `$2`, ... and the
arguments come as a tuple in that order. A `Parameters` names one statement's parameters in
order, and both sides are made from it: the SQL text is written with the names (`P.now` or
`P["now"]` renders that name's `$n`), and the argument tuple is built from the values by name
(`P.args(values)`, refusing a missing or an unexpected name), so the text and the arguments
cannot disagree, and two statements alike but for one parameter never share a number by
accident.

PostgreSQL refuses a parameter its text never references ("could not determine data type of
parameter"), so a statement declares exactly the parameters its text uses: a `Statement` checks
that when it is made (`Parameters.check`), and a text whose parameters depend on how it is
built (a full-text rank that takes one more) declares its list accordingly.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

# A parameter reference in SQL text: a dollar sign and a number.
_REFERENCE = re.compile(r"\$(\d+)")


def _in_order(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """What reads the values of `names` from a mapping, in order, as a tuple (raising KeyError for
    one missing): itemgetter, the fastest, for two or more (for one it gives the value itself)."""
    if len(names) > 1:
        return cast(Callable[[Mapping[str, Any]], tuple[Any, ...]], operator.itemgetter(*names))
    return lambda values: tuple([values[name] for name in names])


class Parameters:
    """The parameters of one statement, in order: the first name is the text's first positional
    parameter. Reading a name (`P.top_k`, `P["top_k"]`) gives its reference in the text; reading
    a name not declared fails, so a text cannot use a parameter its arguments lack."""

    __slots__ = ("_in_order", "_references", "names")

    def __init__(self, *names: str) -> None:
        for name in names:
            if not name.isidentifier() or name.startswith("_") or hasattr(Parameters, name):
                raise ValueError(f"{name!r} cannot name a parameter")
        if len(set(names)) != len(names):
            raise ValueError(f"a parameter is named twice in {names}")
        self.names: tuple[str, ...] = names
        self._references = {name: f"${i}" for i, name in enumerate(names, 1)}
        self._in_order = _in_order(names)

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):  # the slots, before __init__ sets them
            raise AttributeError(name)
        try:
            return self._references[name]
        except KeyError:
            raise AttributeError(f"no parameter {name!r} among {self.legend()}") from None

    def __getitem__(self, name: str) -> str:
        try:
            return self._references[name]
        except KeyError:
            raise KeyError(f"no parameter {name!r} among {self.legend()}") from None

    def __repr__(self) -> str:
        return f"Parameters({self.legend()})"

    def legend(self) -> str:
        """Each reference with its name, in order: `$1 project_id, $2 subject_id, ...`."""
        return ", ".join(f"{ref} {name}" for name, ref in self._references.items())

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The argument tuple for the statement: the value of each parameter, in order. `values`
        holds exactly the declared names: a missing one or another one is refused."""
        try:
            args = self._in_order(values)
        except KeyError as e:
            raise ValueError(f"no value for the parameter {e.args[0]!r} ({self.legend()})") from None
        if len(values) != len(self.names):  # every name is there, so some other name is too
            other = sorted(set(values) - set(self.names))
            raise ValueError(f"values for no parameter of the statement: {other} ({self.legend()})")
        return args

    def check(self, text: str) -> str:
        """`text`, after checking that it references every declared parameter and no other."""
        used = {int(n) for n in _REFERENCE.findall(text)}
        declared = set(range(1, len(self.names) + 1))
        if used != declared:
            unused = [self.names[i - 1] for i in sorted(declared - used)]
            undeclared = [f"${i}" for i in sorted(used - declared)]
            raise ValueError(
                f"a statement's text and its parameters disagree: never referenced {unused},"
                f" not declared {undeclared} ({self.legend()})"
            )
        return text


@dataclass(frozen=True)
class Statement:
    """An SQL text and its parameters, checked to agree when made."""

    parameters: Parameters
    text: str

    def __post_init__(self) -> None:
        self.parameters.check(self.text)
