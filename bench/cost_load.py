"""The paced load of ``bench/cluster_cost.py``: signed webhooks answered through a callback the bench receives, and
non-streaming chat completions, at a fixed rate over a fixed set of conversations.

Message ``i`` is sent at ``start + i / rate`` (open loop: a slow answer does not slow the sending), to the entry
points of ``targets[i % len(targets)]`` (a load balancer's round robin over the replicas). Even messages are
webhooks to chat ``chat-<k>``, odd ones chat completions in conversation ``api-<k>`` (``k`` cycling over half of
``sessions`` each): a conversation's first completion starts a session (no ``X-Hermes-Session-Id``), its next ones
continue it by the id the first answer named, one at a time (a completion waits for its conversation's previous
one, as a chat client does). Every completion carries an ``Idempotency-Key``. Every answer is checked (``echo:``
and the text sent); a refused request, a wrong answer or a callback that never comes fails the run.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

__all__ = ["Load", "LoadResult", "Receiver", "Target", "sign"]

SESSION_HEADER = "X-Hermes-Session-Id"


@dataclass(frozen=True)
class Target:
    """One replica's (or the one machine's) entry points."""

    api: str  # http://127.0.0.1:port
    webhook: str


def sign(secret: str, webhook_id: str, stamp: str, body: bytes) -> str:
    """The Standard Webhooks signature of ``body`` (``v1,<base64 HMAC-SHA256>``)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{webhook_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class Receiver:
    """The application a webhook route calls back: records when each reply (``in_reply_to``) arrived, and its
    text. Runs on the load's event loop."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.arrived: dict[str, float] = {}
        self.texts: dict[str, str] = {}
        self.twice = 0
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/replies", self._reply)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _reply(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = str(body.get("in_reply_to"))
        if key in self.arrived:
            self.twice += 1
        else:
            self.arrived[key] = time.perf_counter()
            self.texts[key] = str(body.get("text"))
            self._changed.set()
        return web.Response(status=200)

    async def wait_for(self, keys: set[str], timeout: float) -> None:
        """Until every webhook id of ``keys`` was answered; :class:`RuntimeError` naming the missing after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not keys <= self.arrived.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(keys - self.arrived.keys())
                raise RuntimeError(f"{len(missing)} webhooks never called back within {timeout:.0f} s: {missing[:5]}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=min(left, 1.0))
            except TimeoutError:
                continue


@dataclass
class LoadResult:
    """What one paced run saw; times in seconds."""

    messages: int = 0
    api_latency: list[float] = field(default_factory=list)  # request -> whole response
    webhook_accept: list[float] = field(default_factory=list)  # request -> 202
    webhook_lag: list[float] = field(default_factory=list)  # request sent -> callback received
    late: list[float] = field(default_factory=list)  # how late each message left against its schedule
    answered: dict[str, tuple[str, float, float]] = field(default_factory=dict)  # text: kind, sent (wall), answer
    sent_for: float = 0.0  # first send -> last send
    done_for: float = 0.0  # first send -> last answer


class Load:
    """Paced messages into ``targets``; the webhook route's callbacks arrive at ``receiver``."""

    def __init__(self, targets: list[Target], receiver: Receiver, secret: str, sessions: int, tag: str) -> None:
        self.targets = targets
        self.receiver = receiver
        self.secret = secret
        self.half = max(1, sessions // 2)
        self.tag = tag  # makes every id of this run new
        self.session_ids: dict[int, str] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._posted: dict[str, tuple[float, float, str]] = {}  # webhook id: perf counter, wall clock, text
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Load:
        timeout = aiohttp.ClientTimeout(total=120)
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512), timeout=timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def webhook(self, target: Target, chat: int, n: int, result: LoadResult) -> str:
        """Send one signed webhook; its id (the callback's ``in_reply_to``)."""
        assert self._http is not None
        webhook_id = f"{self.tag}-w{n}"
        text = f"webhook {n} of {self.tag}"
        body = json.dumps({"text": text, "chat_id": f"chat-{self.tag}-{chat}"}).encode()
        stamp = str(int(time.time()))
        headers = {
            "content-type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": stamp,
            "webhook-signature": sign(self.secret, webhook_id, stamp, body),
        }
        started = time.perf_counter()
        self._posted[webhook_id] = (started, time.time(), text)
        async with self._http.post(f"{target.webhook}/webhooks/default", data=body, headers=headers) as response:
            if response.status != 202:
                raise RuntimeError(f"webhook {webhook_id}: {response.status} {(await response.text())[:300]}")
        result.webhook_accept.append(time.perf_counter() - started)
        return webhook_id

    async def completion(self, target: Target, conversation: int, n: int, result: LoadResult) -> None:
        """One chat completion in ``conversation``, after the conversation's previous one."""
        assert self._http is not None
        text = f"completion {n} of {self.tag}"
        lock = self._locks.setdefault(conversation, asyncio.Lock())
        async with lock:
            headers = {"Idempotency-Key": f"{self.tag}-c{n}-{uuid.uuid4().hex[:8]}"}
            known = self.session_ids.get(conversation)
            if known is not None:
                headers[SESSION_HEADER] = known
            body: dict[str, Any] = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
            wall, started = time.time(), time.perf_counter()
            async with self._http.post(f"{target.api}/v1/chat/completions", json=body, headers=headers) as response:
                answer = await response.text()
                if response.status != 200:
                    raise RuntimeError(f"completion {n}: {response.status} {answer[:300]}")
                session = response.headers.get(SESSION_HEADER)
            result.api_latency.append(time.perf_counter() - started)
            result.answered[text] = ("api", wall, result.api_latency[-1])
            content = json.loads(answer)["choices"][0]["message"]["content"]
            if text not in content:
                raise RuntimeError(f"completion {n} answered {content[:200]!r}, not an echo of {text!r}")
            if known is None:
                if not session:
                    raise RuntimeError(f"completion {n}: no {SESSION_HEADER} in the answer")
                self.session_ids[conversation] = session

    async def one(self, n: int, result: LoadResult) -> str | None:
        """Message ``n``: a webhook (its id) or a completion (``None``)."""
        target = self.targets[n % len(self.targets)]
        if n % 2 == 0:
            return await self.webhook(target, (n // 2) % self.half, n, result)
        await self.completion(target, (n // 2) % self.half, n, result)
        return None

    async def run(self, rate: float, first: int, count: int, timeout: float) -> LoadResult:
        """Messages ``first`` .. ``first + count - 1`` at ``rate`` per second; returns once every one is answered
        (messages ``0 .. sessions - 1`` are each conversation's first)."""
        result = LoadResult(messages=count)
        loop = asyncio.get_running_loop()
        started = loop.time()
        began = time.perf_counter()
        tasks = []
        for n in range(first, first + count):
            delay = started + (n - first) / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            result.late.append(max(0.0, -delay))
            tasks.append(asyncio.create_task(self.one(n, result)))
        result.sent_for = time.perf_counter() - began
        ids = await asyncio.gather(*tasks)
        webhooks = {i for i in ids if i is not None}
        await self.receiver.wait_for(webhooks, timeout)
        for key in webhooks:
            started, wall, text = self._posted[key]
            result.webhook_lag.append(self.receiver.arrived[key] - started)
            result.answered[text] = ("webhook", wall, result.webhook_lag[-1])
            if not self.receiver.texts[key].startswith("echo:"):
                raise RuntimeError(f"webhook {key} was answered {self.receiver.texts[key][:200]!r}")
        result.done_for = time.perf_counter() - began
        return result
