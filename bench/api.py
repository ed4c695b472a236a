"""Time to first token through ``hermesd``'s OpenAI-compatible API, and streaming requests/s with 50 clients.

Three processes, all on 127.0.0.1: a tiny streaming chat-completions server of this script's own (the "model",
run as ``python bench/api.py --serve-model``: a role chunk, then after ``--first-token-ms`` the content deltas
``--gap-ms`` apart, the ``finish_reason`` chunk, the ``usage`` chunk and ``[DONE]``), a real ``hermesd`` on a
temporary home whose agent is that model, and this process, the client (aiohttp).

1. **TTFT**: sequential streaming requests, alternately straight to the model and through hermesd's
   ``/v1/chat/completions`` (a stateless request: a conversation of its own each time, so a new session each
   time, as a frontend's new chat), each timed from sending the request to the first non-empty content delta.
   The overhead is through minus direct, at p50 and p99.
2. **Concurrent**: ``--clients`` workers send streaming requests through hermesd, each waiting for its whole
   answer before the next, until ``--requests`` were sent or ``--seconds`` passed; requests/s, TTFT under that
   load, and every request that did not end in a 200 stream with the model's whole text and ``[DONE]``.

Prints one ``name: value unit (note)`` line per figure; bench/README.md explains them. A plain script, not a test.
The model server and hermesd run in sessions of their own (Ctrl-C reaches only this process) and are stopped at
the end, on an error, on Ctrl-C and on SIGTERM; only a SIGKILL of this process leaves them running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

# Run from a checkout without installing: the repository root goes first, so the working tree is measured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web
from api_trace import STEPS, TRACE_ENV
from report import figure_line

from hermes_actors.daemon.control import connect

MODEL = "bench-model"
HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 30.0
TITLE = "Bench conversation"  # what the model answers a non-streamed request (hermesd asks for session titles)


def figure(name: str, value: float | int | str, unit: str = "", note: str = "") -> None:
    """Print one figure as ``name: value unit (note)``."""
    print(figure_line(name, value, unit, note), flush=True)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``values`` (``fraction`` in 0..1)."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages of the machine (other processes compete for the cores)."""
    return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (all its threads), from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the model: a streaming OpenAI-compatible chat-completions server -------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """How the model answers: ``tokens`` content deltas, the first ``first_token_s`` after the request, then one
    every ``gap_s``."""

    first_token_s: float
    gap_s: float
    tokens: int

    def pieces(self) -> list[str]:
        """The content deltas of every answer."""
        return [f"tok{index} " for index in range(self.tokens)]

    def text(self) -> str:
        """The whole answer."""
        return "".join(self.pieces())


def _sse(payload: object) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def model_app(shape: ModelShape) -> web.Application:
    """The model's aiohttp application: ``POST /v1/chat/completions`` (streamed or not), ``GET /stats`` (calls by
    kind) and ``GET /timings`` (per streamed request: when the model had it and when it wrote its first delta)."""
    counts: Counter[str] = Counter()
    # the last user message of a streamed request -> when it arrived and when its first content delta was written
    # (perf_counter: CLOCK_MONOTONIC on Linux, the same clock in every process of the machine)
    timings: dict[str, tuple[float, float]] = {}
    pieces = shape.pieces()

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        arrived = time.perf_counter()  # the model has the whole request
        created = int(time.time())
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces)}
        usage["total_tokens"] = prompt_tokens + len(pieces)
        if not body.get("stream"):
            counts["complete"] += 1
            await asyncio.sleep(shape.first_token_s)
            asked = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
            title = f"{TITLE} {hashlib.sha256(asked.encode()).hexdigest()[:8]}"  # one title per conversation
            message = {"role": "assistant", "content": title}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return web.json_response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": MODEL,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        counts["stream"] += 1
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, str] | None, finish: str | None = None, **extra: object) -> bytes:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": MODEL}
            return _sse({**head, "choices": choices, **extra})

        response = web.StreamResponse(headers={"Cache-Control": "no-cache"})
        response.content_type = "text/event-stream"
        await response.prepare(request)
        await response.write(chunk({"role": "assistant", "content": ""}))
        await asyncio.sleep(shape.first_token_s)
        question = str(([""] + [m.get("content") for m in body["messages"] if m.get("role") == "user"])[-1])
        timings[question] = (arrived, time.perf_counter())
        for index, piece in enumerate(pieces):
            if index and shape.gap_s > 0:
                await asyncio.sleep(shape.gap_s)
            await response.write(chunk({"content": piece}))
        await response.write(chunk({}, "stop"))
        if include_usage:
            await response.write(chunk(None, usage=usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(dict(counts))

    async def timing(request: web.Request) -> web.Response:
        return web.json_response(timings)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/stats", stats)
    app.router.add_get("/timings", timing)
    return app


async def serve_model(shape: ModelShape) -> None:
    """Serve the model on a free port of 127.0.0.1; print ``listening URL`` once it listens; run until signalled."""
    runner = web.AppRunner(model_app(shape), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"listening http://{HOST}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def stop_process(process: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM ``process`` and wait for it; SIGKILL it when it does not end within ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    return process.returncode


@contextlib.contextmanager
def model_process(shape: ModelShape) -> Iterator[tuple[str, int]]:
    """Start the model server in a process of its own; yield its base URL and pid; stop it afterwards."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--serve-model",
        f"--first-token-ms={shape.first_token_s * 1000}",
        f"--gap-ms={shape.gap_s * 1000}",
        f"--tokens={shape.tokens}",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()  # the one line it prints
        if not line.startswith("listening "):
            raise SystemExit(f"the model server did not start (exit {process.poll()}): {line!r}")
        yield line.removeprefix("listening "), process.pid
    finally:
        stop_process(process)


# -- hermesd --------------------------------------------------------------------------------------------------


def hermesd_command(home: Path, *, traced: bool) -> list[str]:
    """The installed ``hermesd`` beside this interpreter, else the module; ``bench/api_trace.py`` when ``traced``."""
    if traced:
        return [sys.executable, str(Path(__file__).resolve().parent / "api_trace.py"), "--home", str(home)]
    installed = Path(sys.executable).parent / "hermesd"
    if installed.exists():
        return [str(installed), "--home", str(home)]
    return [sys.executable, "-m", "hermes_actors.cli.hermesd", "--home", str(home)]


def hermesd_config(model_url: str, *, titles: bool, log_level: str) -> str:
    """``config.yaml``: the OpenAI agent on the bench model, the API on a free loopback port, no webhook."""
    return f"""\
agent:
  base_url: {model_url}/v1
  model: {MODEL}
  max_retries: 0
runtime:
  auto_titles: {"true" if titles else "false"}
daemon:
  drain_timeout_s: 5
  log_level: {log_level}
platforms:
  api_server:
    host: {HOST}
    port: 0
  webhook:
    enabled: false
"""


def api_url(home: Path, process: subprocess.Popen[bytes]) -> str:
    """Wait until hermesd answers on its control socket with the API's URL; return that URL."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (home / "hermesd.err").read_text(errors="replace")[-2000:]
            raise SystemExit(f"hermesd exited with {process.returncode} while starting:\n{log}")
        client = connect(home / "hermesd.sock")
        if client is not None:
            with client:
                status = client.status()
            for platform in status.platforms:
                if platform.name == "api_server":
                    for line in platform.detail:
                        for word in line.split():
                            if word.startswith(f"http://{HOST}:"):
                                return word.rstrip(",;)").removesuffix("/v1")
        time.sleep(0.1)
    raise SystemExit(f"hermesd did not report its API within {START_TIMEOUT_S:.0f} s")


@contextlib.contextmanager
def hermesd_process(
    model_url: str, *, titles: bool, log_level: str, keep: Path | None, trace: Path | None = None
) -> Iterator[tuple[str, int]]:
    """Start ``hermesd`` on a temporary home; yield the API's base URL and its pid; stop it (SIGTERM) after. With
    ``trace``, hermesd runs under ``bench/api_trace.py``, which writes its timestamps there when it exits."""
    home = Path(tempfile.mkdtemp(prefix="hermes-bench-api-"))
    try:
        (home / "config.yaml").write_text(
            hermesd_config(model_url, titles=titles, log_level=log_level), encoding="utf-8"
        )
        env = {**os.environ, "HERMES_HOME": str(home)}
        env.pop("HERMES_API_KEY", None)  # an open API on loopback
        if trace is not None:
            env[TRACE_ENV] = str(trace)
        with (home / "hermesd.out").open("wb") as out, (home / "hermesd.err").open("wb") as err:
            command = hermesd_command(home, traced=trace is not None)
            process = subprocess.Popen(command, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            yield api_url(home, process), process.pid
        finally:
            code = stop_process(process)
            if code not in (0, None):
                log = (home / "hermesd.err").read_text(errors="replace")[-2000:]
                print(f"# hermesd exited with {code}:\n{log}", file=sys.stderr, flush=True)
    finally:
        if keep is not None:
            shutil.copytree(home, keep, dirs_exist_ok=True)
        shutil.rmtree(home, ignore_errors=True)


# -- the client -----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One streamed request: its TTFT (seconds, ``None`` without a content delta) and what went wrong; what it
    asked and when it was sent (``perf_counter``), to be matched with the model's timings."""

    ttft_s: float | None
    error: str | None
    question: str = ""
    sent_at: float = 0.0


@dataclass
class Tally:
    """What a run of requests gave."""

    ttfts: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    answered: list[Outcome] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        if outcome.error is not None:
            self.errors[outcome.error] += 1
        elif outcome.ttft_s is not None:
            self.ttfts.append(outcome.ttft_s)
            self.answered.append(outcome)


def chat_body(text: str) -> bytes:
    """A stateless streaming chat-completions request: one user message, a conversation of its own."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(body).encode()


async def data_lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of an SSE stream, in order."""
    async for line in response.content:
        if line.startswith(b"data:"):
            yield line[5:].strip()


async def stream_once(session: aiohttp.ClientSession, url: str, expected: str) -> Outcome:
    """Send one streaming request to ``url``; time the first content delta; check the whole text and ``[DONE]``."""
    question = f"bench question {uuid.uuid4().hex}"
    body = chat_body(question)
    headers = {"Content-Type": "application/json"}
    texts: list[str] = []
    ttft: float | None = None
    done = False
    began = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as response:
            if response.status != 200:
                await response.read()
                return Outcome(None, f"HTTP {response.status}")
            async for data in data_lines(response):
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        if ttft is None:
                            ttft = time.perf_counter() - began
                        texts.append(content)
    except (aiohttp.ClientError, TimeoutError) as error:
        return Outcome(None, type(error).__name__)
    if not done:
        return Outcome(None, "no [DONE]")
    if "".join(texts) != expected:
        return Outcome(None, "wrong text")
    return Outcome(ttft, None, question, began)


def client_session(connections: int) -> aiohttp.ClientSession:
    """A keep-alive client with up to ``connections`` connections."""
    connector = aiohttp.TCPConnector(limit=connections)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))


async def sequential(direct: str, through: str, expected: str, requests: int, warmup: int) -> tuple[Tally, Tally]:
    """``requests`` streamed requests each way, one at a time, alternating (A B, B A, ...) so that both see the
    same machine; ``warmup`` of each first, untimed."""
    tallies = (Tally(), Tally())
    async with client_session(1) as to_model, client_session(1) as to_hermesd:
        for index in range(warmup + requests):
            order = ((0, to_model, direct), (1, to_hermesd, through))
            for which, session, url in order if index % 2 == 0 else order[::-1]:
                outcome = await stream_once(session, url, expected)
                if index >= warmup:
                    tallies[which].add(outcome)
    return tallies


async def concurrent(url: str, expected: str, clients: int, requests: int, seconds: float) -> tuple[Tally, int, float]:
    """``clients`` workers streaming through ``url`` until ``requests`` were started or ``seconds`` passed; return
    the tally, the requests finished and the seconds it took."""
    tally = Tally()
    started = 0
    finished = 0
    deadline = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal started, finished
        while started < requests and time.perf_counter() < deadline:
            started += 1
            tally.add(await stream_once(session, url, expected))
            finished += 1

    async with client_session(clients) as session:
        began = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return tally, finished, elapsed


# -- the run ----------------------------------------------------------------------------------------------------


def report_ttft(name: str, tally: Tally, note: str) -> None:
    ms = [value * 1000 for value in tally.ttfts]
    figure(f"{name}_p50", percentile(ms, 0.5), "ms", note)
    figure(f"{name}_p99", percentile(ms, 0.99), "ms", f"max {max(ms):.1f} ms")


def errors_text(errors: Counter[str]) -> str:
    return ", ".join(f"{count} {kind}" for kind, count in errors.most_common()) or "none"


async def fetch_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.json()


def split(tally: Tally, timings: dict[str, list[float]]) -> tuple[list[float], list[float]]:
    """For each answered request the model saw: the seconds from sending it to the model's receiving it, and from
    the model's writing its first content delta to the client's having it."""
    there: list[float] = []
    back: list[float] = []
    for outcome in tally.answered:
        if outcome.question in timings and outcome.ttft_s is not None:
            arrived, written = timings[outcome.question]
            there.append(arrived - outcome.sent_at)
            back.append(outcome.sent_at + outcome.ttft_s - written)
    return there, back


def report_split(direct: Tally, through: Tally, timings: dict[str, list[float]]) -> None:
    """Where the overhead is: before the model has the request, or after it wrote its first delta."""
    direct_there, direct_back = split(direct, timings)
    through_there, through_back = split(through, timings)
    if not direct_there or not through_there:
        return
    for name, a, b, what in (
        ("to_model", direct_there, through_there, "from sending the request to the model's receiving it"),
        ("from_model", direct_back, through_back, "from the model's writing its first delta to the client's having it"),
    ):
        d50, t50 = percentile(a, 0.5) * 1000, percentile(b, 0.5) * 1000
        figure(f"overhead_{name}_p50", t50 - d50, "ms", f"{what}: through {t50:.2f} ms, direct {d50:.2f} ms (p50s)")


@dataclass
class SequentialResult:
    """What part 1 gave: its errors, overhead_p50 in ms, and for ``--trace`` the requests through hermesd and the
    model's timings."""

    errors: int
    overhead_ms: float
    through: Tally
    timings: dict[str, list[float]]


def run_sequential(args: argparse.Namespace, model_url: str, api: str, expected: str, pid: int) -> SequentialResult:
    """Part 1: TTFT straight to the model and through hermesd."""
    direct = f"{model_url}/v1/chat/completions"
    through = f"{api}/v1/chat/completions"
    cpu_before = cpu_seconds(pid)
    began = time.perf_counter()
    direct_tally, through_tally = asyncio.run(sequential(direct, through, expected, args.sequential, args.warmup))
    elapsed = time.perf_counter() - began
    cpu = cpu_seconds(pid) - cpu_before
    errors = sum(direct_tally.errors.values()) + sum(through_tally.errors.values())
    if not direct_tally.ttfts or not through_tally.ttfts:
        raise SystemExit(
            f"no successful requests: direct {errors_text(direct_tally.errors)}, "
            f"through {errors_text(through_tally.errors)}"
        )
    order = f"{args.sequential} each, one at a time, interleaved, after {args.warmup} untimed each"
    report_ttft("ttft_direct", direct_tally, f"straight to the model; {order}")
    report_ttft("ttft_through", through_tally, "through hermesd /v1/chat/completions, stateless, streamed")
    d50, d99 = percentile(direct_tally.ttfts, 0.5), percentile(direct_tally.ttfts, 0.99)
    t50, t99 = percentile(through_tally.ttfts, 0.5), percentile(through_tally.ttfts, 0.99)
    pairs = [t - d for d, t in zip(direct_tally.ttfts, through_tally.ttfts, strict=False)]
    figure(
        "overhead_p50",
        (t50 - d50) * 1000,
        "ms",
        f"ttft_through_p50 - ttft_direct_p50; paired differences' median {statistics.median(pairs) * 1000:.2f} ms",
    )
    figure("overhead_p99", (t99 - d99) * 1000, "ms", "ttft_through_p99 - ttft_direct_p99")
    timings: dict[str, list[float]] = asyncio.run(fetch_json(model_url + "/timings"))
    report_split(direct_tally, through_tally, timings)
    figure(
        "sequential_errors",
        errors,
        "",
        f"direct: {errors_text(direct_tally.errors)}; through: {errors_text(through_tally.errors)}",
    )
    requests = args.sequential + args.warmup
    figure(
        "sequential_hermesd_cpu",
        cpu / requests * 1000,
        "ms per request",
        f"hermesd's CPU over the sequential part / its {requests} requests, title calls included; {elapsed:.1f} s wall",
    )
    return SequentialResult(errors, (t50 - d50) * 1000, through_tally, timings)


def report_trace(through: Tally, timings: dict[str, list[float]], marks: dict[str, dict[str, float]]) -> None:
    """One line per step of the first token's path: its median time after the client sent the request."""
    steps = dict(STEPS)
    steps["model_has_request"] = "the model has the whole request"
    steps["model_first_delta"] = "the model writes its first content delta"
    steps["client_first_delta"] = "the client has the first content delta"
    after: dict[str, list[float]] = {}
    for outcome in through.answered:
        reached = dict(marks.get(outcome.question, {}))
        if outcome.question not in timings or outcome.ttft_s is None or not reached:
            continue
        reached["model_has_request"], reached["model_first_delta"] = timings[outcome.question]
        reached["client_first_delta"] = outcome.sent_at + outcome.ttft_s
        for step, when in reached.items():
            after.setdefault(step, []).append((when - outcome.sent_at) * 1000)
    previous = 0.0
    for step in sorted(after, key=lambda step: statistics.median(after[step])):
        median = statistics.median(after[step])
        figure(f"trace_{step}", median, "ms", f"+{median - previous:.2f}; {steps.get(step, step)}")
        previous = median


def run_concurrent(args: argparse.Namespace, through: str, expected: str, pid: int, model_pid: int) -> int:
    """Part 2: requests/s and TTFT with ``args.clients`` streaming at once; return the errors."""
    cpu_before = cpu_seconds(pid)
    model_cpu_before = cpu_seconds(model_pid)
    tally, finished, elapsed = asyncio.run(concurrent(through, expected, args.clients, args.requests, args.seconds))
    cpu = cpu_seconds(pid) - cpu_before
    model_cpu = cpu_seconds(model_pid) - model_cpu_before
    errors = sum(tally.errors.values())
    figure(
        "concurrent_requests_per_s",
        finished / elapsed,
        "req/s",
        f"{args.clients} streaming clients through hermesd, {finished} requests in {elapsed:.1f} s "
        f"(bounds: {args.requests} requests, {args.seconds:g} s)",
    )
    if tally.ttfts:
        report_ttft("concurrent_ttft", tally, f"through hermesd with {args.clients} clients streaming at once")
    figure("concurrent_errors", errors, "", errors_text(tally.errors))
    figure(
        "concurrent_hermesd_cpu",
        cpu / elapsed,
        "cores",
        f"{cpu / max(finished, 1) * 1000:.1f} ms CPU per request; the model server used {model_cpu / elapsed:.2f}",
    )
    return errors


@contextlib.contextmanager
def py_spy(pid: int, output: Path | None) -> Iterator[None]:
    """Record ``pid`` with py-spy (beside this interpreter, or on PATH) into ``output`` while the block runs."""
    if output is None:
        yield
        return
    found = Path(sys.executable).parent / "py-spy"
    command = str(found) if found.exists() else shutil.which("py-spy")
    if command is None:
        raise SystemExit("--py-spy needs py-spy: pip install py-spy")
    record = [command, "record", "--pid", str(pid), "--output", str(output), "--rate", "200", "--threads", "--gil"]
    if output.suffix == ".txt":
        record += ["--format", "raw"]
    elif output.suffix == ".json":
        record += ["--format", "speedscope"]
    process = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(1.0)  # attach before the measured part starts
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        print(f"# py-spy profile of hermesd written to {output}", flush=True)


def run(args: argparse.Namespace) -> int:
    shape = ModelShape(args.first_token_ms / 1000, args.gap_ms / 1000, args.tokens)
    expected = shape.text()
    began = time.perf_counter()
    figure(
        "machine",
        f"{os.cpu_count()} CPUs",
        note=f"load average {load_average()} at the start (1, 5, 15 min); Python {sys.version.split()[0]}",
    )
    figure(
        "model",
        f"{shape.tokens} deltas",
        note=f"first after {args.first_token_ms:g} ms, then every {args.gap_ms:g} ms; a process of its own",
    )
    errors = 0
    result: SequentialResult | None = None
    trace = Path(tempfile.mkstemp(prefix="hermes-bench-trace-", suffix=".json")[1]) if args.trace else None
    hermesd = partial(hermesd_process, titles=not args.no_titles, log_level=args.log_level, keep=args.keep)
    try:
        with (
            model_process(shape) as (model_url, model_pid),
            hermesd(model_url, trace=trace) as (api, pid),
            py_spy(pid, args.py_spy),
        ):
            traced = ", traced by bench/api_trace.py" if trace else ""
            figure("hermesd", api, note=f"pid {pid}, auto_titles {'off' if args.no_titles else 'on'}{traced}")
            if args.sequential > 0:
                result = run_sequential(args, model_url, api, expected, pid)
                errors = result.errors
            if args.requests > 0:
                errors += run_concurrent(args, f"{api}/v1/chat/completions", expected, pid, model_pid)
            stats: dict[str, int] = asyncio.run(fetch_json(model_url + "/stats"))
            figure(
                "model_calls",
                sum(stats.values()),
                "",
                f"{stats.get('stream', 0)} streamed, {stats.get('complete', 0)} not (hermesd's session titles)",
            )
        if trace is not None and result is not None:  # hermesd wrote its marks as it stopped
            report_trace(result.through, result.timings, json.loads(trace.read_text(encoding="utf-8") or "{}"))
    finally:
        if trace is not None:
            trace.unlink(missing_ok=True)
    figure("runtime", time.perf_counter() - began, "s", f"load average {load_average()} at the end")
    if result is not None:
        verdict = "met" if result.overhead_ms <= args.target_ms else "MISSED"
        print(f"target overhead_p50 <= {args.target_ms:g} ms: {verdict} ({result.overhead_ms:.2f} ms)", flush=True)
    return 1 if errors else 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests, a few seconds")
    parser.add_argument("--sequential", type=int, default=200, help="timed sequential requests each way (0: skip)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed sequential requests each way first")
    parser.add_argument("--clients", type=int, default=50, help="concurrent streaming clients")
    parser.add_argument(
        "--requests", type=int, default=2000, help="bound of the concurrent part, in requests (0: skip)"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="bound of the concurrent part, in seconds")
    parser.add_argument("--first-token-ms", type=float, default=10.0, help="the model's delay to its first delta")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="the model's gap between deltas")
    parser.add_argument("--tokens", type=int, default=20, help="content deltas per answer")
    parser.add_argument("--target-ms", type=float, default=5.0, help="the target of overhead_p50")
    parser.add_argument("--no-titles", action="store_true", help="runtime.auto_titles: false (no title calls)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"), help="hermesd's")
    parser.add_argument("--keep", type=Path, help="copy hermesd's home (its log, state.db) here at the end")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="run hermesd under bench/api_trace.py: the first token's path, step by step",
    )
    parser.add_argument("--py-spy", type=Path, help="record hermesd with py-spy into this file (.svg, .txt, .json)")
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    if parser.parse_args(argv).quick:  # smaller defaults; options given beside --quick still count
        parser.set_defaults(sequential=20, warmup=3, requests=100, seconds=5.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_model:
        asyncio.run(serve_model(ModelShape(args.first_token_ms / 1000, args.gap_ms / 1000, args.tokens)))
        return 0
    signal.signal(signal.SIGTERM, interrupted)
    try:
        return run(args)
    except KeyboardInterrupt:  # the context managers have stopped hermesd and the model by now
        print("# interrupted; hermesd and the model server are stopped", file=sys.stderr, flush=True)
        return 130


def interrupted(signum: int, frame: object) -> None:
    """SIGTERM ends the bench as Ctrl-C does, so that it stops what it started."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
