"""Contract tests of ``store.responses``: the API's stored responses, read within a scope, gone with their session."""

from __future__ import annotations

from hermes_actors.messages import ResponseRecord
from hermes_actors.store import EndReason, StoreInterface
from hermes_actors.store.prune import PruneFilter
from hermes_actors.testing import FakeClock


def _response(
    rid: str, session_id: str, *, scope: str | None = "k1", conversation: str | None = None, at: float = 1.0
) -> ResponseRecord:
    return ResponseRecord(
        id=rid,
        session_id=session_id,
        scope=scope,
        status="completed",
        body=b'{"id": "' + rid.encode() + b'"}',
        created_at=at,
        conversation=conversation,
        instructions="Be brief.",
    )


def test_a_saved_response_is_read_back_within_its_scope_only(store: StoreInterface) -> None:
    store.create_session("api_server", session_id="s1")
    saved = _response("resp_1", "s1")
    store.responses.save(saved)
    assert store.responses.get("resp_1", "k1") == saved
    assert store.responses.get("resp_1", "k2") is None
    assert store.responses.get("resp_1", None) is None
    assert store.responses.get("resp_2", "k1") is None


def test_a_response_without_a_scope_is_read_with_none(store: StoreInterface) -> None:
    store.create_session("api_server", session_id="s1")
    store.responses.save(_response("resp_1", "s1", scope=None))
    found = store.responses.get("resp_1", None)
    assert found is not None
    assert found.scope is None
    assert store.responses.get("resp_1", "k1") is None


def test_saving_again_replaces_the_snapshot(store: StoreInterface) -> None:
    store.create_session("api_server", session_id="s1")
    store.responses.save(_response("resp_1", "s1"))
    final = ResponseRecord(id="resp_1", session_id="s1", scope="k1", status="incomplete", body=b"{}", created_at=2.0)
    store.responses.save(final)
    assert store.responses.get("resp_1", "k1") == final


def test_delete_removes_a_response_of_its_scope_only(store: StoreInterface) -> None:
    store.create_session("api_server", session_id="s1")
    store.responses.save(_response("resp_1", "s1"))
    assert not store.responses.delete("resp_1", "k2")
    assert store.responses.delete("resp_1", "k1")
    assert not store.responses.delete("resp_1", "k1")
    assert store.responses.get("resp_1", "k1") is None


def test_a_conversation_leads_to_its_newest_response_in_its_scope(store: StoreInterface) -> None:
    store.create_session("api_server", session_id="s1")
    assert store.responses.latest_in("k1", "trip") is None
    store.responses.save(_response("resp_1", "s1", conversation="trip", at=1.0))
    store.responses.save(_response("resp_2", "s1", conversation="trip", at=2.0))
    store.responses.save(_response("resp_3", "s1", conversation="other", at=3.0))
    store.responses.save(_response("resp_4", "s1", scope="k2", conversation="trip", at=4.0))
    latest = store.responses.latest_in("k1", "trip")
    assert latest is not None
    assert latest.id == "resp_2"
    assert store.responses.latest_in(None, "trip") is None


def test_deleting_a_session_deletes_its_responses(store: StoreInterface) -> None:
    store.create_session("api_server", session_id="s1")
    store.create_session("api_server", session_id="s2")
    store.responses.save(_response("resp_1", "s1"))
    store.responses.save(_response("resp_2", "s2"))
    assert store.delete_session("s1")
    assert store.responses.get("resp_1", "k1") is None
    assert store.responses.get("resp_2", "k1") is not None


def test_pruning_a_session_deletes_its_responses(store: StoreInterface, clock: FakeClock) -> None:
    day = 86_400.0
    old = store.create_session("api_server", started_at=clock() - 200 * day)
    store.end_session(old.id, EndReason.USER_EXIT, at=clock() - 100 * day)
    live = store.create_session("api_server")
    store.responses.save(_response("resp_old", old.id))
    store.responses.save(_response("resp_live", live.id))
    assert store.prune_sessions(PruneFilter(older_than_days=90), now=clock()).session_ids == [old.id]
    assert store.responses.get("resp_old", "k1") is None
    assert store.responses.get("resp_live", "k1") is not None
