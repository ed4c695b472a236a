"""``hermesd`` with timestamps on a streamed turn's path to its first token, for ``bench/api.py --trace``.

Run as ``python bench/api_trace.py --home DIR`` (the arguments are hermesd's): it wraps a few functions of the API
server, the runtime and the OpenAI agent so that each notes, per request, when it was first reached
(``perf_counter``: ``CLOCK_MONOTONIC``, the same clock in the bench's processes), keyed by the user's text, then
runs hermesd's ``main``. At exit it writes ``{text: {step: time}}`` as JSON to the file named by
``$HERMES_BENCH_TRACE``. The wrappers reach into private functions: when one is renamed this script fails at
start, naming it; the bench runs without ``--trace`` do not depend on it. Not a test.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hermes_actors.agents.openai_chat as openai_chat
import hermes_actors.agents.openai_endpoint as openai_endpoint
import hermes_actors.runtime.gateway as gateway
import hermes_actors.runtime.turns as turns
import platforms.api_server.chat as chat
import platforms.api_server.service as service
import platforms.api_server.turn_call as turn_call

TRACE_ENV = "HERMES_BENCH_TRACE"

# The steps in the order a streamed turn reaches them, with what each stands for (bench/api.py prints them).
STEPS = {
    "decoded": "the handler has the request's body decoded",
    "submit": "Gateway.submit called (the InboundMessage built, the turn watched)",
    "committed": "the inbox row committed (on the store writer's thread)",
    "handler_resumed": "the handler runs again on the event loop, the message accepted",
    "turn_started": "the session actor starts the turn",
    "agent_called": "OpenAIAgent.run_turn on an agent pool thread",
    "model_called": "ChatEndpoint.stream called (the messages built)",
    "first_text": "the agent has the model's first delta (the openai SDK read and parsed it)",
    "loop_delta": "the event loop has the first TextDelta",
    "stream_opening": "the session id for the headers known (session_hint), the response opening",
    "stream_opened": "the headers and the role chunk written",
}

_marks: dict[str, dict[str, float]] = {}
_lock = threading.Lock()


def mark(key: str, step: str) -> None:
    """Note that the request whose user text is ``key`` reached ``step`` now (the first time only)."""
    now = time.perf_counter()
    with _lock:
        _marks.setdefault(key, {}).setdefault(step, now)


def _dump() -> None:
    with _lock:
        Path(os.environ[TRACE_ENV]).write_text(json.dumps(_marks), encoding="utf-8")


def _wrap(owner: object, name: str, make: Callable[[Any], Any]) -> None:
    original = getattr(owner, name, None)
    if original is None:
        raise SystemExit(f"bench/api_trace.py: {owner!r} has no {name} any more; update the tracer")
    setattr(owner, name, make(original))


def install() -> None:
    """Wrap the functions on the first token's path."""

    def decode_chat(original: Any) -> Any:
        def wrapper(body: bytes) -> Any:
            decoded = original(body)
            mark(str(decoded.messages[-1].content), "decoded")
            return decoded

        return wrapper

    def submit(original: Any) -> Any:
        async def wrapper(self: Any, inbound: Any, **kwargs: Any) -> Any:
            result = await original(self, inbound, **kwargs)
            mark(inbound.text, "handler_resumed")
            return result

        return wrapper

    def gateway_submit(original: Any) -> Any:
        def wrapper(self: Any, inbound: Any) -> Any:
            mark(inbound.text, "submit")
            future = original(self, inbound)
            future.add_done_callback(lambda _: mark(inbound.text, "committed"))
            return future

        return wrapper

    def turn_run(original: Any) -> Any:
        def wrapper(self: Any, request: Any) -> Any:
            if request.deliveries:
                mark(request.deliveries[0].message.text, "turn_started")
            return original(self, request)

        return wrapper

    def run_turn(original: Any) -> Any:
        def wrapper(self: Any, turn: Any, *, timeout_s: float) -> Any:
            mark(turn.user_text, "agent_called")
            return original(self, turn, timeout_s=timeout_s)

        return wrapper

    def stream(original: Any) -> Any:
        def wrapper(self: Any, messages: Any, timeout_s: float, on_text: Callable[[str], None], **kwargs: Any) -> Any:
            key = str(messages[-1].get("content"))
            mark(key, "model_called")

            def text(delta: str) -> None:
                mark(key, "first_text")
                on_text(delta)

            return original(self, messages, timeout_s, text, **kwargs)

        return wrapper

    def events(original: Any) -> Any:
        async def wrapper(self: Any, tick_s: float) -> AsyncIterator[Any]:
            async for event in original(self, tick_s):
                if isinstance(event, turn_call.TextDelta):
                    mark(self.inbound.text, "loop_delta")
                yield event

        return wrapper

    def open_stream(original: Any) -> Any:
        async def wrapper(self: Any, request: Any, turn: Any, extra: Any, session_id: Any) -> Any:
            mark(turn.prompt, "stream_opening")
            response = await original(self, request, turn, extra, session_id)
            mark(turn.prompt, "stream_opened")
            return response

        return wrapper

    _wrap(chat, "decode_chat", decode_chat)
    _wrap(service.ApiService, "submit", submit)
    _wrap(gateway.Gateway, "submit", gateway_submit)
    _wrap(turns.SessionTurns, "run", turn_run)
    _wrap(openai_chat.OpenAIAgent, "run_turn", run_turn)
    _wrap(openai_endpoint.ChatEndpoint, "stream", stream)
    _wrap(turn_call.TurnCall, "events", events)
    _wrap(chat.ChatCompletions, "_open_stream", open_stream)


def main() -> None:
    install()
    atexit.register(_dump)
    from hermes_actors.cli.hermesd import main as hermesd

    hermesd()


if __name__ == "__main__":
    main()
