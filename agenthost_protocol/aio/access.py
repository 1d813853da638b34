"""Who may open a WebSocket to the host: the access token, the Origin and the Host checks.

A host that runs an agent runs code on the user's machine, and any web page
the user visits may open ``ws://127.0.0.1:PORT`` (WebSockets have no CORS).
So, as Jupyter, VS Code server and Chrome's DevTools do, the handshake is
checked before anything of AHP is spoken:

1. **Host.**  The ``Host`` header must name the server by a loopback name
   (``localhost``), a literal IP address, or a name given in
   ``allowed_hosts``: a page that rebinds its own DNS name to 127.0.0.1
   sends its own name, and is refused (403).
2. **Origin.**  Browsers send ``Origin`` with every WebSocket handshake;
   non-browser clients (Node's WebSocket, which the official TypeScript
   client uses, websockets, curl) send none.  A handshake with an
   ``Origin`` not in ``allowed_origins`` is refused (403), except the
   server's own: ``http://HOST:PORT`` as that request's (checked) Host
   header names it, the origin of the web client ``serve`` serves.
3. **Token.**  When the policy has a token, the handshake must carry it as
   the ``token`` query parameter (``ws://127.0.0.1:8765/?token=...``, a URL
   any client can open as it is), as ``tkn`` (the name VS Code's agent-host
   URLs use), as ``Authorization: Bearer ...``, or, for browsers (which can
   set no header but this one), as the WebSocket subprotocol
   ``ahp.token.<base64url of the token's UTF-8, no padding>`` offered next
   to ``ahp`` (:func:`token_subprotocol`); otherwise 401 (with
   ``WWW-Authenticate: Bearer``).  Every candidate is compared, each in
   constant time.  The host selects the subprotocol ``ahp`` when a client
   offers it (:func:`select_subprotocol`), never the token one.

A refusal of the Host or Origin check is 403 and one of the token is 401, so
a client can tell "you may not connect from there" from "wrong token"; the
response body is a one-line reason (:attr:`Refusal.reason`).

Pure: :meth:`AccessPolicy.check` takes the request's path and headers and
says what to answer; :mod:`.websocket` applies it.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from collections.abc import Callable, Iterable
from typing import Final
from urllib.parse import parse_qs, quote, urlsplit

from attrs import field, frozen

__all__ = [
    "SUBPROTOCOL",
    "TOKEN_PARAMETERS",
    "TOKEN_SUBPROTOCOL_PREFIX",
    "AccessPolicy",
    "Refusal",
    "is_loopback",
    "new_token",
    "offered_subprotocols",
    "select_subprotocol",
    "subprotocol_token",
    "token_subprotocol",
    "url_with_token",
]

TOKEN_BYTES: Final = 32
"""Random bytes in a token :func:`new_token` makes (256 bits)."""


def new_token() -> str:
    """A fresh random access token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def url_with_token(url: str, token: str | None) -> str:
    """``ws://HOST:PORT`` as a URL that carries ``token`` (``ws://HOST:PORT/?token=...``)."""
    if token is None:
        return url
    return f"{url.rstrip('/')}/?token={quote(token, safe='')}"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (``localhost``, 127/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@frozen(kw_only=True)
class Refusal:
    """A handshake refused: the HTTP status and a one-line reason for the body and the log."""

    status: int
    reason: str


def _normal_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


def _hostname(host_header: str) -> str:
    """The name in a ``Host`` header, without the port (IPv6 in brackets kept bare)."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, _, _port = value.partition(":")
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _origins(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(_normal_origin(v) for v in values)


def _hosts(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(v.strip().lower() for v in values)


@frozen(kw_only=True)
class AccessPolicy:
    """What a WebSocket handshake must show.  The default policy asks for no token:
    :func:`~agenthost_protocol.agent.hosting.run` always gives one unless told not to."""

    token: str | None = field(default=None, repr=False)
    """The access token (``None``: none asked for; loopback only, by ``serve``'s rules)."""
    allowed_origins: tuple[str, ...] = field(default=(), converter=_origins)
    """``Origin`` values let through (``https://app.example``); none by default."""
    allowed_hosts: tuple[str, ...] = field(default=(), converter=_hosts)
    """``Host`` names accepted beyond ``localhost`` and literal IP addresses."""

    def __attrs_post_init__(self) -> None:
        if self.token is not None and not self.token:
            raise ValueError("an empty access token")

    def check(self, path: str, header: Callable[[str], str | None]) -> Refusal | None:
        """``None`` if the handshake may go on, else what to answer.

        ``path`` is the request target (``/?token=...``); ``header(name)`` a
        header's value (case-insensitive name; ``None`` if absent).
        """
        host = header("Host")
        refusal = self.check_host(host)
        if refusal is not None:
            return refusal
        assert host is not None
        origin = header("Origin")
        if (origin is not None and _normal_origin(origin) not in self.allowed_origins
                and not _own_origin(origin, host)):
            return Refusal(status=403, reason=f"Origin {origin.strip()!r} is not allowed "
                           "(allow it with --allow-origin)")
        if self.token is not None and not _token_ok(
                self.token, path, header("Authorization"), header("Sec-WebSocket-Protocol")):
            return Refusal(status=401, reason="a valid access token is required: the token= "
                           "(or tkn=) of the URL serve printed, Authorization: Bearer, or "
                           "the subprotocol ahp.token.*")
        return None

    def check_host(self, host: str | None) -> Refusal | None:
        """The Host check alone (``host``: the header's value): the web client's files
        are served to a request that passes it, token or not."""
        if host is None:
            return Refusal(status=403, reason="no Host header")
        name = _hostname(host)
        if name != "localhost" and not _is_ip(name) and name not in self.allowed_hosts:
            return Refusal(status=403, reason=f"Host {name!r} is not this server's "
                           "(allow it with --allow-host)")
        return None


def _own_origin(origin: str, host: str) -> bool:
    """Whether ``origin`` is the page this server serves itself (``http://HOST:PORT``,
    ``https://`` with TLS, as the request's own Host header names it): the web client.
    Only a Host that passed the Host check gets here, so a page of another name that
    rebinds to this address is still refused; another port of the same name is another
    origin, refused too."""
    value = _normal_origin(origin)
    own = host.strip().lower()
    return bool(own) and value in (f"http://{own}", f"https://{own}")


TOKEN_PARAMETERS: Final = ("token", "tkn")
"""The query parameters a handshake may carry the token in (``tkn``: VS Code's name)."""


SUBPROTOCOL: Final = "ahp"
"""The WebSocket subprotocol the host selects when a client offers it."""
TOKEN_SUBPROTOCOL_PREFIX: Final = "ahp.token."
"""A subprotocol ``ahp.token.<base64url(UTF-8 token), no padding>`` carries the access
token: the one header a browser's ``new WebSocket(url, protocols)`` can set."""
MAX_PROTOCOL_HEADER: Final = 4096
"""The longest ``Sec-WebSocket-Protocol`` value looked into for a token; a longer one
carries none (a real one is ``ahp`` and a token, well under 200 characters)."""
_MAX_PROTOCOLS: Final = 8
"""The most subprotocols of one handshake looked at for a token."""


def token_subprotocol(token: str) -> str:
    """The subprotocol that carries ``token`` (offer it next to :data:`SUBPROTOCOL`)."""
    encoded = base64.urlsafe_b64encode(token.encode("utf-8")).rstrip(b"=")
    return TOKEN_SUBPROTOCOL_PREFIX + encoded.decode("ascii")


def offered_subprotocols(header: str | None) -> tuple[str, ...]:
    """The subprotocols a ``Sec-WebSocket-Protocol`` value offers (at most a few; none
    from an over-long or repeated header)."""
    if header is None or len(header) > MAX_PROTOCOL_HEADER or "\x00" in header:
        return ()
    return tuple(p.strip() for p in header.split(",")[:_MAX_PROTOCOLS] if p.strip())


def subprotocol_token(protocols: Iterable[str]) -> str | None:
    """The token an ``ahp.token.*`` subprotocol among ``protocols`` carries, if any
    decodes (base64url, UTF-8); a malformed one carries none."""
    for protocol in protocols:
        if not protocol.startswith(TOKEN_SUBPROTOCOL_PREFIX):
            continue
        encoded = protocol[len(TOKEN_SUBPROTOCOL_PREFIX):]
        if not encoded or len(encoded) > MAX_PROTOCOL_HEADER or not encoded.isascii():
            continue
        try:
            data = base64.b64decode(encoded + "=" * (-len(encoded) % 4), altchars=b"-_",
                                    validate=True)
            return data.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
    return None


def select_subprotocol(offered: Iterable[str]) -> str | None:
    """The subprotocol to select among those a client ``offered``: :data:`SUBPROTOCOL`
    if offered, else none (the token's is never echoed)."""
    return SUBPROTOCOL if SUBPROTOCOL in offered else None


def _token_ok(token: str, path: str, authorization: str | None,
              protocols: str | None = None) -> bool:
    expected = token.encode("utf-8")
    query = parse_qs(urlsplit(path).query)
    offered: list[str] = [value for name in TOKEN_PARAMETERS for value in query.get(name, [])]
    if authorization is not None:
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() == "bearer":
            offered.append(credentials.strip())
    from_protocol = subprotocol_token(offered_subprotocols(protocols))
    if from_protocol is not None:
        offered.append(from_protocol)
    ok = False
    for candidate in offered:
        # every candidate compared, each in constant time
        ok |= hmac.compare_digest(candidate.encode("utf-8"), expected)
    return ok
