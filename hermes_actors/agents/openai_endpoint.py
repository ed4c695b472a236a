"""One OpenAI-compatible chat-completions endpoint: the client, one request, and its failures as
:class:`~hermes_actors.agents.turn.AgentError`.

Every failure names the endpoint, the model, what went wrong (with the client's retry count) and what to check.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

try:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageParam
    from openai.types.chat import ChatCompletionToolUnionParam as ToolParam
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "hermes_actors.agents.openai_chat needs the openai package; install it with: "
        "pip install 'hermes-actors[openai]'"
    ) from error

from hermes_actors.agents.openai_stream import read_stream
from hermes_actors.agents.turn import AgentError

__all__ = ["ChatEndpoint"]

_PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, but the client insists on one


class ChatEndpoint:
    """The chat-completions endpoint at ``base_url`` serving ``model``.

    ``api_key`` defaults to the environment variable ``api_key_env``, or a placeholder when that is unset;
    ``timeout_s`` and ``max_retries`` configure the client. An injected ``client`` is used as given (``base_url``
    then only names the endpoint in errors) and :meth:`close` leaves it to its owner.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        api_key_env: str,
        timeout_s: float,
        max_retries: int,
        temperature: float | None,
        client: openai.OpenAI | None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self._api_key_env = api_key_env
        self._owns_client = client is None
        if client is None:
            key = api_key if api_key is not None else os.environ.get(api_key_env) or _PLACEHOLDER_API_KEY
            client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout_s, max_retries=max_retries)
        self._client = client

    @property
    def where(self) -> str:
        """The endpoint and model, as errors and log lines name them."""
        return f"agent endpoint {self.base_url} (model {self.model!r})"

    def close(self) -> None:
        """Close the client this endpoint created (an injected client is left to its owner)."""
        if self._owns_client:
            self._client.close()

    def complete(
        self,
        messages: list[ChatCompletionMessageParam],
        timeout_s: float,
        *,
        tools: list[ToolParam] | None = None,
        left_s: float | None = None,
        max_tokens: int | None = None,
    ) -> tuple[ChatCompletionMessage, tuple[int, int] | None]:
        """Call the endpoint once (with the client's retries); return the first choice's message and the
        (prompt, completion) tokens of the response's ``usage``, ``None`` when it has none.

        ``left_s`` (what is left of a turn's ``timeout_s``) bounds the request instead of ``timeout_s`` when given;
        ``max_tokens`` caps the answer.
        """
        temperature = openai.omit if self.temperature is None else self.temperature
        with self._failures(timeout_s):
            response: object = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=temperature,
                tools=openai.omit if tools is None else tools,
                max_tokens=openai.omit if max_tokens is None else max_tokens,
                timeout=timeout_s if left_s is None else left_s,
            )
        where = self.where
        choices: object = response.choices if isinstance(response, ChatCompletion) else None
        if not isinstance(response, ChatCompletion) or not isinstance(choices, list) or not choices:
            raise AgentError(
                f"{where} answered with no choices; check that agent.base_url points at an OpenAI-compatible "
                "/v1 endpoint and that agent.model is served there"
            )
        message: object = getattr(choices[0], "message", None)
        if not isinstance(message, ChatCompletionMessage):
            raise AgentError(f"{where} answered a choice without a message; check the server's chat-completions API")
        usage = response.usage
        if usage is None:
            return message, None
        return message, (_count(getattr(usage, "prompt_tokens", 0)), _count(getattr(usage, "completion_tokens", 0)))

    def stream(
        self,
        messages: list[ChatCompletionMessageParam],
        timeout_s: float,
        on_text: Callable[[str], None],
        *,
        tools: list[ToolParam] | None = None,
        left_s: float | None = None,
    ) -> tuple[str | None, list[dict[str, Any]], tuple[int, int] | None]:
        """Call the endpoint once, streaming: each piece of text goes to ``on_text`` as it arrives. Return the
        whole content (``None`` when there was none), the tool calls (assembled from their pieces, in the shape
        of a non-streamed message's) and the (prompt, completion) tokens of the final ``usage`` chunk, ``None``
        when the server sent none."""
        temperature = openai.omit if self.temperature is None else self.temperature
        with (
            self._failures(timeout_s),
            self._client.chat.completions.with_streaming_response.create(
                model=self.model,
                messages=messages,
                temperature=temperature,
                tools=openai.omit if tools is None else tools,
                timeout=timeout_s if left_s is None else left_s,
                stream=True,
                stream_options={"include_usage": True},
            ) as response,
        ):
            answer = read_stream(response.iter_lines(), on_text)
        if answer.error is not None:
            raise AgentError(f"{self.where} sent an error in its stream: {answer.error[:300]}; retry the turn")
        if not answer.finished:
            raise AgentError(
                f"{self.where} broke off its answer after {answer.pieces} pieces (the stream ended without a "
                "finish reason); retry the turn"
            )
        return answer.content, answer.calls, answer.usage

    def probe(self, timeout_s: float) -> None:
        """Ask for the endpoint's model list (``GET {base_url}/models``, once, no retry): a health check's cheap
        look at whether the endpoint answers. A connection failure, a timeout, a refused key (401, 403) or a
        server error (5xx) raises :class:`AgentError`; any other answer (a server without ``/models`` answers 404)
        shows the endpoint is up."""
        try:
            with self._failures(timeout_s):
                self._client.with_options(timeout=timeout_s, max_retries=0).models.list()
        except AgentError as err:
            status = err.__cause__.status_code if isinstance(err.__cause__, openai.APIStatusError) else None
            if status is None or status in (401, 403) or status >= 500:
                raise

    @contextmanager
    def _failures(self, timeout_s: float) -> Iterator[None]:
        """Turn the client's failures inside the block into :class:`AgentError` naming the fix."""
        where = self.where
        try:
            yield
        except AgentError:
            raise
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
        except Exception as err:  # a stream cut halfway (the HTTP library's own error)
            raise AgentError(f"{where} broke off its answer ({type(err).__name__}: {err}); retry the turn") from err

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
        return f"{self.where} answered HTTP {status}{_retried(err.request.headers)}: {detail}; {fix}"


def _retried(request_headers: Any) -> str:
    # The client stamps each attempt with how many retries preceded it; the failing one tells the total.
    try:
        retries = int(request_headers.get("x-stainless-retry-count", "0"))
    except (TypeError, ValueError):
        return ""
    return f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
