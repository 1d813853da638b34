"""Channel URIs: the kind of channel a URI names, by the spec's grammar."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.channels import (
    ChannelKind,
    annotations_channel,
    channel_kind,
    session_of_annotations,
)
from agenthost_protocol.errors import LocalProtocolError

ids = st.text(st.characters(exclude_characters="/", exclude_categories=["Cs"]), min_size=1)


@pytest.mark.parametrize(
    ("uri", "kind"),
    [
        ("ahp-root://", ChannelKind.ROOT),
        ("ahp-session:/s1", ChannelKind.SESSION),
        ("ahp-session:/s1/annotations", ChannelKind.ANNOTATIONS),
        # A session whose id is "annotations" is a session (the old suffix test said otherwise).
        ("ahp-session:/annotations", ChannelKind.SESSION),
        ("ahp-session://annotations", ChannelKind.SESSION),
        ("ahp-session:/s1/annotations/", ChannelKind.SESSION),
        ("ahp-session:/a/b/annotations", ChannelKind.SESSION),
        ("ahp-chat:/c", ChannelKind.CHAT),
        ("ahp-terminal:/t", ChannelKind.TERMINAL),
        ("ahp-changeset:/x", ChannelKind.CHANGESET),
        ("ahp-resource-watch:/w", ChannelKind.RESOURCE_WATCH),
        ("ahp-otlp://logs", ChannelKind.OTLP),
        ("mcp://server", ChannelKind.MCP),
        ("copilot:/test-session", None),
    ],
)
def test_channel_kind(uri: str, kind: ChannelKind | None) -> None:
    assert channel_kind(uri) is kind


@given(ids)
def test_session_and_annotations_uris_by_grammar(session_id: str) -> None:
    session = f"ahp-session:/{session_id}"
    assert channel_kind(session) is ChannelKind.SESSION
    annotations = annotations_channel(session)
    assert annotations == f"{session}/annotations"
    assert channel_kind(annotations) is ChannelKind.ANNOTATIONS
    assert session_of_annotations(annotations) == session
    assert session_of_annotations(session) is None


@pytest.mark.parametrize("bad", ["ahp-session:/", "ahp-session:/a/b", "ahp-chat:/c", ""])
def test_annotations_channel_rejects_what_is_not_a_session(bad: str) -> None:
    with pytest.raises(LocalProtocolError):
        annotations_channel(bad)


def test_snapshot_of_a_session_called_annotations_decodes_as_a_session() -> None:
    state = {"provider": "p", "title": "t", "status": 1, "lifecycle": "ready",
             "activeClients": [], "chats": []}
    snapshot = wire.structure(
        {"resource": "ahp-session:/annotations", "fromSeq": 0, "state": state}, t.Snapshot
    )
    assert isinstance(snapshot.state, t.SessionState)
