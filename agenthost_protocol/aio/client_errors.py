"""The exceptions of the asyncio client (:mod:`agenthost_protocol.aio.client`).

Every error the client raises because of the host, the transport or a
timeout is a :class:`ClientError`.  A call the protocol or the connection's
state forbids (dispatching to a channel that is not subscribed, params of the
wrong class ...) raises the sans-I/O layer's
:class:`~agenthost_protocol.errors.LocalProtocolError` unchanged, as in
:mod:`agenthost_protocol.client`: that is the caller's mistake, not the
peer's.

::

    ClientError
    +-- ConnectError            the transport could not be opened
    |   +-- HandshakeRefused    ... the host refused the handshake for good (401, 403)
    +-- ConnectionClosedError   the connection is gone (before an answer came, or for good)
    +-- HostProtocolError       the host broke the protocol
    +-- ClientTimeout           (also a TimeoutError) nothing came in time
    |   +-- RequestTimeout      ... for one request
    +-- RequestError            the host answered with a JSON-RPC / AHP error
    |   +-- VersionMismatch     ... -32005: no offered version is supported
    +-- ActionRejected          the host rejected a dispatched action
    +-- ActionDropped           a dispatched action will never be answered
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Literal, TypeAlias

from ..reconciler import PendingAction, Rejection
from ..types import AhpErrorCode, JsonRpcError, UnsupportedProtocolVersionErrorData
from .redact import REDACTED as _REDACTED
from .redact import redact_url

__all__ = [
    "ActionDropped",
    "ActionRejected",
    "ClientError",
    "ClientTimeout",
    "ConnectError",
    "ConnectionClosedError",
    "HandshakeCheck",
    "HandshakeRefused",
    "HostProtocolError",
    "RequestError",
    "RequestTimeout",
    "VersionMismatch",
    "redact_url",
]

class ClientError(Exception):
    """Base of the asyncio client's errors."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConnectError(ClientError):
    """The transport could not be opened: connection refused, bad URL, a failed
    WebSocket handshake (the host refused it with an HTTP status: a wrong access
    token ...), a command that cannot be started, or ``open_timeout``.

    The target and the reason are shown through :func:`redact_url`: an access
    token in the URL never reaches a message, a log line or a traceback.
    """

    def __init__(self, target: str, reason: str, *, status: int | None = None) -> None:
        # redacted here, not by the callers: no path can leak the token past this
        target = redact_url(target)
        reason = redact_url(reason)
        super().__init__(f"cannot connect to {target}: {reason}")
        self.target = target
        """The URL (its secrets redacted) or command line."""
        self.reason = reason
        self.status = status
        """The HTTP status the host refused the WebSocket handshake with (401 ...), or ``None``."""


HandshakeCheck: TypeAlias = Literal["token", "origin-or-host"]
"""Which check of the host refused a WebSocket handshake: the access token (HTTP 401),
or the ``Origin`` or ``Host`` header (HTTP 403)."""

_TOKEN_ENV: Final = "AHP_TOKEN"
_DETAIL_CHARS: Final = 200
"""The most characters of the host's own reason a :class:`HandshakeRefused` quotes."""


def _safe_detail(body: bytes | str, secrets: Iterable[str] = ()) -> str:
    """A peer's free text, fit to quote in one line of a message: at most
    :data:`_DETAIL_CHARS` characters, whitespace runs made one space, every
    other unprintable character (control, bidi override ...) shown as ``?``,
    and each of ``secrets`` (the token we sent, which a hostile host may echo)
    replaced by ``REDACTED``."""
    secrets = [secret for secret in secrets if secret]
    # bounded before any work on it (the body may be large), but never cutting a secret
    # that starts in what is shown
    keep = _DETAIL_CHARS * 4 + max((len(secret) for secret in secrets), default=0)
    raw = body[: keep * 4] if isinstance(body, bytes) else body
    text = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw)[:keep]
    for secret in secrets:
        text = text.replace(secret, _REDACTED)
    text = " ".join(text.split())
    text = "".join(char if char.isprintable() else "?" for char in text)
    if len(text) > _DETAIL_CHARS:
        text = text[: _DETAIL_CHARS - 1].rstrip() + "…"
    return redact_url(text)


class HandshakeRefused(ConnectError):
    """The host refused the WebSocket handshake, for a reason retrying cannot mend.

    ``check`` says which check: ``"token"`` (HTTP 401: the access token is
    missing or is not the host's, e.g. after ``serve --new-token``) or
    ``"origin-or-host"`` (HTTP 403: the ``Origin`` header is not allowed, or
    the ``Host`` header does not name the server; ``detail``, the host's own
    one-line reason, says which).  :class:`~agenthost_protocol.aio.client.AsyncClient`
    does not reconnect after it: the first connect raises it, and a reconnect
    refused so closes the client with it (requests and waits raise it; event
    streams end with a ``Closed`` that carries it).

    The message says which check refused and what to do; it never holds the
    token.  The host's reason is quoted (``origin-or-host`` only) bounded to
    200 characters and made printable.
    """

    def __init__(self, target: str, *, check: HandshakeCheck, status: int,
                 detail: str = "", token_sent: bool = False) -> None:
        self.check: HandshakeCheck = check
        """``"token"`` (401) or ``"origin-or-host"`` (403)."""
        self.detail = _safe_detail(detail)
        """The host's reason (the response body), made safe; may be empty."""
        self.token_sent = token_sent
        """Whether the handshake carried a token (``check == "token"``: a wrong one)."""
        super().__init__(target, self._advice(status), status=status)

    def _advice(self, status: int) -> str:
        if self.check == "token":
            if self.token_sent:
                return (f"the host refused the access token (HTTP {status}): it is not the "
                        "host's token (serve --new-token replaces it); use the URL serve "
                        f"printed last, with its ?token=, or set {_TOKEN_ENV} to its token")
            return (f"the host wants an access token (HTTP {status}): pass the URL serve "
                    f"printed, with its ?token=, or set {_TOKEN_ENV}")
        said = f' (the host says: "{self.detail}")' if self.detail else ""
        return (f"the host refused this connection's Origin or Host header (HTTP {status})"
                f"{said}: a browser page's origin needs serve --allow-origin, a host name "
                "other than localhost or an IP address needs serve --allow-host")

    def again(self) -> HandshakeRefused:
        """The same refusal, as a new exception (each waiter raises its own)."""
        return HandshakeRefused(self.target, check=self.check, status=self.status or 0,
                                detail=self.detail, token_sent=self.token_sent)


class ConnectionClosedError(ClientError):
    """The connection is gone: a request could not be answered, or the client is closed.

    A request in flight when the transport drops fails with this error even
    when the reconnect supervisor resumes the connection afterwards: the
    client never re-sends a request by itself (``createSession`` is not
    idempotent).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HostProtocolError(ClientError):
    """The host broke the protocol (a malformed answer ...); the transport was dropped."""


class ClientTimeout(ClientError, TimeoutError):
    """Nothing came in time (also a ``TimeoutError``, so ``except TimeoutError`` works)."""

    def __init__(self, message: str, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout
        """The time limit, in seconds."""


class RequestTimeout(ClientTimeout):
    """A request got no answer within its timeout.

    The request stays pending in the connection: if the answer comes later it
    is ignored (a ``subscribe`` answered late still subscribes).
    """

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"{method}: no answer from the host within {timeout:g} s", timeout)
        self.method = method


class RequestError(ClientError):
    """The host answered a request with an error.

    ``code`` is the JSON-RPC or AHP error code (compare with
    :class:`~agenthost_protocol.types.AhpErrorCode` /
    :class:`~agenthost_protocol.types.JsonRpcErrorCode`), ``data`` the error's
    data, typed for the codes of
    :data:`agenthost_protocol.client.ERROR_DATA_TYPES` (-32005, -32007,
    -32009), else raw JSON.
    """

    def __init__(self, method: str, error: JsonRpcError) -> None:
        super().__init__(f"{method} failed: {error.message} ({error.code})")
        self.method = method
        self.error = error
        self.code: int = error.code
        self.data: object = error.data


class VersionMismatch(RequestError):
    """The host speaks none of the offered protocol versions (``-32005``).

    The host closes the connection after this answer.
    :func:`~agenthost_protocol.versions.select_version_from_supported` may
    find a version both sides know, to offer on a new connection.
    """

    def __init__(self, method: str, error: JsonRpcError, offered: Sequence[str]) -> None:
        super().__init__(method, error)
        data = error.data
        self.supported_versions: tuple[str, ...] = (
            tuple(data.supported_versions)
            if isinstance(data, UnsupportedProtocolVersionErrorData) else ()
        )
        """The versions the host speaks (empty if it did not say)."""
        self.offered: tuple[str, ...] = tuple(offered)
        """The versions the client offered."""
        host = ", ".join(self.supported_versions) or "versions it did not list"
        self.message = (
            f"protocol version mismatch: the host speaks {host}; this client offered "
            f"{', '.join(self.offered)}"
        )

    @staticmethod
    def matches(error: JsonRpcError) -> bool:
        return error.code == AhpErrorCode.UNSUPPORTED_PROTOCOL_VERSION


class ActionRejected(ClientError):
    """The host rejected a dispatched action (its envelope carried ``rejectionReason``)."""

    def __init__(self, rejection: Rejection) -> None:
        super().__init__(f"the host rejected {_action_name(rejection.action)} on "
                         f"{rejection.channel}: {rejection.reason}")
        self.rejection = rejection


class ActionDropped(ClientError):
    """A dispatched action will never be answered on this connection.

    A reconnect cleared it unanswered (see
    :attr:`~agenthost_protocol.reconciler.ReconnectOutcome.dropped`; it can be
    re-sent with :meth:`AsyncClient.resend_dropped
    <agenthost_protocol.aio.client.AsyncClient.resend_dropped>`), or its
    channel was unsubscribed, or the client closed.
    """

    def __init__(self, action: PendingAction, reason: str) -> None:
        super().__init__(f"{_action_name(action.action)} on {action.channel} was dropped "
                         f"unanswered: {reason}")
        self.action = action
        self.reason = reason


def _action_name(action: object) -> str:
    kind = getattr(action, "type", None)
    return str(getattr(kind, "value", kind) or type(action).__name__)
