"""Large content the host keeps aside and serves by reference (``resourceRead``).

A chat that holds every tool output inline grows past what one message can
carry: its snapshot no longer fits the transport's limit and nobody can
open it.  The spec's answer is content by reference: a tool result's
``ToolResultResourceContent`` ("for lazy-loading large results") names a
URI the client reads with ``resourceRead`` when it wants the bytes.

:class:`ContentStore` holds such content, pure and in memory (a durable
store can hold it instead); :func:`by_reference` rewrites an action so
that every tool-result block over a threshold is stored and referenced.
The host core answers ``resourceRead`` for the store's URIs itself.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterator
from typing import Final

from attrs import evolve, frozen

from .. import types as t

__all__ = [
    "CONTENT_SCHEME",
    "DEFAULT_INLINE_LIMIT",
    "ContentStore",
    "StoredContent",
    "by_reference",
]

CONTENT_SCHEME: Final = "agenthost-content:"
"""The URI scheme of stored content: ``agenthost-content:/<sha-256 of the bytes>``."""

DEFAULT_INLINE_LIMIT: Final = 256 * 1024
"""Bytes a tool-result block may hold inline; a larger one is stored and referenced."""


@frozen(kw_only=True)
class StoredContent:
    """One stored blob: its bytes and content type."""

    data: bytes
    content_type: str

    @property
    def is_text(self) -> bool:
        return self.content_type.startswith("text/") or self.content_type in (
            "application/json",
        )


class ContentStore:
    """Content-addressed blobs (the same bytes are stored once).

    ``max_item_bytes`` bounds one blob: what is larger is cut there (a
    ``resourceRead`` answer must fit one message), and the cut is said in
    the text (:meth:`put_text`).
    """

    def __init__(self, *, max_item_bytes: int) -> None:
        self.max_item_bytes = max_item_bytes
        self._items: dict[str, StoredContent] = {}
        self._bytes = 0
        self._owners: dict[str, set[str]] = {}
        """uri -> the channels whose state references it (content put with an owner)."""
        self._owned: dict[str, set[str]] = {}
        """channel -> the uris it references."""
        self.fallback: Callable[[str], StoredContent | None] | None = None
        """Where content not in memory is read from (a host's store)."""
        self.on_put: Callable[[str, StoredContent, str | None], None] | None = None
        """Told of every blob put and of the owner it was put for (a host's journal)."""
        self.on_share: Callable[[str, str], None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, uri: object) -> bool:
        return uri in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def get(self, uri: str) -> StoredContent | None:
        item = self._items.get(uri)
        if item is None and self.fallback is not None and uri.startswith(CONTENT_SCHEME):
            item = self.fallback(uri)
        return item

    def put(self, data: bytes, content_type: str, *, owner: str | None = None) -> t.ContentRef:
        """Store ``data`` (cut to ``max_item_bytes``); its reference.

        ``owner``: the channel whose state will reference it; content is
        forgotten when its last owner is :meth:`released <release>` (content
        put without one is kept for the store's life).
        """
        data = data[: self.max_item_bytes]
        uri = f"{CONTENT_SCHEME}/{hashlib.sha256(data).hexdigest()}"
        if uri not in self._items:
            self._items[uri] = StoredContent(data=data, content_type=content_type)
            self._bytes += len(data)
            if owner is not None:
                self._owners[uri] = set()
        if owner is not None and uri in self._owners:
            self._owners[uri].add(owner)
            self._owned.setdefault(owner, set()).add(uri)
        if self.on_put is not None:
            self.on_put(uri, self._items[uri], owner)
        return t.ContentRef(uri=uri, size_hint=len(data), content_type=content_type)

    def put_text(self, text: str, content_type: str = "text/plain", *,
                 owner: str | None = None) -> t.ContentRef:
        """Store ``text`` as UTF-8; a text over the item limit is cut (at a character)
        and ends with a line saying how much was left out."""
        data = text.encode("utf-8")
        if len(data) > self.max_item_bytes:
            note = f"\n[... {len(data) - self.max_item_bytes} more bytes not kept]"
            room = self.max_item_bytes - len(note.encode("utf-8"))
            data = data[:room].decode("utf-8", "ignore").encode("utf-8") + note.encode("utf-8")
        return self.put(data, content_type, owner=owner)

    def share(self, source: str, channel: str) -> None:
        """``channel`` references what ``source`` does (a fork copies its turns)."""
        for uri in tuple(self._owned.get(source, ())):
            self._owners[uri].add(channel)
            self._owned.setdefault(channel, set()).add(uri)
        if self.on_share is not None:
            self.on_share(source, channel)

    def release(self, channel: str) -> None:
        """``channel`` is gone: forget the content no other channel references."""
        for uri in self._owned.pop(channel, ()):
            owners = self._owners.get(uri)
            if owners is None:
                continue
            owners.discard(channel)
            if not owners:
                del self._owners[uri]
                self.forget(uri)

    def owners(self, uri: str) -> tuple[str, ...]:
        """The channels known in this run to reference ``uri`` (content put with an owner)."""
        return tuple(self._owners.get(uri, ()))

    def forget(self, uri: str) -> None:
        item = self._items.pop(uri, None)
        if item is not None:
            self._bytes -= len(item.data)

    def read(self, uri: str, encoding: str | None) -> t.ResourceReadResult | None:
        """The ``resourceRead`` answer for ``uri`` (``None``: not stored here).

        Text is sent as UTF-8 unless ``base64`` is asked for; other bytes
        always as base64 (the spec's rule for binary content).
        """
        item = self.get(uri)
        if item is None:
            return None
        if item.is_text and encoding != t.ContentEncoding.BASE64:
            try:
                text = item.data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                return t.ResourceReadResult(data=text, encoding=t.ContentEncoding.UTF_8,
                                            content_type=item.content_type)
        return t.ResourceReadResult(data=base64.b64encode(item.data).decode("ascii"),
                                    encoding=t.ContentEncoding.BASE64,
                                    content_type=item.content_type)


def _fold(block: t.ToolResultContent, store: ContentStore, limit: int,
          owner: str | None) -> t.ToolResultContent:
    if isinstance(block, t.ToolResultTextContent) and len(block.text) > limit // 4 and (
        len(block.text.encode("utf-8")) > limit
    ):
        ref = store.put_text(block.text, owner=owner)
    elif isinstance(block, t.ToolResultEmbeddedResourceContent) and len(block.data) > limit:
        try:
            raw = base64.b64decode(block.data, validate=True)
        except ValueError:
            raw = block.data.encode("utf-8")
        ref = store.put(raw, block.content_type, owner=owner)
    else:
        return block
    return t.ToolResultResourceContent(uri=ref.uri, size_hint=ref.size_hint,
                                       content_type=ref.content_type)


def _folded(
    blocks: tuple[t.ToolResultContent, ...], store: ContentStore, limit: int, owner: str | None
) -> tuple[t.ToolResultContent, ...]:
    folded = tuple(_fold(block, store, limit, owner) for block in blocks)
    return blocks if all(a is b for a, b in zip(folded, blocks, strict=True)) else folded


def by_reference(
    action: t.StateAction, store: ContentStore, limit: int, owner: str | None = None
) -> t.StateAction:
    """``action`` with every tool-result block over ``limit`` bytes stored in ``store``
    and replaced by a ``ToolResultResourceContent`` (a tool input by a
    ``ContentRef``); ``action`` itself if none is."""
    if isinstance(action, t.ChatToolCallCompleteAction) and action.result.content:
        content = _folded(action.result.content, store, limit, owner)
        if content is not action.result.content:
            return evolve(action, result=evolve(action.result, content=content))
    elif isinstance(action, t.ChatToolCallReadyAction) and isinstance(action.tool_input, str) and (
        len(action.tool_input) > limit // 4 and len(action.tool_input.encode("utf-8")) > limit
    ):
        return evolve(action, tool_input=store.put_text(action.tool_input, owner=owner))
    elif isinstance(action, t.ChatToolCallContentChangedAction):
        content = _folded(action.content, store, limit, owner)
        if content is not action.content:
            return evolve(action, content=content)
    return action
