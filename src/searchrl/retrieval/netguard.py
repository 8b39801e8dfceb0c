"""Fetching URLs that others chose (web search results and the redirects of their pages) without reaching places a
public page has no business in: this machine, the local network, a cloud's metadata service (169.254.169.254).

:func:`public_client` makes an httpx client that connects only to public addresses: every host is resolved once,
refused if any of its addresses is private, loopback, link-local, reserved, unspecified or multicast (IPv4 inside an
IPv6 address included), and the connection is made to an address just checked, so a DNS answer that changes between
a check and the connection (DNS rebinding) cannot slip through. Each redirect hop is a new request and is checked
again. Behind an HTTP proxy (``$HTTPS_PROXY``) host names are resolved by the proxy, which then decides what is
reachable; an IP address in a URL is checked here either way.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import httpcore
import httpx


class PrivateAddress(Exception):
    """A URL's host is, or resolves to, an address that is not public."""


def is_public(address: str) -> bool:
    """Whether an IP address is reachable on the public internet (and is not multicast).

    >>> [is_public(a) for a in ("93.184.216.34", "10.0.0.5", "169.254.169.254", "::1", "::ffff:127.0.0.1")]
    [True, False, False, False, False]
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # fe80::1%eth0: the zone is not part of the address
    if ip.is_multicast or ip.is_reserved or not ip.is_global:
        return False
    embedded = (ip.ipv4_mapped, ip.sixtofour) if isinstance(ip, ipaddress.IPv6Address) else ()
    return all(is_public(str(v4)) for v4 in embedded if v4 is not None)


def _refuse(host: str, address: str) -> PrivateAddress:
    said = host if host == address else f"{host} resolves to {address}, which"
    return PrivateAddress(
        f"{said} is not a public address; set retrieval.web.allow_private: true to fetch intranet pages"
    )


def check_host(host: str, port: int) -> list[str]:
    """The addresses of ``host`` (an IP address: itself), or :class:`PrivateAddress` if any of them is not public."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:  # as httpx reports a name that does not resolve
        raise httpcore.ConnectError(f"{host}: {err}") from err
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        if not is_public(address):
            raise _refuse(host, address)
    return addresses


class _PublicOnly(httpcore.SyncBackend):
    """httpcore's network backend, connecting only to the checked public addresses of a host."""

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **kwargs: Any) -> httpcore.NetworkStream:
        error: Exception | None = None
        for address in check_host(host, port):  # each in turn, as socket.create_connection does
            try:
                return super().connect_tcp(address, port, timeout, **kwargs)
            except httpcore.ConnectError as err:
                error = err
        raise error or httpcore.ConnectError(f"{host} has no address")


def _literal_address(request: httpx.Request) -> None:
    """Request hook: refuse an IP address in the URL before anything is sent (through a proxy too)."""
    try:
        ip = ipaddress.ip_address(request.url.host)
    except ValueError:
        return  # a name: checked when its connection is made
    if not is_public(str(ip)):
        raise _refuse(request.url.host, str(ip))


def _resolved_host(request: httpx.Request) -> None:
    """Request hook where the connection pool cannot take the checking backend: the host is checked when the request
    is sent (DNS rebinding between this check and the connection is then not caught)."""
    _literal_address(request)
    try:
        check_host(request.url.host, request.url.port or (443 if request.url.scheme == "https" else 80))
    except httpcore.ConnectError as err:  # as the transport reports a name that does not resolve
        raise httpx.ConnectError(str(err), request=request) from err


def public_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client(**kwargs)`` that reaches public addresses only (see the module doc). Proxies set in the
    environment are used as by any httpx client."""
    client = httpx.Client(event_hooks={"request": [_literal_address]}, **kwargs)
    # the pool of direct connections (not through a proxy) connects through the checking backend; httpx has no
    # public hook for it, so where its pool is laid out otherwise (another httpx version) each request's host is
    # checked before it is sent instead
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if isinstance(getattr(pool, "_network_backend", None), httpcore.NetworkBackend):
        pool._network_backend = _PublicOnly()  # type: ignore[union-attr]
    else:
        client.event_hooks = {"request": [_resolved_host]}
    return client
