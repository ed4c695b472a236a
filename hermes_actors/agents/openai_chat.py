"""An :class:`~hermes_actors.agents.base.Agent` for any OpenAI-compatible chat-completions endpoint.

OpenAI itself, vLLM, llama.cpp, Ollama and the like. The turn's tools (``TurnInput.tools``: every session offers
``session_search``) are offered as function tools. When the model answers with tool calls, each is run (an unknown
tool or arguments that are not a JSON object get an error result the model can read), the results are appended
and the model is asked again, for at most :data:`MAX_TOOL_ROUNDS` rounds; the last request offers no tools, so the
model has to answer in words. Every assistant and tool message of the turn goes into the reply, in order, and the
whole turn stays within the call's ``timeout_s``. Tool calls that come back when no tools were offered are stored
on the assistant message and named in the reply text, and calls that never got a result are left out of later
requests (the API rejects them).

Every failure of the endpoint becomes :class:`~hermes_actors.agents.base.AgentError` naming the endpoint, the model,
what went wrong and what to check.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

try:
    import openai
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionContentPartParam,
        ChatCompletionMessage,
        ChatCompletionMessageParam,
        ChatCompletionMessageToolCallUnionParam,
        ChatCompletionToolUnionParam,
        ChatCompletionUserMessageParam,
    )
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "hermes_actors.agents.openai_chat needs the openai package; install it with: "
        "pip install 'hermes-actors[openai]'"
    ) from error

from hermes_actors.agents.base import AgentError, AgentMessage, AgentReply, Memory, TurnInput
from hermes_actors.agents.tools import Tool, error_json, find_tool
from hermes_actors.messages import Attachment
from hermes_actors.store.records import MessageRecord, Role
from hermes_actors.titles import MAX_TITLE_LENGTH

__all__ = ["MAX_TOOL_ROUNDS", "TITLE_EXCERPT_CHARS", "OpenAIAgent"]

MAX_TOOL_ROUNDS = 5  # model answers with tool calls that a turn runs before it insists on words

_log = logging.getLogger(__name__)

_PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, but the client insists on one

_SUMMARY_INSTRUCTION = (
    "Summarise the conversation above so that a new session can continue it: the user's goals, the facts and "
    "decisions established, open questions and what was being worked on last. Plain prose, at most 300 words."
)
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
    URL, else its source URL); later turns send only the text stand-in the transcript kept.
    """

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
    ) -> None:
        if not base_url:
            raise ValueError("OpenAIAgent needs a base_url such as http://127.0.0.1:8000/v1; set agent.base_url")
        if not model:
            raise ValueError("OpenAIAgent needs a model name; set agent.model")
        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self.vision = vision
        self._api_key_env = api_key_env
        self._owns_client = client is None
        if client is None:
            key = api_key if api_key is not None else os.environ.get(api_key_env) or _PLACEHOLDER_API_KEY
            client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout_s, max_retries=max_retries)
        self._client = client

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
        if self._owns_client:
            self._client.close()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        """Send system prompt, memories, history and the user text; run tool calls; return the turn's messages."""
        deadline = time.monotonic() + timeout_s
        messages: list[ChatCompletionMessageParam] = []
        system = _system_text(turn.system_prompt, turn.memories)
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.extend(_history_messages(turn.history))
        messages.append(_user_message(turn.user_text, turn.attachments if self.vision else ()))
        offered = [cast(ChatCompletionToolUnionParam, tool.openai_spec()) for tool in turn.tools]
        produced: list[AgentMessage] = []
        input_tokens = output_tokens = 0
        for round_number in range(MAX_TOOL_ROUNDS + 1):
            tools = offered if offered and round_number < MAX_TOOL_ROUNDS else None
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(
                    f"{self._where} used up the turn's {timeout_s:g} s after {round_number} tool rounds; "
                    "raise runtime.agent_timeout_s or check why the tools are slow"
                )
            message, used_in, used_out = self._complete(messages, timeout_s, tools=tools, left_s=left)
            input_tokens += used_in
            output_tokens += used_out
            calls = _dump_tool_calls(message.tool_calls)
            content = message.content or None
            if tools is None or not calls:
                if content is None and not calls:
                    raise AgentError(
                        f"{self._where} answered an empty message (no content, no tool calls); retry the turn"
                    )
                dumped = json.dumps(calls) if calls else None
                produced.append(AgentMessage(role=Role.ASSISTANT, content=content, tool_calls=dumped))
                text = content if content is not None else _called_tools_text(calls)
                return AgentReply(
                    messages=tuple(produced), text=text, input_tokens=input_tokens, output_tokens=output_tokens
                )
            produced.append(AgentMessage(role=Role.ASSISTANT, content=content, tool_calls=json.dumps(calls)))
            messages.append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": cast(list[ChatCompletionMessageToolCallUnionParam], calls),
                }
            )
            for call in calls:
                name, call_id, result = _run_tool_call(turn.tools, call)
                produced.append(AgentMessage(role=Role.TOOL, content=result, tool_name=name, tool_call_id=call_id))
                messages.append({"role": "tool", "content": result, "tool_call_id": call_id})
        raise AssertionError("unreachable: the last round offers no tools")  # pragma: no cover

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        """Ask the model for a summary a continuation session can start from; ``""`` for an empty history."""
        messages = _history_messages(history)
        if not messages:
            return ""
        messages.append({"role": "user", "content": _SUMMARY_INSTRUCTION})
        message, _, _ = self._complete(messages, timeout_s)
        summary = (message.content or "").strip()
        if not summary:
            raise AgentError(
                f"{self._where} answered an empty summary; retry, or use a model that follows instructions"
            )
        return summary

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        """Ask the model for a JSON array of facts about the user; a reply without one yields ``[]`` (logged)."""
        messages = _history_messages(history)
        if not messages:
            return []
        messages.append({"role": "user", "content": _MEMORY_INSTRUCTION})
        message, _, _ = self._complete(messages, timeout_s)
        reply = message.content or ""
        facts = _find_string_array(reply)
        if facts is None:
            _log.warning(
                "%s gave no JSON array of strings for memories; keeping none. Reply: %.200r", self._where, reply
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
        message, _, _ = self._complete(messages, timeout_s)
        title = _clean_title(message.content or "")
        if not title:
            raise AgentError(f"{self._where} answered an empty title; the session stays untitled")
        return title

    @property
    def _where(self) -> str:
        return f"agent endpoint {self.base_url} (model {self.model!r})"

    def _complete(
        self,
        messages: list[ChatCompletionMessageParam],
        timeout_s: float,
        *,
        tools: list[ChatCompletionToolUnionParam] | None = None,
        left_s: float | None = None,
    ) -> tuple[ChatCompletionMessage, int, int]:
        """Call the endpoint once (with the client's retries); return the first choice's message and token counts.

        ``left_s`` (what is left of a turn's ``timeout_s``) bounds the request instead of ``timeout_s`` when given.
        """
        where = self._where
        temperature = openai.omit if self.temperature is None else self.temperature
        try:
            response: object = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=temperature,
                tools=openai.omit if tools is None else tools,
                timeout=timeout_s if left_s is None else left_s,
            )
        except openai.APITimeoutError as err:
            raise AgentError(
                f"{where} timed out: no answer within {timeout_s:g} s{_retried(err.request.headers)}; "
                "check that the server is running and not overloaded, or raise runtime.agent_timeout_s"
            ) from err
        except openai.APIConnectionError as err:
            raise AgentError(
                f"cannot connect to {where}: {err.__cause__ or err}{_retried(err.request.headers)}; "
                "check agent.base_url and that the server is running"
            ) from err
        except openai.APIStatusError as err:
            raise AgentError(self._status_problem(err)) from err
        except (openai.OpenAIError, ValueError) as err:  # ValueError: a body that is not JSON
            raise AgentError(
                f"{where} answered something that is not a chat completion ({err}); "
                "check that agent.base_url points at an OpenAI-compatible /v1 endpoint"
            ) from err
        choices: object = getattr(response, "choices", None)
        if not isinstance(response, ChatCompletion) or not isinstance(choices, list) or not choices:
            raise AgentError(
                f"{where} answered with no choices; check that agent.base_url points at an OpenAI-compatible "
                "/v1 endpoint and that agent.model is served there"
            )
        message: object = getattr(choices[0], "message", None)
        if not isinstance(message, ChatCompletionMessage):
            raise AgentError(f"{where} answered a choice without a message; check the server's chat-completions API")
        usage = response.usage
        return message, _count(getattr(usage, "prompt_tokens", 0)), _count(getattr(usage, "completion_tokens", 0))

    def _status_problem(self, err: openai.APIStatusError) -> str:
        status = err.status_code
        body: object = err.body
        detail = body.get("message") if isinstance(body, dict) else None
        detail = str(detail or err.message)[:300]
        if status in (401, 403):
            fix = f"check the API key (agent.api_key or the {self._api_key_env} environment variable)"
        elif status == 404:
            fix = "check agent.base_url (usually ending in /v1) and that agent.model is served there"
        elif status == 429:
            fix = "the server is rate limiting; lower the load or raise agent.max_retries"
        elif status >= 500:
            fix = "the server failed; check its log and that agent.model is loaded"
        else:
            fix = "the server rejected the request; check agent.model and the server's log"
        return f"{self._where} answered HTTP {status}{_retried(err.request.headers)}: {detail}; {fix}"


def _history_messages(history: Iterable[MessageRecord]) -> list[ChatCompletionMessageParam]:
    """Convert stored messages to chat-completions messages, oldest first.

    Messages with neither content nor tool calls are skipped, and so are tool calls without a stored result and
    results without a preceding call, which the API would reject.
    """
    records = list(history)
    answered = {r.tool_call_id for r in records if r.role == Role.TOOL and r.tool_call_id}
    called: set[str] = set()
    out: list[ChatCompletionMessageParam] = []
    for record in records:
        if record.role == Role.USER:
            if record.content:
                out.append({"role": "user", "content": record.content})
        elif record.role == Role.SYSTEM:
            if record.content:
                out.append({"role": "system", "content": record.content})
        elif record.role == Role.ASSISTANT:
            calls = _parse_tool_calls(record)
            kept = [call for call in calls if call.get("id") in answered]
            content = record.content or (_called_tools_text(calls) if calls and not kept else None)
            if content is None and not kept:
                continue
            message: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": content}
            if kept:
                message["tool_calls"] = cast(list[ChatCompletionMessageToolCallUnionParam], kept)
                called.update(str(call["id"]) for call in kept)
            out.append(message)
        elif record.role == Role.TOOL:
            if record.tool_call_id in called:
                out.append({"role": "tool", "content": record.content or "", "tool_call_id": record.tool_call_id})
            else:
                _log.debug("message %d: tool result without a matching call left out of the request", record.id)
        else:
            _log.warning("message %d has unknown role %r; left out of the request", record.id, record.role)
    return out


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


def _user_message(text: str, attachments: Sequence[Attachment]) -> ChatCompletionUserMessageParam:
    """The turn's user message: its text, and each image attachment as an ``image_url`` part after it."""
    parts: list[ChatCompletionContentPartParam] = []
    for attachment in attachments:
        url = _image_url(attachment) if attachment.kind == "image" else None
        if url is not None:
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if not parts:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}


def _image_url(attachment: Attachment) -> str | None:
    """A saved image as a base64 data URL, else its http(s) source URL; ``None`` (logged) if neither works."""
    if attachment.path is not None:
        try:
            data = Path(attachment.path).read_bytes()
        except OSError as exc:
            _log.warning("image %s cannot be read (%s); the model gets its text stand-in only", attachment.path, exc)
            return None
        mime = attachment.mime_type or "image/png"
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    if attachment.source_url is not None and attachment.source_url.startswith(("http://", "https://")):
        return attachment.source_url
    return None


def _system_text(prompt: str | None, memories: Sequence[str]) -> str | None:
    parts = [prompt] if prompt else []
    facts = [fact.strip() for fact in memories if fact.strip()]
    if facts:
        parts.append("Known about the user:\n" + "\n".join(f"- {fact}" for fact in facts))
    return "\n\n".join(parts) or None


def _parse_tool_calls(record: MessageRecord) -> list[dict[str, Any]]:
    if not record.tool_calls:
        return []
    try:
        value: object = json.loads(record.tool_calls)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(call, dict) for call in value):
        _log.warning("message %d: tool_calls is not a JSON array of objects; calls left out", record.id)
        return []
    return cast(list[dict[str, Any]], value)


def _dump_tool_calls(calls: Iterable[object] | None) -> list[dict[str, Any]]:
    dumped: list[dict[str, Any]] = []
    for call in calls or ():
        if isinstance(call, openai.BaseModel):
            dumped.append(call.model_dump(mode="json", exclude_none=True))
        elif isinstance(call, dict):
            dumped.append(cast(dict[str, Any], call))
    return dumped


def _run_tool_call(tools: Sequence[Tool], call: dict[str, Any]) -> tuple[str, str, str]:
    """Run one tool call of the model; return (tool name, call id, result text)."""
    call_id = str(call.get("id") or "")
    spec: object = call.get("function") or call.get("custom")
    name = str(spec.get("name") or "?") if isinstance(spec, dict) else "?"
    tool = find_tool(tools, name) if call.get("type", "function") == "function" else None
    if tool is None:
        available = ", ".join(t.name for t in tools)
        return name, call_id, error_json(f"there is no function tool named {name!r}; the tools are: {available}")
    raw: object = spec.get("arguments") if isinstance(spec, dict) else None
    try:
        arguments: object = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError as exc:
        return name, call_id, error_json(f"the arguments of {name} are not JSON ({exc}); send a JSON object")
    if not isinstance(arguments, dict):
        return name, call_id, error_json(f"the arguments of {name} must be a JSON object, not {raw!r:.100}")
    return name, call_id, tool.run(cast(dict[str, Any], arguments))


def _called_tools_text(calls: Sequence[dict[str, Any]]) -> str:
    names = []
    for call in calls:
        spec: object = call.get("function") or call.get("custom")
        name = spec.get("name") if isinstance(spec, dict) else None
        names.append(str(name or "?"))
    return f"[called tools: {', '.join(names)}]"


def _retried(request_headers: Any) -> str:
    # The client stamps each attempt with how many retries preceded it; the failing one tells the total.
    try:
        retries = int(request_headers.get("x-stainless-retry-count", "0"))
    except (TypeError, ValueError):
        return ""
    return f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
