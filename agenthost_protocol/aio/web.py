"""The web client's static files, as HTTP responses on the WebSocket port.

``serve`` answers a plain HTTP ``GET`` (one without ``Upgrade: websocket``)
with the page shipped in the package (``agenthost_protocol/web/``): ``/`` is
``index.html``, every other file by its path.  Only the files in the package
are served: the set is read once at start and a request path is looked up in
it as it is, so no path can name anything else (``..``, ``%2e%2e``, a
backslash or an absolute path are simply not in the set: 404).

Every response carries a strict Content-Security-Policy (scripts, styles
and connections from the page's own origin only, no inline script, no
frames, no forms), ``X-Content-Type-Options: nosniff``,
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-cache``.  ``HEAD``
is answered like ``GET`` without the body; any other method is 405.

The page holds no secret: the access token reaches it in the URL's
fragment (``http://HOST:PORT/#token=...``), which a browser never sends.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qs, quote, urlsplit

from attrs import frozen

__all__ = [
    "CONTENT_TYPES",
    "TOKEN_CHECK_PATH",
    "StaticResponse",
    "WebFiles",
    "page_url",
    "security_headers",
    "token_check_response",
]

CONTENT_TYPES: Final[Mapping[str, str]] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
}
"""The types of the files served; a file of another suffix is not served at all."""

TOKEN_CHECK_PATH: Final = "/token-check"
"""``GET`` with ``Authorization: Bearer TOKEN``: 204 if the token is the host's, else 401.
A browser sees no status for a refused WebSocket handshake; the page asks here why (the
token in a header, never in the request line).  A page of another origin cannot send
that header without a CORS preflight, which is refused (405), so it learns nothing."""

MAX_FILES: Final = 256
MAX_FILE_BYTES: Final = 4 * 1024 * 1024
"""Bounds on what is read at start: the package's own files, far under both."""

# a Host header that passed the Host check is a name, an IPv4 or a bracketed IPv6
# address, with a port; anything else is not put into a header
_HOST: Final = re.compile(r"\A(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?\Z")


def security_headers(host: str | None, *, secure: bool = False) -> list[tuple[str, str]]:
    """The headers every response of the page carries.

    ``host`` is the request's ``Host`` header: the WebSocket the page opens is
    to that same host and port, so ``connect-src`` names it (``'self'`` alone
    does not cover ``ws:`` in every browser); ``None`` or an odd value leaves
    ``'self'`` only.
    """
    connect = "'self'"
    if host is not None and _HOST.match(host):
        connect += f" {'wss' if secure else 'ws'}://{host.lower()}"
    policy = "; ".join((
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        f"connect-src {connect}",
        "img-src 'self' data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ))
    return [
        ("Content-Security-Policy", policy),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Cache-Control", "no-cache"),
    ]


@frozen(kw_only=True)
class StaticResponse:
    """What to answer an HTTP request for the page: status, reason, headers, body."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


def _plain(status: int, reason: str, text: str, extra: list[tuple[str, str]],
           *, head: bool) -> StaticResponse:
    body = text.encode("utf-8")
    headers = [*extra, ("Content-Type", "text/plain; charset=utf-8"),
               ("Content-Length", str(len(body)))]
    return StaticResponse(status=status, reason=reason, headers=tuple(headers),
                          body=b"" if head else body)


class WebFiles:
    """The page's files, read once from the package (or ``files``, for tests)."""

    def __init__(self, files: Mapping[str, bytes] | None = None) -> None:
        self._files: dict[str, bytes] = dict(files) if files is not None else _package_files()

    @property
    def paths(self) -> tuple[str, ...]:
        """The request paths served (``/`` is ``/index.html``)."""
        return tuple(sorted(self._files))

    def respond(self, method: str, target: str, host: str | None, *,
                secure: bool = False) -> StaticResponse:
        """The answer to ``method`` ``target`` (the request line's path and query)."""
        head = method == "HEAD"
        extra = security_headers(host, secure=secure)
        if method not in ("GET", "HEAD"):
            return _plain(405, "Method Not Allowed", "only GET and HEAD are served here\n",
                          [*extra, ("Allow", "GET, HEAD")], head=False)
        path = target.split("?", 1)[0].split("#", 1)[0]
        if path == "/":
            path = "/index.html"
        body = self._files.get(path)
        if body is None:
            return _plain(404, "Not Found", "no such file\n", extra, head=head)
        suffix = path[path.rfind("."):]
        headers = [*extra, ("Content-Type", CONTENT_TYPES[suffix]),
                   ("Content-Length", str(len(body)))]
        return StaticResponse(status=200, reason="OK", headers=tuple(headers),
                              body=b"" if head else body)


def token_check_response(refused: int | None, host: str | None, *,
                         secure: bool = False) -> StaticResponse:
    """The answer at :data:`TOKEN_CHECK_PATH`: 204, or ``refused`` (401, 403) with no body
    that says more than the status."""
    extra = security_headers(host, secure=secure)
    if refused is None:
        return StaticResponse(status=204, reason="No Content",
                              headers=(*extra, ("Content-Length", "0")), body=b"")
    if refused == 401:
        return _plain(401, "Unauthorized", "the access token is not this host's\n", extra,
                      head=False)
    return _plain(403, "Forbidden", "refused\n", extra, head=False)


def _package_files() -> dict[str, bytes]:
    """Every file of ``agenthost_protocol/web/`` of a served type, by request path."""
    root = importlib.resources.files("agenthost_protocol") / "web"
    found: dict[str, bytes] = {}
    if not root.is_dir():
        return found
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        for entry in folder.iterdir():
            name = entry.name
            if name.startswith(".") or name == "__pycache__":
                continue
            if entry.is_dir():
                pending.append((entry, f"{prefix}/{name}"))
                continue
            dot = name.rfind(".")
            if dot <= 0 or name[dot:] not in CONTENT_TYPES:
                continue
            data = entry.read_bytes()
            if len(data) > MAX_FILE_BYTES or len(found) >= MAX_FILES:
                raise ValueError(f"the web client's file {prefix}/{name} is past the bounds "
                                 "of what is served")
            found[f"{prefix}/{name}"] = data
    return found


def page_url(ws_url: str) -> str:
    """The page's address for ``ws_url`` (``ws://HOST:PORT/?token=T``, as ``serve``
    prints it): ``http://HOST:PORT/#token=T``, the token in the fragment, which a
    browser never sends in a request."""
    parts = urlsplit(ws_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    tokens = parse_qs(parts.query).get("token", [])
    base = f"{scheme}://{parts.netloc}/"
    if not tokens:
        return base
    return f"{base}#token={quote(tokens[0], safe='')}"
