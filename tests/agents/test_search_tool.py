from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.base import EchoAgent, TurnInput
from hermes_actors.agents.tools import SESSION_SEARCH, Tool, session_search_tool
from hermes_actors.runtime.gateway import AcceptResult
from hermes_actors.store import NewMessage, Role, Store
from hermes_actors.testing import open_fake_gateway


@pytest.fixture
def seeded(store: Store) -> tuple[str, str]:
    """Two sessions: one that talked about kubernetes, and the caller's own (which mentions it too)."""
    earlier = store.create_session("telegram", title="cluster work").id
    store.append_messages(earlier, [NewMessage(role=Role.USER, content="our kubernetes cluster is down")])
    current = store.create_session("telegram").id
    store.append_messages(current, [NewMessage(role=Role.USER, content="kubernetes again?")])
    return earlier, current


def reader(store: Store) -> Callable[[], AbstractContextManager[Store]]:
    @contextmanager
    def read() -> Iterator[Store]:
        yield store

    return read


def run(tool: Tool, **arguments: Any) -> Any:
    return json.loads(tool.run(arguments))


def test_the_tool_searches_other_sessions_and_leaves_out_the_callers_own(store: Store, seeded: tuple[str, str]) -> None:
    earlier, current = seeded
    tool = session_search_tool(reader(store), current)
    answer = run(tool, query="kubernetes")
    assert answer["shape"] == "discovery"
    assert [hit["session_id"] for hit in answer["hits"]] == [earlier]
    assert ">>>kubernetes<<<" in answer["hits"][0]["snippet"]


def test_the_tool_reads_scrolls_and_browses(store: Store, seeded: tuple[str, str]) -> None:
    earlier, current = seeded
    tool = session_search_tool(reader(store), current)
    read = run(tool, session_id=earlier)
    assert read["shape"] == "read"
    assert [m["content"] for m in read["messages"]] == ["our kubernetes cluster is down"]
    message_id = read["messages"][0]["id"]
    scroll = run(tool, session_id=earlier, around_message_id=message_id, window=2)
    assert scroll["messages"][0]["anchor"] is True
    assert [s["session_id"] for s in run(tool)["sessions"]] == [earlier]
    assert run(tool, query=None, limit=None, sort=None)["shape"] == "browse"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"query": 7}, "Expected `str | null`, got `int` - at `$.query`"),
        ({"limit": "many"}, "Expected `int | null`, got `str` - at `$.limit`"),
        ({"sort": "sideways"}, "Invalid enum value 'sideways' - at `$.sort`"),
        ({"role_filter": 3}, "Expected `str | array | null`, got `int` - at `$.role_filter`"),
        ({"current_session_id": "x"}, "Object contains unknown field `current_session_id`"),
    ],
)
def test_bad_arguments_come_back_as_an_error_the_model_can_read(
    store: Store, seeded: tuple[str, str], arguments: dict[str, Any], problem: str
) -> None:
    tool = session_search_tool(reader(store), seeded[1])
    answer = json.loads(tool.run(arguments))
    assert answer == {"error": f"bad arguments for session_search: {problem}; see the parameter schema"}


def test_role_filter_may_be_the_comma_separated_string_the_reference_tool_takes(
    store: Store, seeded: tuple[str, str]
) -> None:
    tool = session_search_tool(reader(store), seeded[1])
    as_string = run(tool, query="kubernetes", role_filter="user,assistant,tool")
    as_list = run(tool, query="kubernetes", role_filter=["user", "assistant", "tool"])
    assert "error" not in as_string
    assert as_string == as_list


def test_a_malformed_query_comes_back_as_the_search_error_envelope(store: Store, seeded: tuple[str, str]) -> None:
    answer = run(session_search_tool(reader(store), seeded[1]), query='"unbalanced')
    assert answer["error"].startswith("the query is not valid search syntax")
    assert answer["suggestion"] == '"""unbalanced"'


def test_a_failing_store_becomes_an_error_result_not_an_exception(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> AbstractContextManager[Store]:
        raise TimeoutError("every reader is busy")

    answer = run(session_search_tool(broken, "s1"), query="x")
    assert answer == {
        "error": "session_search failed (TimeoutError: every reader is busy); try again or change the arguments"
    }
    assert "tool session_search failed" in caplog.text


def test_the_tool_describes_itself_as_an_openai_function(store: Store) -> None:
    spec = session_search_tool(reader(store), "s1").openai_spec()
    assert spec["type"] == "function"
    function = spec["function"]
    assert function["name"] == SESSION_SEARCH
    assert function["description"]
    properties = function["parameters"]["properties"]
    assert set(properties) == {
        "query",
        "session_id",
        "around_message_id",
        "window",
        "role_filter",
        "sort",
        "limit",
        "source",
    }
    assert properties["limit"]["maximum"] == 10
    assert function["parameters"]["additionalProperties"] is False


def test_the_echo_agent_says_so_when_a_turn_offers_no_search_tool() -> None:
    turn = TurnInput(session_id="s1", history=(), user_text="search: docker")
    reply = EchoAgent().run_turn(turn, timeout_s=1)
    assert [m.role for m in reply.messages] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert reply.text == "echo: search failed: this turn offers no session_search tool"


def test_an_echo_search_turn_through_a_gateway_finds_another_session_and_stores_the_call(db_path: Path) -> None:
    with open_fake_gateway(db_path, auto_titles=False) as (gateway, fake):
        fake.push("the deploy password rotates on fridays", chat_id="ops")
        assert fake.pop().text == "echo: the deploy password rotates on fridays"
        assert gateway.wait_idle()
        accepted = fake.push("search: password", chat_id="helpdesk")
        reply = fake.pop()
        assert gateway.wait_idle()
        assert isinstance(accepted, AcceptResult)
        searcher = gateway.session_for(accepted.routing_key)
        assert searcher is not None
        with gateway.read() as store:
            (found,) = [s for s in store.list_sessions() if s.id != searcher]
            transcript = store.load_transcript(searcher)
    assert reply.text == f"echo: search found 1: {found.id}: the deploy >>>password<<< rotates on fridays"
    assert [(m.role, m.tool_name) for m in transcript] == [
        ("user", None),
        ("assistant", None),
        ("tool", SESSION_SEARCH),
        ("assistant", None),
    ]
    call = json.loads(transcript[1].tool_calls or "[]")
    assert call[0]["function"] == {"name": SESSION_SEARCH, "arguments": json.dumps({"query": "password"})}
    result = json.loads(transcript[2].content or "{}")
    assert transcript[2].tool_call_id == call[0]["id"]
    assert [hit["session_id"] for hit in result["hits"]] == [found.id]
    assert transcript[3].content == reply.text


def test_an_echo_search_does_not_find_its_own_session(db_path: Path) -> None:
    with open_fake_gateway(db_path, auto_titles=False) as (gateway, fake):
        fake.push("remember the word zeppelin")
        fake.pop()
        fake.push("search: zeppelin")
        assert fake.pop().text == "echo: search found nothing"
        assert gateway.wait_idle()


def test_an_empty_echo_search_lists_the_recent_sessions(store: Store, seeded: tuple[str, str]) -> None:
    earlier, current = seeded
    turn = TurnInput(
        session_id=current, history=(), user_text="search:", tools=(session_search_tool(reader(store), current),)
    )
    assert EchoAgent().run_turn(turn, timeout_s=1).text == f"echo: recent sessions: {earlier}"
