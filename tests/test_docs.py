"""The documentation agrees with the code: the generated configuration table, the README's
short table of settings, and links between the documents."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

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
