"""``set_principal``: a session is given the platform, workspace and bot account it belongs to (an imported one, the
ones its live adapter uses), and from then on it is that principal's, to list and to resolve."""

from __future__ import annotations

import pytest

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.principal import Principal
from hermes_actors.routing import SessionSource
from hermes_actors.store import StoreInterface


def test_a_session_given_its_principal_is_that_principals(store: StoreInterface) -> None:
    record = store.create_session(SessionSource(platform="weixin", chat_id="wxid_a", user_id="wxid_a"))
    live = Principal("wechat", None, "bot-a", "wxid_a")
    assert store.list_sessions(limit=None, visible=live.sessions()) == []
    store.set_principal(record.id, source="wechat", scope_id=None, account_id="bot-a")
    stored = store.get_session(record.id)
    assert (stored.source, stored.scope_id, stored.account_id, stored.user_id) == ("wechat", None, "bot-a", "wxid_a")
    assert live.owns(stored)
    assert [r.id for r in store.list_sessions(limit=None, visible=live.sessions())] == [record.id]
    assert store.resolve_session(record.id, visible=live.sessions()).id == record.id
    store.set_principal(record.id, source="wechat", scope_id="T9", account_id=None)
    assert (store.get_session(record.id).scope_id, store.get_session(record.id).account_id) == ("T9", None)


def test_a_missing_session_cannot_be_given_a_principal(store: StoreInterface) -> None:
    with pytest.raises(SessionNotFoundError):
        store.set_principal("20990101_000000_deadbeef", source="telegram", scope_id=None, account_id="main")
