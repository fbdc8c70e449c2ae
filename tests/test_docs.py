"""The documentation agrees with the code: the generated configuration table, the README's
short table of settings, and links between the documents."""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path
from types import ModuleType

from haki_context.db import migrate
from haki_context.schema import build_schema
from haki_context.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_table", ROOT / "scripts" / "settings_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_table_is_generated() -> None:
    generator = _generator()
    committed = generator.committed_table(generator.DOC.read_text(encoding="utf-8"))
    assert committed == generator.table(), (
        "docs/operations.md's configuration table differs from the settings: "
        "run `python scripts/settings_table.py --write` and commit the result"
    )


def test_configuration_table_lists_every_setting() -> None:
    generated = _generator().table()
    for name in Settings.model_fields:
        assert f"`HAKI_{name.upper()}`" in generated


def _readme_settings() -> list[tuple[str, str]]:
    """(variable, stated default) of each row of the README's short table of settings."""
    rows = re.findall(r"^\| `(HAKI_[A-Z0-9_]+)` \| `([^`]*)` \|", README.read_text(encoding="utf-8"), re.MULTILINE)
    assert len(rows) >= 8, "the README's table of settings was not found"
    return rows


def test_readme_settings_exist_with_their_defaults() -> None:
    generator = _generator()
    fields = Settings.model_fields
    for variable, stated in _readme_settings():
        name = variable.removeprefix("HAKI_").lower()
        assert name in fields, f"README.md names {variable}, which is not a setting"
        actual = generator.format_default(fields[name].get_default(call_default_factory=True))
        assert stated.replace(",", "") == actual, f"README.md says {variable} defaults to {stated}, the code {actual}"


def test_relative_links_resolve() -> None:
    for doc in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)} links to a missing {target}"


def test_docs_speak_of_the_product_not_its_history() -> None:
    banned = re.compile(
        r"\b(?i:stop|round|issue) \d+\b|\b(?i:the)\s(?i:seed)\b|DESIGN\.md"
        r"|(?i:original\s+specification)|(?i:development\s+machine)|(?i:targets\s+set\s+for\s+this\s+work)"
    )
    for doc in [README, *DOCS]:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            found = banned.search(line)
            assert found is None, f"{doc.relative_to(ROOT)}:{number}: {found.group(0)!r}"


def test_every_pip_command_of_the_readme_is_the_virtualenvs() -> None:
    """The two commands make `.venv`; every other install the README asks for goes into it too,
    so a reader never wonders which pip is meant (the system's may be another Python's)."""
    text = " ".join(README.read_text(encoding="utf-8").split())  # a command may wrap across lines
    commands = re.findall(r"([\w./-]*pip) install", text)
    assert len(commands) >= 4 and set(commands) == {".venv/bin/pip"}, commands


def test_the_readme_says_the_first_session_needs_a_second_terminal() -> None:
    """The server holds the terminal it was started in: the session's commands go in another."""
    session = README.read_text(encoding="utf-8").split("## A first session", 1)[1].split("<!-- example:", 1)[0]
    assert "second terminal" in " ".join(session.split())


DESIGN = ROOT / "docs" / "design.md"


def _section(text: str, start: str) -> str:
    """The text from `start` up to the next heading."""
    assert start in text, f"docs/design.md has no {start!r}"
    return text.split(start, 1)[1].split("\n#", 1)[0]


def _table_rows(section: str) -> list[list[str]]:
    """The cells of each row of the first table of `section`, header and rule left out."""
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines[first + 2 :])
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


_LIST = re.compile(r"\s+(?:/|\.\.)\s+")  # "a / b" and "a .. b" both list two


def _stated(value: str) -> str:
    """A default as the design's table states it, written as the environment takes it."""
    value = value.strip("`")
    return {"on": "true", "off": "false"}.get(value, value)


def test_design_defaults_are_the_codes() -> None:
    generator = _generator()
    fields = Settings.model_fields
    rows = _table_rows(_section(DESIGN.read_text(encoding="utf-8"), "### Defaults"))
    assert len(rows) >= 10, "docs/design.md's table of defaults was not found"
    checked = 0
    for setting, default, _note in rows:
        if setting == "budget":
            query = build_schema()._schema.query_type
            assert query is not None
            actual = str(query.fields["context"].args["budget"].default_value)
            assert default == actual, f"docs/design.md says budget defaults to {default}, the schema {actual}"
            continue
        names, values = _LIST.split(setting), _LIST.split(default)
        assert len(names) == len(values), f"docs/design.md: {setting} states {len(values)} defaults"
        for name, value in zip(names, values, strict=True):
            variable = re.fullmatch(r"`HAKI_([A-Z0-9_]+)`", name)
            assert variable, f"docs/design.md's defaults name {name!r}: name each setting in full"
            field = variable.group(1).lower()
            assert field in fields, f"docs/design.md names {name}, which is not a setting"
            actual = generator.format_default(fields[field].get_default(call_default_factory=True))
            assert _stated(value) == actual, f"docs/design.md says {name} defaults to {value}, the code {actual}"
            checked += 1
    assert checked >= 20


def test_design_lists_every_migration() -> None:
    section = _section(DESIGN.read_text(encoding="utf-8"), "**Migrations**")
    listed = [row[0] for row in _table_rows(section)]
    shipped = [name.removesuffix(".sql") for name, _ in migrate.available()]
    assert listed == shipped, "docs/design.md's table of migrations differs from db/migrations/"


def test_design_lists_every_table() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    paragraph = text.split("**Tables**", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([a-z_]+)`", paragraph))
    created = {"schema_migrations"}  # made by the migrator itself (db/migrate.py)
    for _, sql in migrate.available():
        created |= set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)", sql))
    assert created - listed == set(), "docs/design.md's list of tables leaves these out"
