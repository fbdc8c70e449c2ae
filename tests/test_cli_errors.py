"""Every operator error of the CLI is one line, `haki-context: error: <what> (<setting>)`, with a
non-zero status and no traceback; and the long jobs' progress lines (core/progress.py).

The error cases fail before any database starts, so they need none (and run in about a
second each).
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from haki_context import __version__
from haki_context.core.progress import Progress

CLI = str(Path(sys.executable).with_name("haki-context"))


def run_cli(*args: str, user: int | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with no HAKI_* setting but `env`."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    full.update(env)
    return subprocess.run([CLI, *args], env=full, capture_output=True, text=True, timeout=60, check=False, user=user)


def assert_one_error_line(result: subprocess.CompletedProcess[str], *names: str) -> str:
    """The command failed with exactly one stderr line, in the CLI's format, naming `names`."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("haki-context: error: "), line
    for name in names:
        assert name in line, line
    return line


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="haki-cli-errors-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick of a free one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["keys", "list"],
        ["prune", "--days", "1"],
        ["index-scopes"],
        ["reembed"],
        ["serve", "--port", "{port}"],
    ],
)
def test_an_unreachable_database_names_host_port_and_the_setting(args: list[str]) -> None:
    args = [arg.format(port=free_port()) for arg in args]
    result = run_cli(*args, HAKI_DATABASE_URL="postgresql://u:s3cret-pw@127.0.0.1:1/db", HAKI_EMBED_PROVIDER="hashing")
    line = assert_one_error_line(result, "127.0.0.1:1", "HAKI_DATABASE_URL")
    assert line.startswith("haki-context: error: cannot connect to the PostgreSQL at 127.0.0.1:1")
    assert "s3cret-pw" not in result.stderr + result.stdout


@pytest.mark.parametrize("url", ["not a url", "http://x", "postgresql://u:pw@host:notaport/db"])
def test_a_url_that_is_not_a_postgres_url(url: str) -> None:
    line = assert_one_error_line(run_cli("migrate", HAKI_DATABASE_URL=url), "HAKI_DATABASE_URL")
    assert ":pw@" not in line


def test_a_data_dir_that_is_a_file(scratch: Path) -> None:
    file = scratch / "file"
    file.write_text("")
    line = assert_one_error_line(run_cli("keys", "list", HAKI_DATA_DIR=str(file)), "HAKI_DATA_DIR")
    assert "is not a directory" in line
    below = assert_one_error_line(run_cli("migrate", HAKI_DATA_DIR=str(file / "pg")), "HAKI_DATA_DIR")
    assert f"{file} is a file" in below


def test_a_data_dir_that_is_not_writable(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read_only = scratch / "read-only"
    read_only.mkdir(mode=0o500)
    read_only.chmod(0o500)
    data_dir = read_only / "data"
    if os.geteuid() != 0:
        line = assert_one_error_line(run_cli("migrate", HAKI_DATA_DIR=str(data_dir)), "HAKI_DATA_DIR")
        assert "not writable" in line
        assert not data_dir.exists()
        return
    # Root writes anywhere, so permissions do not bite: run the command as `nobody` when that
    # user can run this interpreter; otherwise (an interpreter under /root) check in-process
    # that the data-directory check asks os.access as a non-root user's would answer.
    import pwd

    scratch.chmod(0o755)
    try:
        result = run_cli("migrate", user=pwd.getpwnam("nobody").pw_uid, HAKI_DATA_DIR=str(data_dir))
    except (KeyError, PermissionError):
        result = None
    if result is not None and "No module named" not in result.stderr:
        assert "not writable" in assert_one_error_line(result, "HAKI_DATA_DIR")
        assert not data_dir.exists()
        return
    from haki_context.db import embedded
    from haki_context.startup_errors import StartupError, error_line

    real_access = os.access

    def access_as_a_user(path: object, mode: int) -> bool:
        if mode & os.W_OK and Path(str(path)) == read_only:
            return False
        return real_access(path, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access_as_a_user)
    with pytest.raises(StartupError) as raised:
        embedded.check_data_dir(data_dir)
    assert error_line(raised.value) == (
        f"haki-context: error: the data directory {data_dir} cannot be created: {read_only} is not writable"
        " (HAKI_DATA_DIR)"
    )
    assert not data_dir.exists()


def test_a_data_dir_under_root_is_refused() -> None:
    if os.geteuid() != 0:
        pytest.skip("the /root guard only matters when running as root")
    line = assert_one_error_line(run_cli("migrate", HAKI_DATA_DIR="/root/haki-never-created"), "HAKI_DATA_DIR")
    assert "/root" in line
    assert not Path("/root/haki-never-created").exists()


def test_a_port_in_use_fails_before_the_database_starts(scratch: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        data_dir = scratch / "data"
        result = run_cli("serve", "--port", str(port), HAKI_DATA_DIR=str(data_dir), HAKI_EMBED_PROVIDER="hashing")
    line = assert_one_error_line(result, "--port", "HAKI_PORT", str(port))
    assert "already in use" in line
    assert not data_dir.exists(), "the database was started before the port was checked"
    assert "serving" not in result.stdout + result.stderr


@pytest.mark.parametrize("args", [["build-model"], ["serve", "--port", "{port}"]])
def test_a_model_cache_that_is_a_file(scratch: Path, args: list[str]) -> None:
    args = [arg.format(port=free_port()) for arg in args]
    file = scratch / "models"
    file.write_text("")
    data_dir = scratch / "data"
    result = run_cli(*args, HAKI_MODEL_CACHE_DIR=str(file), HAKI_DATA_DIR=str(data_dir))
    assert_one_error_line(result, "HAKI_MODEL_CACHE_DIR", str(file))
    assert not data_dir.exists()


@pytest.mark.parametrize(
    ("env", "name", "allowed"),
    [
        ({"HAKI_PORT": "abc"}, "HAKI_PORT", "integer"),
        ({"HAKI_EMBED_PROVIDER": "foo"}, "HAKI_EMBED_PROVIDER", "'hashing'"),
        ({"HAKI_LOG_LEVEL": "loud"}, "HAKI_LOG_LEVEL", "debug"),
        ({"HAKI_TOKENIZER": "llama"}, "HAKI_TOKENIZER", "'cl100k_base'"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_a_bad_setting_value_names_the_variable_and_what_is_allowed(
    env: dict[str, str], name: str, allowed: str, command: str
) -> None:
    line = assert_one_error_line(run_cli(command, user=None, **env), name, allowed)

    assert line.endswith(f"({name})")


@pytest.mark.parametrize("port", ["99999", "65536", "0", "-5"])
def test_a_port_flag_out_of_range_is_one_error_line_naming_the_flag(scratch: Path, port: str) -> None:
    data_dir = scratch / "data"
    result = run_cli("serve", "--port", port, HAKI_DATA_DIR=str(data_dir), HAKI_EMBED_PROVIDER="hashing")
    line = assert_one_error_line(result, f"--port={port}")
    assert line.endswith("(--port)"), line
    assert "greater than or equal to 1" in line or "less than or equal to 65535" in line, line
    assert not data_dir.exists()
    assert "serving" not in result.stdout + result.stderr


@pytest.mark.parametrize("port", ["99999", "0"])
@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_a_port_setting_out_of_range_is_one_error_line_naming_the_variable(
    scratch: Path, port: str, command: str
) -> None:
    data_dir = scratch / "data"
    result = run_cli(command, HAKI_PORT=port, HAKI_DATA_DIR=str(data_dir), HAKI_EMBED_PROVIDER="hashing")
    line = assert_one_error_line(result, f"HAKI_PORT='{port}'")
    assert line.endswith("(HAKI_PORT)"), line
    assert not data_dir.exists()


def test_a_port_flag_in_range_wins_over_a_bad_variable(scratch: Path) -> None:
    # The flag is what the server uses, so the variable under it is not checked; the start
    # then stops at the unreachable database, past the settings.
    result = run_cli(
        "serve",
        "--port",
        str(free_port()),
        HAKI_PORT="99999",
        HAKI_DATABASE_URL="postgresql://127.0.0.1:1/none",
        HAKI_EMBED_PROVIDER="hashing",
    )
    assert_one_error_line(result, "127.0.0.1:1", "HAKI_DATABASE_URL")


def test_an_unknown_haki_variable_is_one_warning_line_naming_the_closest_setting() -> None:
    # The command then stops at its bad URL: the warnings come first, once the settings are read.
    result = run_cli(
        "migrate",
        HAKI_PROT="19102",
        haki_embed_providers="hashing",
        HAKI_ZQXJ="1",
        HAKI_API_KEY="read by the mcp command",
        HAKI_DATABASE_URL="http://x",
    )
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and lines[-1].startswith("haki-context: error: "), result.stderr
    warnings = [line.split(": ", 1)[1] for line in lines if " WARNING " in line]
    assert warnings == [
        "unknown setting HAKI_PROT ignored; did you mean HAKI_PORT?",
        "unknown setting HAKI_ZQXJ ignored",
        "unknown setting haki_embed_providers ignored; did you mean HAKI_EMBED_PROVIDER?",
    ], result.stderr


def test_unknown_settings_are_the_haki_variables_nothing_reads() -> None:
    from haki_context.settings import unknown_settings

    environ = {
        "HAKI_PORT": "1",
        "haki_host": "::1",  # read: settings are matched case-insensitively
        "HAKI_API_KEY": "k",  # read by the mcp command
        "HAKI_DATADIR": "x",
        "HAKI_LOCOMO_DIR": "x",  # no setting: the benchmarks' dataset folder is LOCOMO_DIR
        "PATH": "/bin",
        "HAKIPORT": "1",
    }
    assert unknown_settings(environ) == [("HAKI_DATADIR", "HAKI_DATA_DIR"), ("HAKI_LOCOMO_DIR", None)]


def test_prune_without_a_retention_is_one_error_line(scratch: Path) -> None:
    result = run_cli("prune", HAKI_DATA_DIR=str(scratch / "data"))
    assert_one_error_line(result, "--days", "HAKI_TRACE_RETENTION_DAYS")


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"haki-context {__version__}"


def test_the_module_runs_as_the_command_does() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "haki_context.cli", "migrate"],
        env={**os.environ, "HAKI_DATABASE_URL": "http://x"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert_one_error_line(result, "HAKI_DATABASE_URL")


# --- progress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_logs_at_most_every_few_seconds_and_at_the_end(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    caplog.set_level(logging.INFO, logger="haki_context.core.progress")
    progress = Progress("re-embedding", 1000, stream=io.StringIO(), terminal=False, clock=clock)
    for _ in range(9):
        clock.now += 1.0
        progress.update(100)
    progress.done()
    progress.done()  # once
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "re-embedding: 500/1000 rows (50%), 100 rows/s, 5.0 s",
        "re-embedding: 900/1000 rows (90%), 100 rows/s, 9.0 s",
    ]


def test_progress_on_a_terminal_is_one_updating_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    stream = io.StringIO()
    caplog.set_level(logging.INFO, logger="haki_context.core.progress")
    with Progress("building scope indexes", 20_000, stream=stream, terminal=True, clock=clock) as progress:
        clock.now += 1.0
        progress.update(10_000)
        clock.now += 1.0
        progress.update(10_000)
    out = stream.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n")
    assert "\r" in out and "20000/20000 rows (100%), 10,000 rows/s" in out
    assert not caplog.records


def test_progress_is_a_log_line_unless_the_cli_allows_the_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    from haki_context.core import progress as module

    assert Progress("x", 1, stream=Tty())._terminal is False
    module.allow_terminal()
    try:
        assert Progress("x", 1, stream=Tty())._terminal is True
        assert Progress("x", 1, stream=io.StringIO())._terminal is False
    finally:
        module.allow_terminal(False)


def test_an_embedder_that_cannot_load_is_one_line_naming_the_provider() -> None:
    from haki_context.core.embedding.embedder import EmbedderUnavailable
    from haki_context.startup_errors import error_line

    line = error_line(EmbedderUnavailable("the [torch] extra is not installed:\nNo module named 'torch'"))
    assert line == (
        "haki-context: error: the embedder cannot load: the [torch] extra is not installed:"
        " No module named 'torch' (HAKI_EMBED_PROVIDER or HAKI_MODEL_CACHE_DIR)"
    )


def test_a_reembed_that_kept_giving_way_is_one_line_saying_to_run_it_again() -> None:
    from haki_context.core.embedding.space import ReembedBlocked
    from haki_context.startup_errors import error_line

    line = error_line(
        ReembedBlocked("re-embedding facts gave way to concurrent writes of the same rows for 300 s; run it again")
    )
    assert line == (
        "haki-context: error: re-embedding facts gave way to concurrent writes of the same rows for 300 s; run it again"
    )


@pytest.mark.parametrize("urls", ["mysql://db.internal/app", "postgresql://host:99999999/db"])
def test_a_replica_url_that_is_no_postgresql_url_is_one_error_line(scratch: Path, urls: str) -> None:
    result = run_cli("serve", "--port", str(free_port()), HAKI_DATA_DIR=str(scratch / "data"), HAKI_REPLICA_URLS=urls)
    assert_one_error_line(result, "HAKI_REPLICA_URLS")
    assert not (scratch / "data").exists()  # refused before any database started
