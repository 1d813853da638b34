"""``serve`` serves the web client on its WebSocket port: the static files with their
security headers, nothing but them, and the page's own origin let through the Origin
check while every other origin is still refused.  Over real loopback sockets, against
one ``serve`` subprocess for the module."""

from __future__ import annotations

import base64
import http.client
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenthost_protocol.aio.access import AccessPolicy
from agenthost_protocol.aio.web import WebFiles, page_url, security_headers

from ._web_serve import REPO, Served, serve

TOKEN = "web-serving-token-0123456789"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("web-serving")
    with serve(["--store", str(tmp / "store.sqlite3")], tmp, token=TOKEN) as s:
        yield s


def request(served: Served, method: str, path: str, headers: dict[str, str] | None = None,
            ) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        sent = {"Host": f"127.0.0.1:{served.port}", **(headers or {})}
        for name, value in sent.items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def raw_status(served: Served, head: bytes) -> tuple[int, bytes]:
    """Send ``head`` as it is (no client library normalising the path); the status."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(head)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def upgrade(served: Served, headers: dict[str, str]) -> tuple[int, bytes]:
    lines = [
        "GET / HTTP/1.1",
        f"Host: 127.0.0.1:{served.port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return raw_status(served, ("\r\n".join(lines) + "\r\n\r\n").encode())


def subprotocols(token: str) -> str:
    encoded = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
    return f"ahp, ahp.token.{encoded}"


def test_serve_prints_the_web_line_second(served: Served) -> None:
    assert served.ws_url == f"ws://127.0.0.1:{served.port}/?token={TOKEN}"
    assert served.web_url == f"http://127.0.0.1:{served.port}/#token={TOKEN}"
    assert served.store_line.startswith("store ")
    assert page_url("wss://[::1]:9/?token=a%2Fb") == "https://[::1]:9/#token=a%2Fb"
    assert page_url("ws://127.0.0.1:9") == "http://127.0.0.1:9/"


def test_the_page_and_its_headers(served: Served) -> None:
    status, headers, body = request(served, "GET", "/")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="app.js"></script>' in body
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    csp = dict(part.strip().split(" ", 1) for part in headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'"
    assert csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["connect-src"] == f"'self' ws://127.0.0.1:{served.port}"
    assert csp["frame-ancestors"] == "'none'" and csp["base-uri"] == "'none'"
    assert csp["form-action"] == "'none'"
    assert "unsafe" not in headers["content-security-policy"]
    # no token needed for the page: it holds none
    for path, kind in (("/app.js", "text/javascript; charset=utf-8"),
                       ("/style.css", "text/css; charset=utf-8"),
                       ("/index.html", "text/html; charset=utf-8")):
        status, headers, body = request(served, "GET", path)
        assert (status, headers["content-type"]) == (200, kind), path
        assert headers["x-content-type-options"] == "nosniff"
        assert int(headers["content-length"]) == len(body) > 0


def test_head_is_get_without_the_body(served: Served) -> None:
    _, got, body = request(served, "GET", "/app.js")
    status, headers, empty = request(served, "HEAD", "/app.js")
    assert (status, empty) == (200, b"")
    assert headers["content-length"] == str(len(body))
    assert headers["content-security-policy"] == got["content-security-policy"]


def test_other_methods_are_405(served: Served) -> None:
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        status, headers, _ = request(served, method, "/")
        assert status == 405, method
        assert headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize("path", [
    "/nope.html", "/../pyproject.toml", "/..%2f..%2fpyproject.toml", "/%2e%2e/aio/web.py",
    "/web.py", "/../aio/web.py", "//etc/passwd", "/ahp/../index.html", "/.%2e/index.html",
    "/..\\index.html", "/index.html/", "/ahp/", "/ahp", "/%00", "/app.js%00.html",
    "/__init__.py", "/./index.html",
])
def test_only_the_package_files_are_served(served: Served, path: str) -> None:
    status, data = raw_status(served, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{served.port}"
                              "\r\n\r\n".encode())
    assert status == 404, (path, data)
    assert b"nosniff" in data


def test_a_foreign_host_gets_no_page(served: Served) -> None:
    status, _, body = request(served, "GET", "/", {"Host": f"evil.example:{served.port}"})
    assert status == 403 and b"evil.example" in body


def test_the_pages_own_origin_is_let_in(served: Served) -> None:
    status, data = upgrade(served, {"Origin": f"http://127.0.0.1:{served.port}",
                                    "Sec-WebSocket-Protocol": subprotocols(TOKEN)})
    assert status == 101, data
    assert b"\r\nsec-websocket-protocol: ahp\r\n" in data.lower()
    assert b"ahp.token" not in data  # never echoed
    # with the token in the query, as any client does, and no subprotocol
    status, data = raw_status(served, (
        f"GET /?token={TOKEN} HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
        f"Origin: http://127.0.0.1:{served.port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    assert status == 101 and b"sec-websocket-protocol" not in data.lower()


@pytest.mark.parametrize("origin", [
    "http://evil.example", "http://127.0.0.1:1", "http://localhost", "null",
    "http://127.0.0.1", "https://127.0.0.1:1",
])
def test_every_other_origin_is_refused(served: Served, origin: str) -> None:
    status, data = upgrade(served, {"Origin": origin,
                                    "Sec-WebSocket-Protocol": subprotocols(TOKEN)})
    assert status == 403, (origin, data)


def test_the_own_origin_still_needs_the_token(served: Served) -> None:
    origin = {"Origin": f"http://127.0.0.1:{served.port}"}
    assert upgrade(served, {**origin, "Sec-WebSocket-Protocol": subprotocols("wrong")})[0] == 401
    assert upgrade(served, {**origin, "Sec-WebSocket-Protocol": "ahp, ahp.token.%%%"})[0] == 401
    assert upgrade(served, origin)[0] == 401


def test_the_origin_of_a_rebinding_name_is_refused() -> None:
    """A page of another name that resolves to this address sends its own Host: the Host
    check refuses it before its (matching) Origin could count."""
    policy = AccessPolicy(token="t")
    headers = {"Host": "evil.example:8765", "Origin": "http://evil.example:8765"}
    refusal = policy.check("/?token=t", headers.get)
    assert refusal is not None and refusal.status == 403 and "Host" in refusal.reason
    own = {"Host": "localhost:8765", "Origin": "http://localhost:8765"}
    assert policy.check("/?token=t", own.get) is None


def test_web_files_alone() -> None:
    files = WebFiles({"/index.html": b"<p>", "/a.js": b"1"})
    assert files.respond("GET", "/?x=1", "h:1").body == b"<p>"
    assert files.respond("GET", "/a.js#x", None).status == 200
    assert files.respond("HEAD", "/b.js", None).status == 404
    # a Host that is not a plain name and port never reaches the policy's text
    policy = dict(security_headers("a b;script-src *"))["Content-Security-Policy"]
    assert "script-src *" not in policy and "connect-src 'self';" in policy
    packaged = WebFiles().paths
    assert {"/index.html", "/app.js", "/style.css"} <= set(packaged)
    assert not any(p.endswith(".py") for p in packaged)


def test_stdio_prints_no_web_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agenthost_protocol.cli", "serve", "--stdio", "--no-store"],
        check=False, input=b"", capture_output=True, timeout=30, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert b"web " not in done.stdout and b"http://" not in done.stdout


def test_the_token_check(served: Served) -> None:
    """The page asks why its WebSocket was refused: the token in a header, 204 or 401."""
    status, headers, _ = request(served, "GET", "/token-check",
                                 {"Authorization": f"Bearer {TOKEN}"})
    assert status == 204 and headers["x-content-type-options"] == "nosniff"
    assert request(served, "GET", "/token-check", {"Authorization": "Bearer nope"})[0] == 401
    assert request(served, "GET", "/token-check")[0] == 401
    # a token in the query does not count here
    assert request(served, "GET", f"/token-check?token={TOKEN}")[0] == 401
    # a page of another origin cannot send the header without a preflight, refused
    assert request(served, "OPTIONS", "/token-check")[0] == 405
    origin = {"Origin": "http://evil.example", "Authorization": f"Bearer {TOKEN}"}
    assert request(served, "GET", "/token-check", origin)[0] == 403


def test_the_package_files_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is read at start is bounded, in count and in size, and not silently cut."""
    from agenthost_protocol.aio import web

    monkeypatch.setattr(web, "MAX_FILE_BYTES", 10)
    with pytest.raises(ValueError, match="past the bounds"):
        web.WebFiles()
    monkeypatch.setattr(web, "MAX_FILE_BYTES", 4 * 1024 * 1024)
    monkeypatch.setattr(web, "MAX_FILES", 2)
    with pytest.raises(ValueError, match="past the bounds"):
        web.WebFiles()
