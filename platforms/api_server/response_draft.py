"""A response of ``/v1/responses`` as its turn happens: the output items so far and the stream events they make.

:class:`ResponseDraft` takes the turn's events in order (text deltas, tool calls, the outcome) and returns the
server-sent events each one makes, numbered from 0; a request that does not stream uses the same draft and keeps
only :meth:`ResponseDraft.response`, so both answers hold the same items. A run of one of the gateway's own tools
becomes an ``mcp_call`` item (as OpenAI lists its hosted MCP tools' runs: added with the arguments as it starts,
done with its result), never a ``function_call``, which a client would take for a call to run itself; text becomes a
``message`` item, closed when a tool call comes between (the model spoke before calling a tool) or the turn ends;
the calls of the client's own tools a turn ends with become ``function_call`` items after it, and the gateway's calls
a turn paused on for approval ``mcp_approval_request`` items (answered by an ``mcp_approval_response`` input item
with ``previous_response_id``, or ``POST /v1/responses/{id}/approval``).
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from hermes_actors.messages import TokenUsage
from platforms.api_server.responses_wire import (
    ConversationRef,
    ErrorDetail,
    FunctionCallItem,
    IncompleteDetails,
    McpApprovalRequestItem,
    McpCallItem,
    MessageItem,
    OutputItem,
    OutputText,
    ResponseObject,
    ResponseUsage,
    StreamEvent,
)
from platforms.api_server.tool_wire import calls_of
from platforms.api_server.turn_call import Finished, ToolEvent
from platforms.api_server.wire import usage_of

__all__ = ["SERVER_LABEL", "ResponseDraft"]

SERVER_LABEL = "hermes"
"""The ``server_label`` of the ``mcp_call`` items of the gateway's own tool runs."""


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseDraft:
    """The response ``response_id`` being made; ``base`` holds its fields other than status, output and usage."""

    def __init__(self, base: ResponseObject, *, prompt: str) -> None:
        self.base = base
        self._prompt = prompt
        self.items: list[OutputItem] = []
        self._sequence = 0
        self._message_id: str | None = None  # the message item open now
        self._running: dict[str, int] = {}  # call id -> index of its mcp_call item, while it runs
        self._text: list[str] = []
        self.status = "in_progress"
        self._usage: ResponseUsage | None = None
        self._error: ErrorDetail | None = None
        self._incomplete: IncompleteDetails | None = None
        self.input_items: list[dict[str, Any]] = []  # the request's input, as stored for its input_items list

    @classmethod
    def start(
        cls,
        response_id: str,
        *,
        created_at: int,
        model: str,
        prompt: str,
        instructions: str | None,
        previous_response_id: str | None,
        conversation: str | None,
        store: bool,
        background: bool = False,
    ) -> ResponseDraft:
        base = ResponseObject(
            id=response_id,
            created_at=created_at,
            status="in_progress",
            model=model,
            output=[],
            instructions=instructions,
            previous_response_id=previous_response_id,
            conversation=ConversationRef(id=conversation) if conversation is not None else None,
            store=store,
            background=background,
        )
        return cls(base, prompt=prompt)

    @property
    def produced(self) -> bool:
        """Whether the turn produced anything yet (an item, or text of an open message)."""
        return bool(self.items) or bool(self._text)

    def response(self) -> ResponseObject:
        """The response as it stands: a snapshot while the turn runs, the answer once it ended."""
        output = list(self.items)
        if self._message_id is not None:
            output.append(self._message("in_progress" if self.status == "in_progress" else "incomplete"))
        return msgspec.structs.replace(
            self.base,
            status=self.status,
            output=output,
            usage=self._usage,
            error=self._error,
            incomplete_details=self._incomplete,
        )

    # -- events ---------------------------------------------------------------------------------------------------

    def _event(self, type: str, **fields: object) -> StreamEvent:
        event = StreamEvent(type=type, sequence_number=self._sequence, **fields)  # type: ignore[arg-type]
        self._sequence += 1
        return event

    def created(self) -> list[StreamEvent]:
        return [self._event("response.created", response=self.response())]

    def queue(self) -> list[StreamEvent]:
        """A background response: ``queued`` until its turn begins; ``response.created`` then ``response.queued``."""
        self.status = "queued"
        return [*self.created(), self._event("response.queued", response=self.response())]

    def begin(self) -> list[StreamEvent]:
        """The queued turn began: ``in_progress`` (nothing when it is not queued)."""
        if self.status != "queued":
            return []
        self.status = "in_progress"
        return [self._event("response.in_progress", response=self.response())]

    def cancel(self) -> list[StreamEvent]:
        """A background response cancelled (``POST /v1/responses/{id}/cancel``): ``cancelled`` with what was
        produced so far, ended by ``response.incomplete`` with ``incomplete_details.reason: cancelled``."""
        events = self._close_message("incomplete")
        self.status = "cancelled"
        self._incomplete = IncompleteDetails(reason="cancelled")
        events.append(self._event("response.incomplete", response=self.response()))
        return events

    def text(self, delta: str) -> list[StreamEvent]:
        """A piece of the reply's text: opens a message item first if none is open."""
        events = self._open_message()
        self._text.append(delta)
        events.append(self._text_event("response.output_text.delta", delta=delta, logprobs=[]))
        return events

    def tool(self, event: ToolEvent) -> list[StreamEvent]:
        """A run of one of the gateway's tools: its ``mcp_call`` item is added as it starts (``running``, with the
        arguments) and done with its result (``completed``)."""
        events = self._close_message("completed")
        index = self._running.pop(event.call_id, None)
        if index is None:  # it starts now (or its start was not reported)
            index = len(self.items)
            arguments = event.detail if event.status == "running" else ""
            item = McpCallItem(
                id=_item_id("mcp"),
                server_label=SERVER_LABEL,
                name=event.name,
                arguments=arguments,
                status="in_progress",
            )
            self.items.append(item)
            events.append(self._event("response.output_item.added", output_index=index, item=item))
            if event.status == "running":
                self._running[event.call_id] = index
                return events
        started = self.items[index]
        assert isinstance(started, McpCallItem)
        done = msgspec.structs.replace(started, output=event.detail, status="completed")
        self.items[index] = done
        events.append(self._event("response.output_item.done", output_index=index, item=done))
        return events

    def finish(self, finished: Finished) -> list[StreamEvent]:
        """The turn's outcome: the reply's rest (when the agent did not stream all of it), the message closed, then
        ``response.completed``, or ``response.failed`` with the error."""
        if finished.reply is not None:
            calls = calls_of(finished.tool_calls)
            events = self._complete_text(finished.reply) if finished.reply or not (calls or finished.approval) else []
            events += self._close_message("completed")
            items: list[OutputItem] = [
                FunctionCallItem(
                    id=_item_id("fc"), call_id=call.id, name=call.function.name, arguments=call.function.arguments
                )
                for call in calls  # the client's tools: its to run
            ]
            if finished.approval is not None:  # the gateway's calls waiting for a person
                items += [
                    McpApprovalRequestItem(
                        id=f"mcpr_{finished.approval.id}_{n}",
                        server_label=SERVER_LABEL,
                        name=c.name,
                        arguments=c.arguments,
                    )
                    for n, c in enumerate(finished.approval.calls)
                ]
            for item in items:
                self.items.append(item)
                events.append(self._event("response.output_item.added", output_index=len(self.items) - 1, item=item))
                events.append(self._event("response.output_item.done", output_index=len(self.items) - 1, item=item))
            self.status = "completed"
            self._usage = _usage(self._prompt, finished.reply, finished.usage)
            events.append(self._event("response.completed", response=self.response()))
            return events
        events = self._close_message("incomplete")
        self.status = "failed"
        code = finished.failure_code or "server_error"
        self._error = ErrorDetail(code=code, message=finished.failure or "the turn ended without a reply")
        events.append(self._event("response.failed", response=self.response()))
        return events

    def abandon(self, reason: str) -> list[StreamEvent]:
        """The response ends without its answer (``reason``: stopped, client_disconnected, timeout,
        server_stopping): it is ``incomplete`` with what was produced so far."""
        events = self._close_message("incomplete")
        self.status = "incomplete"
        self._incomplete = IncompleteDetails(reason=reason)
        events.append(self._event("response.incomplete", response=self.response()))
        return events

    # -- the message item ---------------------------------------------------------------------------------------------

    def _message(self, status: str) -> MessageItem:
        assert self._message_id is not None
        return MessageItem(id=self._message_id, status=status, content=[OutputText(text="".join(self._text))])

    def _text_event(self, type: str, **fields: object) -> StreamEvent:
        return self._event(type, item_id=self._message_id, output_index=len(self.items), content_index=0, **fields)

    def _open_message(self) -> list[StreamEvent]:
        if self._message_id is not None:
            return []
        self._message_id = _item_id("msg")
        item = MessageItem(id=self._message_id, status="in_progress", content=[])
        return [
            self._event("response.output_item.added", output_index=len(self.items), item=item),
            self._text_event("response.content_part.added", part=OutputText(text="")),
        ]

    def _complete_text(self, reply: str) -> list[StreamEvent]:
        """Deltas for the part of ``reply`` the agent did not stream (all of it when it streamed none)."""
        streamed = "".join(self._text)
        if streamed == reply:
            return self._open_message() if not reply else []
        if reply.startswith(streamed):
            return self.text(reply[len(streamed) :])
        events = self._open_message()  # what was streamed is not the reply's start: the stored reply is the answer
        self._text = [reply]
        return events

    def _close_message(self, status: str) -> list[StreamEvent]:
        if self._message_id is None:
            return []
        text = "".join(self._text)
        item = self._message(status)
        events = [
            self._text_event("response.output_text.done", text=text, logprobs=[]),
            self._text_event("response.content_part.done", part=OutputText(text=text)),
            self._event("response.output_item.done", output_index=len(self.items), item=item),
        ]
        self.items.append(item)
        self._message_id = None
        self._text = []
        return events


def _usage(prompt: str, reply: str, usage: TokenUsage | None) -> ResponseUsage:
    counted = usage_of(prompt, reply, usage)
    return ResponseUsage(
        input_tokens=counted.prompt_tokens, output_tokens=counted.completion_tokens, total_tokens=counted.total_tokens
    )
