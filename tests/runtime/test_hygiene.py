from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from hermes_actors.agents.base import AgentReply, EchoAgent, TurnInput
from hermes_actors.agents.history import HEAD_SHARE, ModelHistory, cap_message, cap_text, is_capped, is_summary
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.config import MIN_MESSAGE_CAP_CHARS, RuntimeConfig
from hermes_actors.errors import ConfigError
from hermes_actors.search import session_search
from hermes_actors.store import MessageRecord, Role
from hermes_actors.store.content import store_content
from tests.runtime.conftest import MakeGateway

KEY = "agent:main:fake:dm:chat-1"
CAP = 600
MIDDLE_WORD = "zanzibarquokka"


def pasted_log(lines: int = 400) -> str:
    """A log of ``lines`` lines with a rare word in the middle and the failure at the end."""
    body = [f"2026-01-05 10:{i // 60:02d}:{i % 60:02d} INFO step {i} ok" for i in range(lines)]
    body[lines // 2] = f"2026-01-05 10:03:20 WARN {MIDDLE_WORD} cache miss"
    return "\n".join(["$ make deploy", *body, "ERROR: deploy failed: disk full on /var"])


class RecordingAgent(EchoAgent):
    """Echoes, and keeps what each turn was given (its history as it was then: the session appends to it)."""

    def __init__(self) -> None:
        self.turns: list[TurnInput] = []

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.turns.append(msgspec.structs.replace(turn, history=list(turn.history)))
        return super().run_turn(turn, timeout_s=timeout_s)


class BriefAgent(EchoAgent):
    """Echoes; its summaries are one line (the echo agent's quote every user message, logs too)."""

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        return f"{len(history)} messages of pasted logs"


def message(content: str | None, *, role: Role = Role.USER, id: int = 7) -> MessageRecord:
    return MessageRecord(id=id, session_id="20260105_100000_abcdef12", role=role.value, content=content, created_at=0)


def test_a_text_within_the_cap_is_sent_whole() -> None:
    assert cap_text("short", 500, session_id="s", message_id=1) == "short"
    assert cap_text("x" * 500, 500, session_id="s", message_id=1) == "x" * 500
    assert cap_text("x" * 5000, 0, session_id="s", message_id=1) == "x" * 5000


def test_a_long_text_keeps_its_head_and_tail_around_a_marker_that_says_where_the_rest_is() -> None:
    text = pasted_log()
    capped = cap_text(text, CAP, session_id="20260105_100000_abcdef12", message_id=42)
    assert len(capped) <= CAP
    head, _, rest = capped.partition("\n…[")
    _, _, tail = rest.partition("]…\n")
    assert head.startswith("$ make deploy\n2026-01-05 10:00:00 INFO step 0 ok")
    assert text.startswith(head)
    assert tail.endswith("\nERROR: deploy failed: disk full on /var")
    assert text.endswith(tail)
    missing = len(text) - len(head) - len(tail)
    assert missing > 10_000
    assert capped == (
        f"{head}\n…[cut: {missing:,} more characters are in the store; session_search with session_id "
        f"20260105_100000_abcdef12 and around_message_id 42 returns the whole message]…\n{tail}"
    )
    assert MIDDLE_WORD not in capped


@given(
    text=st.text(min_size=0, max_size=3000),
    cap=st.integers(min_value=MIN_MESSAGE_CAP_CHARS, max_value=2500),
    message_id=st.integers(min_value=1, max_value=10**12),
)
def test_a_capped_text_fits_the_cap_and_loses_only_its_middle(text: str, cap: int, message_id: int) -> None:
    capped = cap_text(text, cap, session_id="20260105_100000_abcdef12", message_id=message_id)
    if len(text) <= cap:
        assert capped == text
        return
    assert len(capped) <= cap
    head, _, rest = capped.partition("\n…[cut: ")
    marker, _, tail = rest.partition("]…\n")
    missing = int(marker.split(" ", 1)[0].replace(",", ""))
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + missing + len(tail) == len(text)
    assert abs(len(head) - round((len(head) + len(tail)) * HEAD_SHARE)) <= 1


def test_is_capped_and_is_summary_describe_how_the_model_sees_a_message() -> None:
    assert is_capped(message("x" * 501), 500)
    assert not is_capped(message("x" * 500), 500)
    assert not is_capped(message("x" * 5000), 0)
    assert not is_capped(message(None), 500)
    assert is_summary(message("[Summary of the conversation so far]\nwe did things", role=Role.SYSTEM))
    assert not is_summary(message("[Summary of the conversation so far]", role=Role.USER))
    short = message("fits")
    assert cap_message(short, 500) is short


def test_the_model_history_caps_new_messages_only_and_starts_over_for_a_new_transcript() -> None:
    view = ModelHistory(500)
    transcript = [message("a" * 2000, id=1), message("short", id=2)]
    first = list(view.of(transcript))
    assert [len(m.content or "") <= 500 for m in first] == [True, True]
    assert first[1] is transcript[1]
    transcript.append(message("b" * 2000, id=3))
    second = view.of(transcript)
    assert second[:2] == first
    assert (second[2].content or "").startswith("b" * 100)
    assert view.tokens(transcript) == sum(len(m.content or "") for m in second) // 4
    other = [message("c", id=9)]
    assert [m.content for m in view.of(other)] == ["c"]
    assert all(sent is kept for sent, kept in zip(ModelHistory(0).of(transcript), transcript, strict=True))


@pytest.mark.parametrize("cap", [1, 100, MIN_MESSAGE_CAP_CHARS - 1, -5])
def test_a_cap_too_small_to_hold_the_marker_is_refused(cap: int) -> None:
    with pytest.raises(ConfigError, match=r"^runtime\.model_message_cap_chars: must be 0 \(no cap\) or at least 500"):
        RuntimeConfig(model_message_cap_chars=cap)


def test_caps_of_zero_and_from_the_minimum_up_are_accepted() -> None:
    assert RuntimeConfig(model_message_cap_chars=0).model_message_cap_chars == 0
    assert RuntimeConfig(model_message_cap_chars=MIN_MESSAGE_CAP_CHARS).model_message_cap_chars == 500
    assert RuntimeConfig().model_message_cap_chars == 16_000


def test_history_sent_to_the_model_is_capped_while_the_store_keeps_the_whole_text(make_gateway: MakeGateway) -> None:
    agent = RecordingAgent()
    gateway, fake = make_gateway(agent=agent, model_message_cap_chars=CAP)
    log = pasted_log()
    fake.push(log)
    fake.pop()
    fake.push("tool terminal " + log)
    fake.pop()
    fake.push("what failed?")
    fake.pop()
    assert gateway.wait_idle()
    pasted, with_tool, question = agent.turns
    assert pasted.user_text == log  # the current turn's text goes whole
    assert with_tool.user_text == "tool terminal " + log
    sent = question.history
    assert [m.role for m in sent] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert all(len(m.content or "") <= CAP for m in sent)
    capped = [m for m in sent if "…[cut: " in (m.content or "")]
    assert [m.role for m in capped] == ["user", "assistant", "user", "tool", "assistant"]
    assert all((m.content or "").rstrip("'\"").endswith("disk full on /var") for m in capped)
    assert question.history_tokens == sum(len(m.content or "") + len(m.tool_calls or "") for m in sent) // 4
    session_id = gateway.session_for(KEY)
    assert session_id is not None
    with gateway.read() as store:
        stored = store.load_transcript(session_id)
        assert stored[0].content == log
        assert [m.id for m in stored[:6]] == [m.id for m in sent]
        assert f"around_message_id {stored[0].id} returns" in (sent[0].content or "")
        hits = store.fts_query(MIDDLE_WORD).hits
        assert stored[0].id in {hit.message_id for hit in hits}
        assert stored[4].id in {hit.message_id for hit in store.fts_query(MIDDLE_WORD, roles=["tool"]).hits}
        scrolled = session_search(store, session_id=session_id, around_message_id=stored[0].id, window=1)
        assert [m.content for m in scrolled.messages if m.anchor] == [log]


def test_the_cached_transcript_stays_whole_so_a_larger_cap_later_sends_more(make_gateway: MakeGateway) -> None:
    agent = RecordingAgent()
    gateway, fake = make_gateway(agent=agent, model_message_cap_chars=0)
    log = pasted_log()
    fake.push(log)
    fake.pop()
    fake.push("and?")
    fake.pop()
    assert gateway.wait_idle()
    assert [m.content for m in agent.turns[1].history] == [log, "echo: " + log]


def test_capped_history_does_not_force_a_compression(make_gateway: MakeGateway) -> None:
    log = pasted_log(lines=280)
    window = 16_000
    assert 6 * len(log) // 4 > 0.85 * window > 6 * CAP // 4  # six messages: whole they need compressing, capped not
    for cap, compressed in ((CAP, False), (0, True)):
        gateway, fake = make_gateway(agent=BriefAgent(), model_message_cap_chars=cap, context_window=window)
        for turn in range(4):
            fake.push(f"{turn} {log}", chat_id=f"cap-{cap}", message_id=f"cap-{cap}-{turn}")
            fake.pop()
        assert gateway.wait_idle()
        with gateway.read() as store:
            session_id = gateway.session_for(f"agent:main:fake:dm:cap-{cap}")
            assert session_id is not None
            parent = store.get_session(session_id).parent_session_id
        assert (parent is not None) is compressed
        gateway.stop()


def test_a_summary_over_the_threshold_does_not_compress_again_on_every_turn(make_gateway: MakeGateway) -> None:
    log = pasted_log(lines=280)
    # The echo agent's summary quotes every user message: alone it is over the threshold.
    gateway, fake = make_gateway(model_message_cap_chars=0, context_window=16_000)
    key = "agent:main:fake:dm:loop"
    for turn in range(4):
        fake.push(f"{turn} {log}", chat_id="loop", message_id=f"loop-{turn}")
        fake.pop()
    assert gateway.wait_idle()
    # The first short question would go over the window with the child's history: it compresses once more.
    fake.push("short question", chat_id="loop", message_id="loop-next")
    assert fake.pop().text.endswith("short question")
    assert gateway.wait_idle()
    child = gateway.session_for(key)
    for n in range(3):
        fake.push(f"short question {n}", chat_id="loop", message_id=f"loop-more-{n}")
        assert fake.pop().text.endswith(f"short question {n}")
    assert gateway.wait_idle()
    assert gateway.session_for(key) == child  # the carried messages alone did not start another child
    gateway.stop()


def write_config(home: Path, runtime: dict[str, object]) -> None:
    (home / "config.yaml").write_text(json.dumps({"runtime": runtime}), encoding="utf-8")


def test_sessions_show_marks_capped_messages_and_compression_summaries(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    gateway, fake = make_gateway(protected_recent_messages=2)
    log = pasted_log()
    for text in ("hello", log, "short again"):
        fake.push(text)
        fake.pop()
    fake.push("/compress")
    fake.pop()
    assert gateway.wait_idle()
    child = gateway.session_for(KEY)
    assert child is not None
    with gateway.read() as store:
        parent = store.get_session(child).parent_session_id
    assert parent is not None
    home = db_path.parent
    write_config(home, {"model_message_cap_chars": CAP})
    shown = CliRunner().invoke(hermesctl, ["sessions", "show", parent, "--home", str(home)])
    assert shown.exit_code == 0, shown.output
    marked = [line for line in shown.stdout.splitlines() if "[capped for the model at 600 chars]" in line]
    assert len(marked) == 2
    assert marked[0].endswith("user [capped for the model at 600 chars]: $ make deploy")
    assert marked[1].endswith("assistant [capped for the model at 600 chars]: echo: $ make deploy")
    assert "user: hello" in shown.stdout
    assert "[summary]" not in shown.stdout
    summary = CliRunner().invoke(hermesctl, ["sessions", "show", child, "--home", str(home)])
    assert summary.exit_code == 0, summary.output
    first = next(line for line in summary.stdout.splitlines() if "system" in line)
    # The echo agent's summary quotes every user message, the log too.
    assert first.endswith("system [summary] [capped for the model at 600 chars]: [Summary of the conversation so far]")
    assert "user: short again" in summary.stdout
    as_json = CliRunner().invoke(hermesctl, ["sessions", "show", parent, "--json", "--home", str(home)])
    assert json.loads(as_json.stdout)["model_message_cap_chars"] == CAP


def test_sessions_show_uses_the_default_cap_and_marks_nothing_with_cap_zero(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    gateway, fake = make_gateway()
    fake.push("y" * 16_001)
    fake.pop()
    assert gateway.wait_idle()
    session_id = gateway.session_for(KEY)
    assert session_id is not None
    home = db_path.parent
    shown = CliRunner().invoke(hermesctl, ["sessions", "show", session_id, "--home", str(home)])
    assert shown.stdout.count("[capped for the model at 16,000 chars]") == 2
    write_config(home, {"model_message_cap_chars": 0})
    uncapped = CliRunner().invoke(hermesctl, ["sessions", "show", session_id, "--home", str(home)])
    assert uncapped.exit_code == 0, uncapped.output
    assert "[capped" not in uncapped.stdout
    write_config(home, {"model_message_cap_chars": 3})
    broken = CliRunner().invoke(hermesctl, ["sessions", "show", session_id, "--home", str(home)])
    assert broken.exit_code == 0, broken.output
    assert "Warning: runtime.model_message_cap_chars: must be 0 (no cap) or at least 500" in broken.stderr
    assert broken.stdout.count("[capped for the model at 16,000 chars]") == 2


def test_an_imported_multimodal_message_reaches_the_model_as_its_text_only() -> None:
    parts = [
        {"type": "text", "text": "look at this"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    structured = "\x00json:" + json.dumps(parts)
    stored = message(store_content(structured))
    for cap in (0, 500):
        (sent,) = ModelHistory(cap).of([stored])
        assert sent.content is not None
        assert "base64" not in sent.content
        assert sent.content.startswith("look at this")
        assert "\x00" not in sent.content
