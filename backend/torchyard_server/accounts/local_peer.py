"""Peer authentication on loopback, as PostgreSQL's `peer` method does it on its Unix socket: in
embedded mode (`make run`), a request with no credentials that comes over loopback from a process
of the operating-system user the server runs as is that installation's admin.

That user already owns everything of the embedded stack (its data directory, the SQLite database,
the secret key), so this gives nobody anything new; it lets the Rust coordinator's quick start
(`curl -X POST http://localhost:8000/jobs -d '{"world_size": 4}'`) work verbatim. Anyone else is
refused as before: another local user (the kernel's socket table names the owner of the client's
socket), another machine (not loopback), a request forwarded by a proxy (X-Forwarded-* or
Forwarded: the address daphne reports is then the proxy's word), and a browser (Origin, Referer,
Cookie or Sec-Fetch-* headers: a web page the user visits must not act for them; the dashboard
signs in). Off unless TORCHYARD_LOCAL_PEER_AUTH says so (default: on in embedded mode, SQLite).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authentication import BaseAuthentication

ESTABLISHED = "01"  # the state column of /proc/net/tcp*
PROC_TABLES = {"/proc/net/tcp": socket.AF_INET, "/proc/net/tcp6": socket.AF_INET6}
BROWSER_OR_PROXY_HEADERS = ("HTTP_ORIGIN", "HTTP_REFERER", "HTTP_COOKIE", "HTTP_FORWARDED", "HTTP_X_REAL_IP")
BROWSER_OR_PROXY_PREFIXES = ("HTTP_SEC_FETCH_", "HTTP_X_FORWARDED_")


def _address(field: str, family: int) -> tuple[str, int]:
    """An `ADDR:PORT` of /proc/net/tcp*: the address in host byte order, 32-bit word by word."""
    raw, port = field.split(":")
    packed = bytes.fromhex(raw)
    packed = b"".join(struct.pack("=I", struct.unpack(">I", packed[i:i + 4])[0]) for i in range(0, len(packed), 4))
    return socket.inet_ntop(family, packed), int(port, 16)


def _normal(address: str) -> str:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def socket_owner(client: tuple[str, int], server_port: int) -> int | None:
    """The uid owning the socket at `client` connected to `server_port` on this host (this network
    namespace), from the kernel's table; None when there is none."""
    wanted = (_normal(client[0]), client[1])
    for path, family in PROC_TABLES.items():
        try:
            with open(path) as table:
                rows = table.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] != ESTABLISHED:
                continue
            local, remote = _address(fields[1], family), _address(fields[2], family)
            if (_normal(local[0]), local[1]) == wanted and remote[1] == server_port:
                return int(fields[7])
    return None


def is_same_user_on_loopback(request) -> bool:
    meta = request.META
    if any(meta.get(header) for header in BROWSER_OR_PROXY_HEADERS) or any(
            key.startswith(BROWSER_OR_PROXY_PREFIXES) for key in meta):
        return False
    try:
        address, port, server_port = meta["REMOTE_ADDR"], int(meta["REMOTE_PORT"]), int(meta["SERVER_PORT"])
        if not ipaddress.ip_address(_normal(address)).is_loopback:
            return False
    except (KeyError, TypeError, ValueError):
        return False
    return socket_owner((address, port), server_port) == os.geteuid()


class LocalPeerAuthentication(BaseAuthentication):
    """The admin user (TORCHYARD_ADMIN_USER) for a credential-less request of the server's own OS
    user over loopback, where TORCHYARD_LOCAL_PEER_AUTH allows it; see the module docstring. Put
    after the token and session classes: credentials, when sent, always decide."""

    def authenticate(self, request):
        if not settings.LOCAL_PEER_AUTH or not is_same_user_on_loopback(request):
            return None
        user = get_user_model().objects.filter(username=settings.LOCAL_PEER_USER, is_active=True).first()
        return (user, None) if user is not None else None
