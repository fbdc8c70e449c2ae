"""The hosts a PostgreSQL URL names, in order: one, or every node of a cluster in a multi-host URL
(`postgresql://h1:p1,h2:p2/db?target_session_attrs=read-write`, or libpq's `?host=h1,h2&port=p1,p2`).
Plain parsing, without the driver: the command line's error lines use it too."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True, slots=True)
class Host:
    """One host of a URL: a name or address (`[::1]` without its brackets) or a socket
    directory, and its port as written ("" when the URL gives none)."""

    host: str
    port: str

    def target(self) -> str:
        """`host:port` (the default port filled in), or the socket directory."""
        if self.host.startswith("/"):
            return self.host
        host = f"[{self.host}]" if ":" in self.host else (self.host or "localhost")
        return f"{host}:{self.port or 5432}"


def hosts_of(url: str) -> list[Host]:
    """The hosts `url` names, in order; ValueError when its host list or a port does not parse."""
    parts = urlsplit(url.strip())
    query = parse_qs(parts.query)
    authority = parts.netloc.rpartition("@")[2]
    if "," in authority:  # libpq's host list, which urlsplit cannot read
        pairs = [_host_port(item) for item in authority.split(",")]
    else:
        hosts = (parts.hostname or (query.get("host") or [""])[0]).split(",")
        port = str(parts.port) if parts.port is not None else (query.get("port") or [""])[0]
        ports = port.split(",")
        pairs = [(h, ports[min(i, len(ports) - 1)]) for i, h in enumerate(hosts)]
    for _, port_text in pairs:
        if port_text and not port_text.isdigit():
            raise ValueError(f"port {port_text!r} is not a number")
    return [Host(host.removeprefix("[").removesuffix("]"), port) for host, port in pairs]


def _host_port(item: str) -> tuple[str, str]:
    """One `host[:port]` of a multi-host URL (an IPv6 `[::1]` keeps its colons)."""
    host, sep, port = item.rpartition(":")
    return (host, port) if sep and not item.endswith("]") else (item, "")
