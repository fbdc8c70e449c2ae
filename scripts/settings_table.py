"""Print the configuration table (Markdown) generated from `haki_context.settings.Settings`.

    python scripts/settings_table.py            # print the table
    python scripts/settings_table.py --write    # replace it in docs/operations.md

One row per setting: its environment variable (`HAKI_<NAME>`), its default and its
description (the field's docstring, read through pydantic's `description`; empty where a
field has none). The table in docs/operations.md sits between the markers below, and
tests/test_docs.py fails when it differs from this script's output.
"""

from __future__ import annotations

import argparse
import sys
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "operations.md"
START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def format_default(value: Any) -> str:
    """A default as a user writes it in the environment ("unset" for None)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def rows() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, in the order Settings declares them."""
    from haki_context.settings import Settings

    out = []
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        description = getattr(field, "description", None) or ""
        out.append((f"HAKI_{name.upper()}", format_default(default), _cell(description)))
    return out


def table() -> str:
    lines = ["| variable | default | description |", "|---|---|---|"]
    for variable, default, description in rows():
        lines.append(f"| `{variable}` | `{_cell(default)}` | {description} |")
    return "\n".join(lines) + "\n"


def replace_table(document: str, generated: str) -> str:
    """`document` with the text between the markers replaced by `generated`."""
    head, start, rest = document.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise SystemExit(f"{DOC}: the markers {START} and {END} are missing")
    return f"{head}{START}\n{generated}{END}{tail}"


def committed_table(document: str) -> str:
    """The text between the markers of `document`, as --write puts it there."""
    _, _, rest = document.partition(START)
    inner, _, _ = rest.partition(END)
    return inner.removeprefix("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace the table in {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    generated = table()
    if args.write:
        DOC.write_text(replace_table(DOC.read_text(encoding="utf-8"), generated), encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}")
    else:
        sys.stdout.write(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
