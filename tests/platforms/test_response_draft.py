"""A response's items and stream events as its turn happens (:class:`ResponseDraft`), without a server."""

from __future__ import annotations

from hermes_actors.messages import TokenUsage
from platforms.api_server.response_draft import ResponseDraft
from platforms.api_server.responses_wire import FunctionCallItem, McpCallItem, MessageItem
from platforms.api_server.turn_call import Finished, ToolEvent


def _draft() -> ResponseDraft:
    return ResponseDraft.start(
        "resp_1",
        created_at=1,
        model="m",
        prompt="question",
        instructions=None,
        previous_response_id=None,
        conversation=None,
        store=True,
    )


def _done(reply: str | None, **fields: object) -> Finished:
    return Finished(session_id="s1", reply=reply, **fields)  # type: ignore[arg-type]


def test_text_before_a_tool_call_is_its_own_message_and_the_reply_follows_the_tool_items() -> None:
    draft = _draft()
    events = [*draft.created(), *draft.text("Let me look. ")]
    events += draft.tool(ToolEvent("lookup", "c1", "running", '{"q": "x"}'))
    events += draft.tool(ToolEvent("lookup", "c1", "completed", "found"))
    events += draft.text("It is x.")
    events += draft.finish(_done("It is x.", usage=TokenUsage(input_tokens=7, output_tokens=3)))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    response = draft.response()
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["message", "mcp_call", "message"]
    run = response.output[1]
    assert isinstance(run, McpCallItem)
    assert (run.name, run.arguments, run.output, run.status) == ("lookup", '{"q": "x"}', "found", "completed")
    last = response.output[-1]
    assert isinstance(last, MessageItem)
    assert last.content[0].text == "It is x."
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (7, 3, 10)
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == [0, 1, 2]
    done = [e.output_index for e in events if e.type == "response.output_item.done"]
    assert done == [0, 1, 2]


def test_a_reply_the_agent_did_not_stream_is_sent_as_one_delta() -> None:
    draft = _draft()
    events = draft.finish(_done("all at once"))
    assert [e.type for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2].delta == "all at once"
    assert draft.response().usage is not None  # estimated from the text when the turn has no usage


def test_a_partly_streamed_reply_gets_only_its_rest() -> None:
    draft = _draft()
    draft.text("echo: ")
    events = draft.finish(_done("echo: hello"))
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["hello"]


def test_a_failed_turn_keeps_its_partial_text_as_an_incomplete_message() -> None:
    draft = _draft()
    draft.text("half an ans")
    events = draft.finish(_done(None, failure="the model went away", failure_code="agent_incomplete"))
    assert events[-1].type == "response.failed"
    response = draft.response()
    assert response.status == "failed"
    assert response.error is not None
    assert (response.error.code, response.error.message) == ("agent_incomplete", "the model went away")
    (message,) = response.output
    assert isinstance(message, MessageItem)
    assert (message.status, message.content[0].text) == ("incomplete", "half an ans")


def test_an_abandoned_response_is_incomplete_with_its_reason() -> None:
    draft = _draft()
    draft.text("so far")
    assert draft.produced
    events = draft.abandon("client_disconnected")
    assert events[-1].type == "response.incomplete"
    response = draft.response()
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "client_disconnected"
    assert [item.status for item in response.output] == ["incomplete"]


def test_a_snapshot_while_the_turn_runs_shows_the_open_message_in_progress() -> None:
    draft = _draft()
    assert not draft.produced
    draft.text("typing")
    (message,) = draft.response().output
    assert isinstance(message, MessageItem)
    assert (message.status, message.content[0].text) == ("in_progress", "typing")


def test_a_turn_ending_with_client_calls_lists_them_as_function_calls_without_an_empty_message() -> None:
    draft = _draft()
    calls = '[{"id": "c9", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]'
    events = draft.tool(ToolEvent("session_search", "s1", "running", '{"query": "q"}'))
    events += draft.tool(ToolEvent("session_search", "s1", "completed", "[]"))
    events += draft.finish(_done("", tool_calls=calls))
    assert [e.type for e in events] == [
        "response.output_item.added",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    response = draft.response()
    assert [item.type for item in response.output] == ["mcp_call", "function_call"]
    call = response.output[1]
    assert isinstance(call, FunctionCallItem)
    assert (call.call_id, call.name, call.arguments, call.status) == ("c9", "get_weather", "{}", "completed")
