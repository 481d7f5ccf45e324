"""Where providers may be dialled: the operator's allow-list, and what is denied whatever it says.

A provider registration names a target, and the service dials it from inside the
operator's network: without a policy, any admin key could point it at a cloud
metadata address, a private range, the embedded Postgres' socket or the service's
own ports. The policy is checked when a target is registered and again each time
it is dialled, on the addresses a name resolves to then (DNS can change); the
channel then dials those very addresses, so what was checked is what is reached.

Allowed (`--provider-targets`, comma-separated): host name patterns
(`*.providers.svc.cluster.local`), networks (`10.20.0.0/16`, an address), and Unix
socket paths (`unix:/run/providers/*`). By default: loopback only. Denied whatever
the allow-list says: link-local addresses (cloud metadata lives there), metadata
host names, unspecified and multicast addresses, the service's own gRPC and
metrics ports on this machine, and its database (its host and port, its socket
directory), and abstract Unix sockets.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import posixpath
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import parse_qs, urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolve = Callable[[str, int], Awaitable[list[Address]]]

DEFAULT_ALLOWED = "localhost,127.0.0.0/8,::1/128"
METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}
)
_ALWAYS_DENIED_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32", "0.0.0.0/32", "::/128")
)
# How long a resolution is trusted: a name that changes is checked again within this.
RESOLVED_FOR_SECONDS = 5.0
# The denial agents see; the reason goes to the log and to admins.
DENIED = "the target is not allowed by the service's egress policy"


class EgressDenied(Exception):
    """A target the policy does not allow; the message says why (for the log and for admins)."""


@dataclass(frozen=True)
class Endpoint:
    """A target as dialled: a Unix socket path, or a host (a name or an address) and a port."""

    path: str = ""
    host: str = ""
    port: int = 0

    @property
    def authority(self) -> str:
        """`host:port` as an HTTP/2 authority (an IPv6 address in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_target(target: str) -> Endpoint:
    """The endpoint a gRPC target names; `EgressDenied` for a form the policy cannot vouch for."""
    if target.startswith("unix-abstract:"):
        raise EgressDenied("abstract Unix sockets are not allowed")
    if target.startswith("unix:"):
        path = target.removeprefix("unix:")
        path = "/" + path.lstrip("/") if path.startswith("//") else path
        if not path.startswith("/"):
            raise EgressDenied("a Unix socket target needs an absolute path")
        # `..` resolved here, as the kernel would: a path may not climb out of an allowed directory.
        return Endpoint(path=posixpath.normpath(path))
    rest = target
    for scheme in ("ipv4:", "ipv6:", "dns:"):
        if target.startswith(scheme):
            rest = target.removeprefix(scheme)
            if scheme == "dns:" and rest.startswith("//"):
                authority, _, rest = rest.removeprefix("//").partition("/")
                if authority:
                    raise EgressDenied("a target naming its own DNS server is not allowed")
            if "," in rest:
                raise EgressDenied("a target of several addresses is not allowed: register one")
    host, _, port = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EgressDenied(f"{target!r} names no host and port")
    return Endpoint(host=host.lower().rstrip("."), port=int(port))


@dataclass
class EgressPolicy:
    allowed_hosts: tuple[str, ...] = ()
    allowed_networks: tuple[Network, ...] = ()
    allowed_paths: tuple[str, ...] = ()
    # Endpoints of the service itself: its ports on this machine (every one its processes listen on, a set
    # the worker keeps current as the supervisor tells it), its database's address and socket.
    own_ports: Collection[int] = frozenset()
    # This machine's own addresses besides loopback (its host name's), where its ports are too.
    own_addresses: frozenset[Address] = frozenset()
    # The database's addresses (None: this machine) and port.
    database: tuple[tuple[Address | None, int], ...] = ()
    database_socket_dirs: tuple[str, ...] = ()
    resolve: Resolve | None = None
    # How long a resolution is trusted.
    resolved_for: float = RESOLVED_FOR_SECONDS
    _resolved: dict[tuple[str, int], tuple[float, list[Address]]] = field(default_factory=dict)

    @classmethod
    def from_option(
        cls,
        allowed: str,
        own_ports: Collection[int],
        database_urls: Iterable[str],
        resolve: Resolve | None = None,
        resolved_for: float = RESOLVED_FOR_SECONDS,
    ) -> EgressPolicy:
        """The policy for `--provider-targets` (`allowed`), the service's ports (`own_ports`, read live: the
        worker adds the ports the supervisor tells of) and its database (its URLs).
        It resolves this machine's name and the databases' (blocking): build it at start-up, off the loop."""
        hosts: list[str] = []
        networks: list[Network] = []
        paths: list[str] = []
        for entry in (part.strip() for part in allowed.split(",")):
            if not entry:
                continue
            if entry.startswith("unix:"):
                paths.append(entry.removeprefix("unix:"))
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.append(entry.lower().rstrip("."))
        database: list[tuple[Address | None, int]] = []
        socket_dirs: list[str] = []
        for url in database_urls:
            endpoints, dirs = _database_endpoints(url)
            database.extend(endpoints)
            socket_dirs.extend(dirs)
        return cls(
            tuple(hosts),
            tuple(networks),
            tuple(paths),
            own_ports,
            frozenset(_resolve_now(socket.gethostname())),
            tuple(database),
            tuple(socket_dirs),
            resolve,
            resolved_for,
        )

    async def check(self, target: str, registering: bool = False) -> str:
        """The target to dial for `target`, checked: a Unix socket, or the addresses its host resolves
        to now (pinned, so the channel reaches what was checked). Raises `EgressDenied`. When
        `registering`, a name the allow-list names may not resolve yet (it is checked when dialled)."""
        endpoint = parse_target(target)
        if endpoint.path:
            self._check_path(endpoint.path)
            return f"unix:{endpoint.path}"
        by_name = _literal(endpoint.host) is None
        if by_name and endpoint.host in METADATA_NAMES:
            raise EgressDenied(f"{endpoint.host} is a metadata service")
        host_allowed = by_name and self._host_allowed(endpoint.host)
        try:
            addresses = await self._addresses(endpoint)
        except EgressDenied:
            if registering and host_allowed:
                return ""
            raise
        for address in addresses:
            self._check_address(address, endpoint)
        if not host_allowed:
            outside = [
                address
                for address in addresses
                if not any((_embedded_ipv4(address) or address) in net for net in self.allowed_networks)
            ]
            if outside:
                raise EgressDenied(f"{endpoint.host} ({outside[0]}) is not on the allow-list (--provider-targets)")
        v4 = [address for address in addresses if address.version == 4]
        if v4:
            return "ipv4:" + ",".join(f"{address}:{endpoint.port}" for address in v4)
        return "ipv6:" + ",".join(f"[{address}]:{endpoint.port}" for address in addresses)

    def _check_path(self, path: str) -> None:
        if any(PurePosixPath(path).is_relative_to(directory) for directory in self.database_socket_dirs):
            raise EgressDenied(f"{path} is the service's database")
        if not any(fnmatch.fnmatchcase(path, pattern) for pattern in self.allowed_paths):
            raise EgressDenied(f"unix:{path} is not on the allow-list (--provider-targets)")

    def _check_address(self, address: Address, endpoint: Endpoint) -> None:
        address = _embedded_ipv4(address) or address
        if address.is_multicast or any(address in network for network in _ALWAYS_DENIED_NETWORKS):
            raise EgressDenied(f"{endpoint.host} ({address}) is a link-local, metadata or unspecified address")
        if endpoint.port in self.own_ports and self._is_this_machine(address):
            raise EgressDenied(f"{endpoint.host}:{endpoint.port} is the service itself")
        for database, port in self.database:
            if port == endpoint.port and (address == database or (database is None and self._is_this_machine(address))):
                raise EgressDenied(f"{endpoint.host}:{endpoint.port} is the service's database")

    def _is_this_machine(self, address: Address) -> bool:
        """Loopback, unspecified, or one of this machine's own addresses."""
        return address.is_loopback or address.is_unspecified or address in self.own_addresses

    def _host_allowed(self, host: str) -> bool:
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.allowed_hosts)

    async def _addresses(self, endpoint: Endpoint) -> list[Address]:
        literal = _literal(endpoint.host)
        if literal is not None:
            return [literal]
        key = (endpoint.host, endpoint.port)
        cached = self._resolved.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.resolved_for:
            return cached[1]
        try:
            addresses = await (self.resolve or _resolve)(endpoint.host, endpoint.port)
        except (OSError, UnicodeError) as error:
            # UnicodeError: a name the resolver cannot even encode (an empty or 64-character label).
            raise EgressDenied(f"{endpoint.host} does not resolve: {error}") from None
        if not addresses:
            raise EgressDenied(f"{endpoint.host} resolves to no address")
        if len(self._resolved) > 4096:
            self._resolved.clear()
        self._resolved[key] = (now, addresses)
        return addresses


async def _resolve(host: str, port: int) -> list[Address]:
    """The addresses `host` resolves to (the system's resolver, on a thread), within two seconds."""
    async with asyncio.timeout(2.0):
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(_address_of(info) for info in infos))


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, or the well-known NAT64 prefix), so
    `[::ffff:169.254.169.254]` is judged as the metadata address it reaches."""
    if address.version == 4:
        return None
    assert isinstance(address, ipaddress.IPv6Address)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _address_of(info: tuple[Any, ...]) -> Address:
    """The address of one `getaddrinfo` answer (an IPv6 one without its zone)."""
    return ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])


def _resolve_now(host: str, port: int | None = None) -> list[Address]:
    """What `host` resolves to, blocking (at start-up only); nothing when it does not resolve."""
    try:
        return [_address_of(info) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except (OSError, UnicodeError):
        return []


def _database_endpoints(url: str) -> tuple[tuple[tuple[Address | None, int], ...], tuple[str, ...]]:
    """The database's addresses (None: this machine, where it may listen too) with its port, and its
    socket directories, from its URL; a host name is resolved once, at start-up."""
    if not url:
        return (), ()
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    hosts = [*query.get("host", []), *([parts.hostname] if parts.hostname else [])]
    port = parts.port or int((query.get("port") or ["5432"])[0])
    endpoints: list[tuple[Address | None, int]] = [(None, port)]
    dirs: list[str] = []
    for host in hosts:
        if host.startswith("/"):
            dirs.append(host)
            continue
        literal = _literal(host)
        if literal is not None:
            endpoints.append((literal, port))
            continue
        endpoints.extend((address, port) for address in _resolve_now(host, port))
    return tuple(endpoints), tuple(dirs)
