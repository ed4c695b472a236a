"""An :class:`~hermes_actors.agents.base.Agent` for any OpenAI-compatible chat-completions endpoint.

OpenAI itself, vLLM, llama.cpp, Ollama and the like. The turn's tools (``TurnInput.tools``: every session offers
``session_search``) are offered as function tools. When the model answers with tool calls, each is run (an unknown
tool or arguments that are not a JSON object get an error result the model can read), the results are appended
and the model is asked again, for at most :data:`MAX_TOOL_ROUNDS` rounds; the last request offers no tools, so the
model has to answer in words. Every assistant and tool message of the turn goes into the reply, in order, and the
whole turn stays within the call's ``timeout_s``. Tool calls that come back when no tools were offered are stored
on the assistant message and named in the reply text, and calls that never got a result are left out of later
requests (the API rejects them).

Messages the user sends while a turn runs (busy policy ``steer``, ``TurnInput.steering``) are taken before each
model call and sent as user messages after what the model has so far; the reply keeps them at that place.

A call of a tool that needs approval (``TurnInput.approvals``) is not run: once the round's other calls have run,
the turn ends with it (``AgentReply.approval_calls``), and the next turn continues from the decision, the runtime's
result of the approved call or the denial coming as ``TurnInput.tool_results``. A call of a client's tool in the same
round is left unanswered then.

An API client's own tools (``TurnInput.client_tools``) are offered after the turn's: a round whose calls name one of
them ends the turn once the gateway's own calls of that round have run, with those calls for the client
(``AgentReply.client_calls``); the client's results come as the next turn's ``TurnInput.tool_results``, which the
model is sent as the tool messages of its calls.

Every failure of the endpoint becomes :class:`~hermes_actors.agents.turn.AgentError` naming the endpoint, the model,
what went wrong and what to check.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, cast

try:
    import openai
    from openai.types.chat import (
        ChatCompletionMessageParam,
        ChatCompletionMessageToolCallUnionParam,
        ChatCompletionToolUnionParam,
    )
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "hermes_actors.agents.openai_chat needs the openai package; install it with: "
        "pip install 'hermes-actors[openai]'"
    ) from error

from hermes_actors.agents.openai_endpoint import ChatEndpoint
from hermes_actors.agents.openai_transcript import (
    called_tools_text,
    continued_messages,
    dump_tool_calls,
    history_messages,
    offered_specs,
    run_tool_call,
    system_text,
    user_message,
)
from hermes_actors.agents.turn import AgentError, AgentMessage, AgentReply, Memory, TurnEvents, TurnInput
from hermes_actors.store.records import MessageRecord, Role
from hermes_actors.titles import MAX_TITLE_LENGTH

__all__ = ["MAX_TOOL_ROUNDS", "SUMMARY_MAX_TOKENS", "TITLE_EXCERPT_CHARS", "OpenAIAgent"]

MAX_TOOL_ROUNDS = 5  # model answers with tool calls that a turn runs before it insists on words

_log = logging.getLogger(__name__)

_SUMMARY_INSTRUCTION = (
    "Summarise the conversation above so that a new session can continue it: the user's goals, the facts and "
    "decisions established, open questions and what was being worked on last. Plain prose, at most {words} words."
)
SUMMARY_MAX_TOKENS = 400  # the budget of summarize(); the runtime asks summarize_within with its own
_MEMORY_INSTRUCTION = (
    "List what is worth remembering about the user from the conversation above for future conversations: stable "
    "facts, preferences, ongoing projects. Answer only with a JSON array of short strings, or [] if nothing is."
)
_TITLE_INSTRUCTION = (
    "Write a short descriptive title for the conversation above: 3 to 7 words, in the language of the user, "
    "no quotes, no final punctuation. Answer with the title only."
)
TITLE_EXCERPT_CHARS = 2000  # of the first message and reply sent for a title: the gist is at the start
_TITLE_PREFIX = re.compile(r"^\s*(?:#+\s+)?(?:(?:\*\*)?title(?:\*\*)?\s*[:：]\s*)?", re.IGNORECASE)
_TITLE_QUOTES = "\"'`*_“”‘’«»「」『』"


class OpenAIAgent:
    """Runs turns, summaries and memory extraction on a chat-completions endpoint.

    ``api_key`` defaults to the environment variable ``api_key_env``, or a placeholder when that is unset.
    ``timeout_s`` and ``max_retries`` configure the client; each call's own ``timeout_s`` bounds every attempt.
    An injected ``client`` is used as given (``base_url`` then only names the endpoint in errors). Safe to call
    from several threads at once; :meth:`close` releases the connection pool. A ``vision`` model gets the images
    of a turn's attachments as ``image_url`` parts of that turn's user message (a saved file as a base64 data
    URL, else its source URL); later turns send only the text stand-in the transcript kept. ``system_prompt``
    (``agent.system_prompt``) is what sessions put first in the system message they freeze when they start.

    Token counts are the responses' ``usage``: each assistant message gets the completion tokens of the response
    that carried it, the reply the prompt and completion tokens of all the turn's calls. A response without
    ``usage`` has its share estimated at four characters a token, and the reply says its counts are estimates.
    """

    takes_steering = True  # a SteerableAgent: messages sent while a turn runs join it at the next model call

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        max_retries: int = 2,
        temperature: float | None = None,
        client: openai.OpenAI | None = None,
        vision: bool = False,
        system_prompt: str | None = None,
    ) -> None:
        if not base_url:
            raise ValueError("OpenAIAgent needs a base_url such as http://127.0.0.1:8000/v1; set agent.base_url")
        if not model:
            raise ValueError("OpenAIAgent needs a model name; set agent.model")
        self.vision = vision
        self.system_prompt = system_prompt or None  # frozen into each session's system message (sessions start)
        self._endpoint = ChatEndpoint(
            base_url=base_url,
            model=model,
            api_key=api_key,
            api_key_env=api_key_env,
            timeout_s=timeout_s,
            max_retries=max_retries,
            temperature=temperature,
            client=client,
        )

    @property
    def base_url(self) -> str:
        """The endpoint's base URL."""
        return self._endpoint.base_url

    @property
    def model(self) -> str:
        """The model asked for on every request."""
        return self._endpoint.model

    @property
    def temperature(self) -> float | None:
        """The sampling temperature sent, ``None`` for the server's default."""
        return self._endpoint.temperature

    def __repr__(self) -> str:
        return f"OpenAIAgent(base_url={self.base_url!r}, model={self.model!r})"

    def __enter__(self) -> OpenAIAgent:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the client this agent created (an injected client is left to its owner)."""
        self._endpoint.close()

    def probe(self, *, timeout_s: float) -> None:
        """A health check's cheap look at the endpoint (its model list, no completion): raises
        :class:`AgentError` when it does not answer (:meth:`ChatEndpoint.probe`)."""
        self._endpoint.probe(timeout_s)

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        """Send system prompt, memories, history and the user text; run tool calls; return the turn's messages."""
        deadline = time.monotonic() + timeout_s
        messages: list[ChatCompletionMessageParam] = []
        system = system_text(turn.system_prompt, turn.memories)
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.extend(continued_messages(turn.history, turn.tool_results))
        if turn.user_text or not turn.tool_results:  # a turn of a client's tool results continues from them alone
            messages.append(user_message(turn.user_text, turn.attachments if self.vision else ()))
        offered = [cast(ChatCompletionToolUnionParam, spec) for spec in offered_specs(turn.tools, turn.client_tools)]
        theirs = {tool.name for tool in turn.client_tools}
        produced: list[AgentMessage] = []
        input_tokens = output_tokens = 0
        estimated = False
        for round_number in range(MAX_TOOL_ROUNDS + 1):
            tools = offered if offered and round_number < MAX_TOOL_ROUNDS else None
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(
                    f"{self._endpoint.where} used up the turn's {timeout_s:g} s after {round_number} tool rounds; "
                    "raise runtime.agent_timeout_s or check why the tools are slow"
                )
            for text in turn.steering.take() if turn.steering is not None else ():
                messages.append(user_message(text, ()))
                produced.append(AgentMessage(role=Role.USER, content=text))
            content, calls, usage = self._ask(messages, timeout_s, turn.events, tools=tools, left_s=left)
            counted = usage[1] if usage is not None else None  # the message's own count: only the model's
            if usage is None:
                estimated = True
                usage = (_estimated_tokens(messages, tools), _estimated_tokens([content or "", calls or ""]))
            input_tokens += usage[0]
            output_tokens += usage[1]
            if tools is None or not calls:
                if content is None and not calls:
                    raise AgentError(
                        f"{self._endpoint.where} answered an empty message (no content, no tool calls); retry the turn"
                    )
                dumped = json.dumps(calls) if calls else None
                produced.append(
                    AgentMessage(role=Role.ASSISTANT, content=content, tool_calls=dumped, token_count=counted)
                )
                text = content if content is not None else called_tools_text(calls)
                return AgentReply(
                    messages=tuple(produced),
                    text=text,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    tokens_estimated=estimated,
                )
            produced.append(
                AgentMessage(role=Role.ASSISTANT, content=content, tool_calls=json.dumps(calls), token_count=counted)
            )
            messages.append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": cast(list[ChatCompletionMessageToolCallUnionParam], calls),
                }
            )
            for_client = [call for call in calls if _call_name(call) in theirs]
            held = [c for c in calls if c not in for_client and turn.approvals.required(_call_name(c), turn.tools)]
            for call in calls:
                if call in for_client or call in held:
                    continue  # the client runs it, or a person decides first: the turn ends below with the call
                if turn.events is not None:
                    turn.events.tool(_call_name(call), str(call.get("id") or ""), "running", _call_arguments(call))
                name, call_id, result = run_tool_call(turn.tools, call)
                if turn.events is not None:
                    turn.events.tool(name, call_id, "completed", result)
                produced.append(AgentMessage(role=Role.TOOL, content=result, tool_name=name, tool_call_id=call_id))
                messages.append({"role": "tool", "content": result, "tool_call_id": call_id})
            if held:
                return AgentReply(
                    messages=tuple(produced),
                    text=content or "",
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    tokens_estimated=estimated,
                    approval_calls=json.dumps(held),
                )
            if for_client:
                return AgentReply(
                    messages=tuple(produced),
                    text=content or "",
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    tokens_estimated=estimated,
                    client_calls=json.dumps(for_client),
                )
        raise AssertionError("unreachable: the last round offers no tools")  # pragma: no cover

    def _ask(
        self,
        messages: list[ChatCompletionMessageParam],
        timeout_s: float,
        events: TurnEvents | None,
        *,
        tools: list[ChatCompletionToolUnionParam] | None,
        left_s: float,
    ) -> tuple[str | None, list[dict[str, Any]], tuple[int, int] | None]:
        """One model call of a turn: (content, tool calls, usage); streamed to ``events`` when someone watches."""
        if events is not None:
            return self._endpoint.stream(messages, timeout_s, events.text, tools=tools, left_s=left_s)
        message, usage = self._endpoint.complete(messages, timeout_s, tools=tools, left_s=left_s)
        return message.content or None, dump_tool_calls(message.tool_calls), usage

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        """Ask the model for a summary a continuation session can start from; ``""`` for an empty history."""
        return self.summarize_within(history, max_tokens=SUMMARY_MAX_TOKENS, timeout_s=timeout_s)

    def summarize_within(self, history: Sequence[MessageRecord], *, max_tokens: int, timeout_s: float) -> str:
        """:meth:`summarize` in at most ``max_tokens`` tokens: the instruction asks for about three words per four
        tokens and the request's ``max_tokens`` caps the answer."""
        messages = history_messages(history)
        if not messages:
            return ""
        words = max(10, max_tokens * 3 // 4)
        messages.append({"role": "user", "content": _SUMMARY_INSTRUCTION.format(words=words)})
        message, _ = self._endpoint.complete(messages, timeout_s, max_tokens=max_tokens)
        summary = (message.content or "").strip()
        if not summary:
            raise AgentError(
                f"{self._endpoint.where} answered an empty summary; retry, or use a model that follows instructions"
            )
        return summary

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        """Ask the model for a JSON array of facts about the user; a reply without one yields ``[]`` (logged)."""
        messages = history_messages(history)
        if not messages:
            return []
        messages.append({"role": "user", "content": _MEMORY_INSTRUCTION})
        message, _ = self._endpoint.complete(messages, timeout_s)
        reply = message.content or ""
        facts = _find_string_array(reply)
        if facts is None:
            _log.warning(
                "%s gave no JSON array of strings for memories; keeping none. Reply: %.200r",
                self._endpoint.where,
                reply,
            )
            return []
        kept = dict.fromkeys(fact.strip() for fact in facts)
        return [Memory(content=fact) for fact in kept if fact]

    def title(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str:
        """Ask the model for a 3-7 word title of a session's first exchange; quotes and a "Title:" label are
        stripped and an over-long answer is cut at a word. Raises :class:`AgentError` for an empty answer."""
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": first_user_text[:TITLE_EXCERPT_CHARS]},
            {"role": "assistant", "content": first_reply[:TITLE_EXCERPT_CHARS]},
            {"role": "user", "content": _TITLE_INSTRUCTION},
        ]
        message, _ = self._endpoint.complete(messages, timeout_s)
        title = _clean_title(message.content or "")
        if not title:
            raise AgentError(f"{self._endpoint.where} answered an empty title; the session stays untitled")
        return title


def _call_name(call: dict[str, Any]) -> str:
    spec: object = call.get("function") or call.get("custom")
    return str(spec.get("name") or "?") if isinstance(spec, dict) else "?"


def _call_arguments(call: dict[str, Any]) -> str:
    spec: object = call.get("function") or call.get("custom")
    if not isinstance(spec, dict):
        return ""
    value = spec.get("arguments", spec.get("input"))
    return value if isinstance(value, str) else json.dumps(value) if value is not None else ""


def _estimated_tokens(sent: object, tools: object = None) -> int:
    """Four characters a token of what was sent or answered (its JSON), for a response without ``usage``."""
    return len(json.dumps([sent, tools], ensure_ascii=False)) // 4


def _find_string_array(text: str) -> list[str] | None:
    """Return the first JSON array of strings anywhere in ``text`` (code fences and prose around it are fine)."""
    decoder = json.JSONDecoder()
    start = text.find("[")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
        start = text.find("[", start + 1)
    return None


def _clean_title(answer: str) -> str:
    """The title in a model's ``answer``: its first non-empty line without a Markdown heading mark, a "Title:"
    label, quotes or final punctuation, cut at a word to fit
    :data:`~hermes_actors.titles.MAX_TITLE_LENGTH`."""
    line = next((line for line in answer.splitlines() if line.strip()), "")
    title, previous = _TITLE_PREFIX.sub("", line), None
    while title != previous:  # quotes and final punctuation nest either way round: "「x」。", "'x.'"
        previous, title = title, title.strip().strip(_TITLE_QUOTES).rstrip(".。!！")
    words = title.split()
    while len(" ".join(words)) > MAX_TITLE_LENGTH and len(words) > 1:
        words.pop()
    return " ".join(words)[:MAX_TITLE_LENGTH]
