"""Keeping access tokens out of messages and log lines, on the host's side and the client's.

An access token can travel in a URL's query (``?token=`` or ``?tkn=``), in a
URL's user information (``ws://user:secret@host``) or in an ``Authorization``
header; the websockets library logs the request line and every header of a
handshake at debug level, on both sides.  :func:`redact_url` and
:func:`redact_text` replace such values with ``REDACTED`` in any text;
:class:`RedactSecrets` is a :class:`logging.Filter` that applies them (and,
given the secrets themselves, replaces them wherever they appear) to a
record's message and traceback before any handler formats it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Final

__all__ = [
    "MAX_LOG_TEXT", "REDACTED", "SERVER_LOGGERS", "RedactSecrets", "redact_server_logs",
    "redact_text", "redact_url",
]

REDACTED: Final = "REDACTED"
MAX_LOG_TEXT: Final = 64 * 1024
"""The most characters :class:`RedactSecrets` lets through of a record's message, and
of its traceback: an agent's exception text or a peer's string can be megabytes."""

# a query parameter named token or tkn (any case: redacting too much is harmless).  The
# URL may sit in prose: punctuation ending the value is the sentence's ("...?token=abc:
# refused"), a value without a letter or digit is no token ("with its ?token=, or"), and
# an empty one still shows the token is missing
_TOKEN_PARAM: Final = re.compile(
    r"""([?&](?:token|tkn)=)(?=[^&#\s]*[A-Za-z0-9%])[^&#\s]*[^&#\s.,:;!?'")\]>]""",
    re.IGNORECASE)
# the password of a URL's user information (``ws://user:password@host``)
_USERINFO_PASSWORD: Final = re.compile(r"(://[^/?#@\s:]*):[^/?#@\s]+@")
# an Authorization (or Proxy-Authorization) header's credentials, after the scheme if any,
# as websockets logs headers ("< Authorization: Bearer abc") or a repr shows them
# (a scheme named alone, "Authorization: Bearer" in prose, holds no secret)
_AUTHORIZATION_VALUE: Final = re.compile(
    r"""(\bauthorization['"]?\s*[:=,]\s*['"]?(?:[a-z][a-z0-9._~+/-]*[ \t]+)?)"""
    r"""(?!(?:bearer|basic)(?:[\s'".,;)]|$))[^\s'"]+""",
    re.IGNORECASE)


def redact_url(text: str) -> str:
    """``text`` with the secrets a URL can carry replaced by ``REDACTED``.

    The value of every ``token`` and ``tkn`` query parameter
    (``ws://127.0.0.1:8765/?token=REDACTED``) and the password of a
    ``user:password@`` part.  It works on any text, so a command line or an
    error message holding such a URL can be shown too.
    """
    text = _TOKEN_PARAM.sub(rf"\g<1>{REDACTED}", text)
    return _USERINFO_PASSWORD.sub(rf"\g<1>:{REDACTED}@", text)


def redact_text(text: str) -> str:
    """:func:`redact_url`, and the credentials of ``Authorization`` headers shown in ``text``."""
    return _AUTHORIZATION_VALUE.sub(rf"\g<1>{REDACTED}", redact_url(text))


class RedactSecrets(logging.Filter):
    """A filter that passes every record, with the secrets of its message and of its
    traceback replaced by ``REDACTED`` (:func:`redact_text`), each cut to ``max_chars``
    characters (with a note of how long it was), so one line cannot flood the log.

    ``secrets`` (the access token itself ...) are replaced wherever they appear,
    whatever carries them.  Add it to a logger to cover the records logged
    through that logger (a logger's filters do not see what its children
    propagate), or to a handler to cover everything that handler writes.
    """

    def __init__(self, secrets: Iterable[str] = (), *, max_chars: int = MAX_LOG_TEXT) -> None:
        super().__init__()
        self.max_chars = max_chars
        # the longest first: a secret holding another is replaced whole
        self._secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    def add(self, secret: str) -> None:
        """Replace ``secret`` too from now on."""
        if secret and secret not in self._secrets:
            self._secrets = tuple(sorted((*self._secrets, secret), key=len, reverse=True))

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        text = redact_text(text)
        if len(text) > self.max_chars:
            # cut after redacting: a secret cut in two would no longer be recognised
            text = f"{text[:self.max_chars]}... [cut: {len(text)} characters in all]"
        return text

    def _redacted_parts(self, record: logging.LogRecord, redacted: str
                        ) -> tuple[object, tuple[object, ...]]:
        """The record's format and arguments, each redacted, when together they give a
        message with nothing left to redact: formatters that read the arguments
        themselves (uvicorn's access log unpacks its five) keep working.  Else the
        redacted message alone, with no arguments."""
        if isinstance(record.args, tuple) and record.args and isinstance(record.msg, str):
            args = tuple(self.redact(a) if isinstance(a, str) else a for a in record.args)
            msg = self.redact(record.msg)
            try:
                again = msg % args
            except Exception:
                again = None
            if again is not None and self.redact(again) == again:
                return msg, args
        return redacted, ()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            # a record that cannot be formatted: its raw parts, redacted, as the message
            record.msg = self.redact(f"{record.msg!s} {record.args!r}")
            record.args = ()
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = self._redacted_parts(record, redacted)
        if record.exc_info and not record.exc_text:
            # formatted here, the way the handler's formatter would: it keeps exc_text
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


SERVER_LOGGERS: Final = ("uvicorn.error", "uvicorn.access", "hypercorn.error", "hypercorn.access")
"""The loggers of uvicorn and hypercorn that write request targets: uvicorn writes
each WebSocket handshake's, query included, on ``uvicorn.error`` (at ``INFO``,
with or without ``--no-access-log``), and each HTTP request's on
``uvicorn.access``; hypercorn's access log has the query only in the atoms
``%(R)s``, ``%(Uq)s`` and ``%(q)s``."""

_SERVER_LOG_FILTER: Final = RedactSecrets()


def redact_server_logs(secrets: Iterable[str] = (), *,
                       loggers: Iterable[str] = SERVER_LOGGERS) -> RedactSecrets:
    """Keep access tokens out of what the ASGI server logs: a
    :class:`RedactSecrets` filter on each of
    ``loggers`` (by default uvicorn's and hypercorn's, :data:`SERVER_LOGGERS`),
    which replaces ``?token=``/``?tkn=`` values, ``Authorization`` credentials and
    each of ``secrets`` with ``REDACTED`` in their records, keeping the records'
    arguments (uvicorn's access log reads them).  Call it after the server has
    set up its logging (at import of the application's module, under
    ``uvicorn module:app``: uvicorn configures logging first).  It is one filter
    for the process: calling it again adds the new secrets to it and puts it on
    no logger twice.  Returns the filter (:meth:`RedactSecrets.add` adds a
    secret later)."""
    for secret in secrets:
        _SERVER_LOG_FILTER.add(secret)
    for name in loggers:
        logger = logging.getLogger(name)
        if _SERVER_LOG_FILTER not in logger.filters:
            logger.addFilter(_SERVER_LOG_FILTER)
    return _SERVER_LOG_FILTER
