"""Crash safety of a real gateway process killed with SIGKILL at random points and restarted.

The test plays the platform: it posts messages to ``tests.runtime.crash_worker`` over stdin, counts a message as
acknowledged only when its ``ACK``/``DUP`` line has been read, and after every kill redelivers what was not
acknowledged (plus, sometimes, what was). After a last clean run the database and the delivery log must show
exactly one turn per message, contiguous transcripts in acknowledgement order, and no unflagged second delivery.
"""

from __future__ import annotations

import contextlib
import queue
import random
import signal
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import IO

import msgspec
import pytest

from hermes_actors.messages import OutboundMessage, decode_outbound
from hermes_actors.store import Store
from tests.runtime.conftest import assert_turns_are_contiguous
from tests.runtime.crash_worker import Delivered, Posted

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 20.0  # any single wait on the worker; a healthy one answers in milliseconds

_encoder = msgspec.json.Encoder()
_log_decoder = msgspec.json.Decoder(Delivered)


class Worker:
    """One run of the crash worker: its pipes, and a thread reading its stdout.

    ``kill_after=(verbs, n)`` makes the reading thread SIGKILL the worker as soon as it has read the ``n``-th line
    starting with one of ``verbs`` (so within a fraction of a millisecond of, say, a reply reaching the log).
    """

    def __init__(self, db: Path, log: Path, stderr: Path, *, kill_after: tuple[frozenset[str], int] | None) -> None:
        self.stderr_path = stderr
        self._kill_after = kill_after
        self._seen = 0
        self._ended = False
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        with stderr.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.runtime.crash_worker", "--db", str(db), "--log", str(log)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, name="crash-worker-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        try:
            for raw in stdout:
                line = raw.rstrip("\n")
                self._lines.put(line)
                if self._kill_after is not None:
                    verbs, count = self._kill_after
                    if line.split(" ", 1)[0] in verbs:
                        self._seen += 1
                        if self._seen == count:
                            self.process.kill()
        finally:
            self._lines.put(None)

    def describe(self) -> str:
        """Return the worker's exit status and the end of its stderr, for assertion messages."""
        tail = self.stderr_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        return f"worker exit status {self.process.poll()}; stderr ends with:\n{tail}"

    def next_line(self) -> str | None:
        """Return the next stdout line, or ``None`` once stdout has ended."""
        if self._ended:
            return None
        try:
            line = self._lines.get(timeout=WAIT_S)
        except queue.Empty:
            raise AssertionError(f"the worker wrote nothing for {WAIT_S} s; {self.describe()}") from None
        self._ended = line is None
        return line

    def wait_ready(self) -> bool:
        """Wait for ``READY``; return False when the worker died first (killed on purpose)."""
        while (line := self.next_line()) is not None:
            if line == "READY":
                return True
            assert line.startswith("SENT "), f"unexpected line before READY: {line!r}"
        return False

    def post(self, messages: list[Posted]) -> None:
        """Write ``messages`` to stdin; a worker killed meanwhile simply misses the rest."""
        assert self.process.stdin is not None
        data = "".join(_encoder.encode(m).decode() + "\n" for m in messages)
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except BrokenPipeError:
            assert self._kill_after is not None, f"the worker closed stdin; {self.describe()}"

    def close_stdin(self) -> None:
        """Signal the end of the platform's messages."""
        assert self.process.stdin is not None
        self.process.stdin.close()

    def wait_exit(self) -> int:
        """Wait for the process and its stdout reader to end; return the exit status."""
        try:
            status = self.process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not exit within {WAIT_S} s; {self.describe()}") from None
        self._reader.join(WAIT_S)
        return status

    def stop(self) -> None:
        """Kill the worker if it still runs and release its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WAIT_S)
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        self._reader.join(WAIT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()


class Platform:
    """The platform's side: the messages to post, what was posted and what the worker acknowledged."""

    def __init__(self, rng: random.Random, *, chats: int, messages: int) -> None:
        self.rng = rng
        self.unposted: list[Posted] = []
        for n in range(messages):
            chat = rng.randrange(chats)
            self.unposted.append(Posted(chat=f"chat-{chat}", user=f"user-{chat}", id=f"m{n}", text=f"c{chat} n{n}"))
        self.unposted.reverse()  # pop() takes the oldest
        self.posted: set[str] = set()
        self.unacked: list[Posted] = []  # posted, never acknowledged, in posting order
        self.acked: dict[str, Posted] = {}  # in first-acknowledgement order
        self.duplicates_reported = 0

    def next_batch(self, new: int, *, resend_acked: int = 0) -> list[Posted]:
        """Return what to post now: some acknowledged messages again, every unacknowledged one, ``new`` new ones."""
        again = self.rng.sample(list(self.acked.values()), min(resend_acked, len(self.acked)))
        fresh = [self.unposted.pop() for _ in range(min(new, len(self.unposted)))]
        self.unacked.extend(fresh)
        return again + list(self.unacked)

    def take_responses(self, worker: Worker, batch: list[Posted]) -> int:
        """Read the worker's answers to ``batch`` until it ends or answered all; return how many it answered."""
        answered = 0
        while answered < len(batch):
            line = worker.next_line()
            if line is None:
                break
            verb, _, message_id = line.partition(" ")
            if verb == "SENT":
                continue
            expected = batch[answered]
            assert message_id == expected.id, f"answer {line!r} where {expected.id} was due; {worker.describe()}"
            assert verb in ("ACK", "DUP"), f"unexpected line {line!r}"
            if expected.id in self.acked:
                assert verb == "DUP", f"{expected.id} was acknowledged before, yet accepted again"
            elif expected.id not in self.posted:
                assert verb == "ACK", f"{expected.id} was never posted, yet reported as a duplicate"
            if verb == "DUP":
                self.duplicates_reported += 1
            self.posted.add(expected.id)
            if expected.id not in self.acked:
                self.acked[expected.id] = expected
                self.unacked.remove(expected)
            answered += 1
        for message in batch:
            self.posted.add(message.id)
        return answered


class CrashRun:
    """Worker runs on one database and delivery log, killed or clean, each checked against the platform."""

    def __init__(self, tmp_path: Path, platform: Platform) -> None:
        self.db = tmp_path / "state.db"
        self.log = tmp_path / "deliveries.jsonl"
        self.tmp_path = tmp_path
        self.platform = platform
        self.runs = 0
        self.kills = 0

    def _start(self, kill_after: tuple[frozenset[str], int] | None) -> Worker:
        self.runs += 1
        return Worker(self.db, self.log, self.tmp_path / f"worker-{self.runs}.stderr", kill_after=kill_after)

    def killed(self, *, new: int, resend_acked: int, mode: str, rng: random.Random) -> None:
        """Start a worker, post a batch and let it be SIGKILLed at a point chosen by ``mode``.

        ``ready``: right after READY (recovery in flight); ``answers``: after a random number of ACK/DUP lines;
        ``sent``: right after a random one of the first replies this run delivers.
        """
        batch = self.platform.next_batch(new, resend_acked=resend_acked)
        # Each chat with a never-posted message gets at least one reply in this run, so that many SENT lines come.
        fresh_chats = len({m.chat for m in batch if m.id not in self.platform.posted})
        kill_after: tuple[frozenset[str], int]
        if mode == "ready" or not batch:
            kill_after = (frozenset({"READY"}), 1)
        elif mode == "sent" and fresh_chats:
            kill_after = (frozenset({"SENT"}), rng.randint(1, fresh_chats))
        else:
            kill_after = (frozenset({"ACK", "DUP"}), rng.randint(1, len(batch)))
        worker = self._start(kill_after)
        try:
            if worker.wait_ready():
                worker.post(batch)
                self.platform.take_responses(worker, batch)
                while worker.next_line() is not None:  # replies delivered until the kill
                    pass
            status = worker.wait_exit()
            assert status == -signal.SIGKILL, f"the worker was to be killed; {worker.describe()}"
            self.kills += 1
        finally:
            worker.stop()

    def clean(self, *, resend_acked: int) -> None:
        """Post everything left (and unacknowledged), close stdin and wait for DONE and exit status 0."""
        batch = self.platform.next_batch(len(self.platform.unposted), resend_acked=resend_acked)
        worker = self._start(None)
        try:
            assert worker.wait_ready(), worker.describe()
            worker.post(batch)
            worker.close_stdin()
            assert self.platform.take_responses(worker, batch) == len(batch), worker.describe()
            rest = []
            while (line := worker.next_line()) is not None:
                rest.append(line)
            assert rest[-1:] == ["DONE"], f"no DONE: {rest[-3:]}; {worker.describe()}"
            assert all(line.startswith("SENT ") for line in rest[:-1]), rest
            assert worker.wait_exit() == 0, worker.describe()
        finally:
            worker.stop()
        assert not self.platform.unacked
        assert not self.platform.unposted


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """What the verified database and log hold."""

    sessions: int
    turns: int
    merged_turns: int
    deliveries: int
    flagged_redeliveries: int


def assert_crash_safe(db: Path, log: Path, platform: Platform) -> Summary:
    """Check the database and delivery log after the last clean exit against what the platform saw acknowledged."""
    lines = log.read_text(encoding="utf-8").splitlines()
    delivered = [_log_decoder.decode(line) for line in lines]
    with Store.open(db, readonly=True) as store:
        db_conn = store._connection
        assert store.inbox.pending() == []
        not_done = db_conn.execute("SELECT platform_message_id, state FROM inbox WHERE state != 'done'").fetchall()
        assert not_done == [], f"inbox rows not answered by a turn: {not_done}"
        unsent = db_conn.execute("SELECT id, attempts FROM outbox WHERE sent_at IS NULL").fetchall()
        assert unsent == [], f"outbox rows never marked sent (id, attempts): {unsent}"

        user_ids = [
            str(message_id)
            for (message_id,) in db_conn.execute("SELECT platform_message_id FROM messages WHERE role = 'user'")
        ]
        counts = Counter(user_ids)
        assert {m: c for m, c in counts.items() if c != 1} == {}, "messages stored in more than one turn"
        assert set(counts) == set(platform.acked), "stored user messages differ from the acknowledged ones"

        sessions = store.list_sessions(limit=None)
        by_chat: dict[str | None, list[str]] = defaultdict(list)
        turns = merged = 0
        for session in sessions:
            assert session.chat_id not in by_chat, f"{session.chat_id} has more than one session"
            transcript = store.load_transcript(session.id)
            assert_turns_are_contiguous(transcript)
            by_chat[session.chat_id] = [m.platform_message_id or "" for m in transcript if m.role == "user"]
            run = 0
            for message in transcript:
                if message.role == "user":
                    run += 1
                elif message.role == "assistant" and message.content is not None:
                    turns += 1
                    merged += run > 1
                    run = 0
        acked_by_chat: dict[str | None, list[str]] = defaultdict(list)
        for posted in platform.acked.values():
            acked_by_chat[posted.chat].append(posted.id)
        assert dict(by_chat) == dict(acked_by_chat), "user messages are not in acknowledgement order per chat"

        rows = db_conn.execute("SELECT id, session_id, payload FROM outbox ORDER BY id").fetchall()
        assert len(rows) == turns, f"{len(rows)} outbox rows for {turns} turns"
        replies: dict[str, tuple[int, OutboundMessage]] = {}
        for outbox_id, session_id, payload in rows:
            assert isinstance(outbox_id, int)
            assert isinstance(payload, bytes)
            reply = decode_outbound(payload)
            assert reply.session_id == session_id
            assert reply.reply_to is not None
            assert reply.reply_to not in replies, f"two outbox rows answer {reply.reply_to}"
            replies[reply.reply_to] = (outbox_id, reply)

    by_reply: dict[str | None, list[Delivered]] = defaultdict(list)
    for line in delivered:
        by_reply[line.reply_to].append(line)
    assert set(by_reply) <= set(replies), f"deliveries of replies the store never had: {set(by_reply) - set(replies)}"
    for reply_to, (outbox_id, reply) in replies.items():
        copies = by_reply.get(reply_to, [])
        assert copies, f"outbox row {outbox_id} (reply to {reply_to}) was marked sent but never delivered"
        expected = (reply.session_id, reply.chat_id, reply.text)
        assert all((c.session_id, c.chat_id, c.text) == expected for c in copies), copies
        unflagged = [c for c in copies[1:] if not c.possible_duplicate]
        assert not unflagged, f"reply to {reply_to} delivered again without possible_duplicate: {copies}"
    committed: dict[str | None, list[str]] = defaultdict(list)
    for reply_to, (_, reply) in replies.items():  # in outbox id order
        committed[reply.chat_id].append(reply_to)
    first_delivered: dict[str | None, list[str]] = defaultdict(list)
    for first, copies in by_reply.items():  # in order of first delivery
        if first is not None:
            first_delivered[copies[0].chat_id].append(first)
    assert first_delivered == committed, "a chat got its replies in another order than they were committed"
    return Summary(
        sessions=len(sessions),
        turns=turns,
        merged_turns=merged,
        deliveries=len(delivered),
        flagged_redeliveries=len(delivered) - len(replies),
    )


@pytest.mark.slow
def test_a_gateway_killed_after_some_acknowledgements_loses_and_repeats_nothing(tmp_path: Path) -> None:
    rng = random.Random(1)
    platform = Platform(rng, chats=5, messages=50)
    run = CrashRun(tmp_path, platform)
    run.killed(new=30, resend_acked=0, mode="answers", rng=random.Random(7))
    run.clean(resend_acked=3)
    assert run.kills == 1
    summary = assert_crash_safe(run.db, run.log, platform)
    assert summary.sessions == 5
    assert platform.duplicates_reported >= 3


@pytest.mark.slow
def test_a_gateway_killed_two_dozen_times_at_random_points_loses_and_repeats_nothing(tmp_path: Path) -> None:
    rng = random.Random(20251130)
    platform = Platform(rng, chats=20, messages=400)
    run = CrashRun(tmp_path, platform)
    modes = ["ready"] * 3 + ["answers"] * 11 + ["sent"] * 10
    rng.shuffle(modes)
    for mode in modes:
        run.killed(new=rng.randint(5, 25), resend_acked=rng.choice([0, 0, 1, 3]), mode=mode, rng=rng)
    run.clean(resend_acked=5)
    assert run.kills == len(modes) >= 20
    summary = assert_crash_safe(run.db, run.log, platform)
    assert summary.sessions == 20
    assert summary.flagged_redeliveries > 0, "no kill fell between a delivery and its mark_sent"
