"""Regenerate and edit in a chat frontend: a stateless client resends its conversation with another tail, and the
stored session becomes that conversation (its replaced tail cut, the client's messages stored in its place), while
the model sees exactly the client's history and is asked once per user action.

The official ``openai`` client against a real gateway whose agent calls a scripted model on 127.0.0.1.
"""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionMessageParam

from hermes_actors.runtime.operator import GatewayOperator
from platforms.api_server import SESSION_HEADER
from tests.agents.chat_server import ChatServer, Scripted, completion, tool_call
from tests.platforms import test_api_contract
from tests.platforms.test_api_contract import Serve, assistant, user
from tests.platforms.test_api_server import Running

model = test_api_contract.model  # a scripted OpenAI-compatible model on 127.0.0.1
serve = test_api_contract.serve  # a gateway whose agent calls it, behind an API server

SYSTEM: ChatCompletionMessageParam = {"role": "system", "content": "You are terse."}


def _numbered(model: ChatServer) -> None:
    """Each model call answers "answer N to <newest user text>", N counting the calls."""

    def answer(body: Any) -> Scripted:
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return completion(f"answer {len(model.completion_bodies)} to {users[-1]}")

    model.respond_with(answer)


def _send(running: Running, messages: list[ChatCompletionMessageParam]) -> tuple[str, str]:
    """One request as a frontend sends it; the answer's text and the session it was stored in."""
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[SYSTEM, *messages])
    text = raw.parse().choices[0].message.content
    assert text is not None
    return text, raw.headers[SESSION_HEADER]


def _shown(running: Running, session_id: str) -> list[tuple[str, str | None]]:
    """The session's user messages and answers, as the transcript holds them."""
    return [(role, content) for role, content in running.transcript(session_id) if role in ("user", "assistant")]


def _seen(model: ChatServer) -> list[tuple[str, str]]:
    """What the newest model call was sent, without the system message."""
    return [(m["role"], m["content"]) for m in model.completion_bodies[-1]["messages"] if m["role"] != "system"]


def test_a_regenerated_answer_replaces_the_stored_one_in_the_same_session(serve: Serve, model: ChatServer) -> None:
    running = serve()
    _numbered(model)
    first, session_id = _send(running, [user("Hello")])
    second, _ = _send(running, [user("Hello"), assistant(first), user("Name a colour")])
    again, same = _send(running, [user("Hello"), assistant(first), user("Name a colour")])  # "regenerate"
    assert (first, second, again) == ("answer 1 to Hello", "answer 2 to Name a colour", "answer 3 to Name a colour")
    assert same == session_id
    assert len(model.completion_bodies) == 3  # one model call per user action
    assert _seen(model) == [("user", "Hello"), ("assistant", first), ("user", "Name a colour")]
    assert _shown(running, session_id) == [
        ("user", "Hello"),
        ("assistant", first),
        ("user", "Name a colour"),
        ("assistant", again),  # the replaced answer is gone, and its question is stored once
    ]


def test_regenerating_the_first_answer_keeps_one_exchange(serve: Serve, model: ChatServer) -> None:
    running = serve()
    _numbered(model)
    _, session_id = _send(running, [user("Hello")])
    again, same = _send(running, [user("Hello")])
    assert same == session_id
    assert _shown(running, session_id) == [("user", "Hello"), ("assistant", again)]
    assert len(model.completion_bodies) == 2


def test_an_edited_message_replaces_the_tail_from_it(serve: Serve, model: ChatServer) -> None:
    running = serve()
    _numbered(model)
    a1, session_id = _send(running, [user("Hello")])
    a2, _ = _send(running, [user("Hello"), assistant(a1), user("Name a colour")])
    a3, _ = _send(running, [user("Hello"), assistant(a1), user("Name a colour"), assistant(a2), user("And a fruit")])
    # The user edits "Name a colour" (two exchanges back): the frontend drops everything after it.
    edited, same = _send(running, [user("Hello"), assistant(a1), user("Name a tree")])
    assert same == session_id
    assert len(model.completion_bodies) == 4
    assert _seen(model) == [("user", "Hello"), ("assistant", a1), ("user", "Name a tree")]
    assert _shown(running, session_id) == [
        ("user", "Hello"),
        ("assistant", a1),
        ("user", "Name a tree"),
        ("assistant", edited),
    ]
    assert a3 not in [content for _, content in running.transcript(session_id)]
    with running.gateway.read() as store:
        record = store.get_session(session_id)
    assert record.message_count == 4  # the counters follow the cut


def test_an_edited_answer_is_stored_as_the_client_shows_it(serve: Serve, model: ChatServer) -> None:
    running = serve()
    _numbered(model)
    a1, session_id = _send(running, [user("Hello")])
    _send(running, [user("Hello"), assistant("Hi there (edited)"), user("Go on")])
    assert len(model.completion_bodies) == 2
    assert _seen(model) == [("user", "Hello"), ("assistant", "Hi there (edited)"), ("user", "Go on")]
    assert _shown(running, session_id) == [
        ("user", "Hello"),
        ("assistant", "Hi there (edited)"),
        ("user", "Go on"),
        ("assistant", "answer 2 to Go on"),
    ]
    assert a1 not in [content for _, content in running.transcript(session_id)]


def test_the_console_reads_the_conversation_the_user_sees(serve: Serve, model: ChatServer) -> None:
    running = serve()
    _numbered(model)
    a1, session_id = _send(running, [user("Hello")])
    _send(running, [user("Hello"), assistant(a1), user("Name a colour")])
    again, _ = _send(running, [user("Hello"), assistant(a1), user("Name a colour")])
    view = GatewayOperator(running.gateway, None).transcript(session_id)  # what the web console shows
    shown = [(m.role, m.content) for segment in view.segments for m in segment.messages]
    assert shown == [("user", "Hello"), ("assistant", a1), ("user", "Name a colour"), ("assistant", again)]


def test_the_gateways_own_tool_calls_stay_with_the_answer_they_led_to(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(
        completion(None, tool_calls=[tool_call("c1", "session_search", {"query": "colours"})]),
        completion("Blue, as before"),
        completion("Green"),
        completion("Red"),
    )
    first, session_id = _send(running, [user("Which colour?")])
    _send(running, [user("Which colour?"), assistant(first), user("Another")])
    _send(running, [user("Which colour?"), assistant(first), user("Another")])  # regenerate "Green"
    roles = [role for role, _ in running.transcript(session_id)]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert _shown(running, session_id)[-2:] == [("user", "Another"), ("assistant", "Red")]
    assert len(model.completion_bodies) == 4


def test_a_continued_session_is_not_rewound_by_the_body(serve: Serve, model: ChatServer) -> None:
    running = serve()
    _numbered(model)
    a1, session_id = _send(running, [user("Hello")])
    with running.client() as client:
        client.chat.completions.create(
            model="m", messages=[user("What now?")], extra_headers={SESSION_HEADER: session_id}
        )
    assert _shown(running, session_id) == [
        ("user", "Hello"),
        ("assistant", a1),
        ("user", "What now?"),
        ("assistant", "answer 2 to What now?"),
    ]
