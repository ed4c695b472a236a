"""The resume recap panel's rules."""

from __future__ import annotations

import json

from hermes_actors.lifecycle.recap import recap_lines
from hermes_actors.store.records import MessageRecord, Role


def _message(index: int, role: Role, content: str | None, tool_calls: str | None = None) -> MessageRecord:
    return MessageRecord(
        id=index, session_id="s", role=role, content=content, tool_calls=tool_calls, created_at=float(index)
    )


def _transcript(exchanges: int) -> list[MessageRecord]:
    out: list[MessageRecord] = []
    for n in range(exchanges):
        out.append(_message(len(out), Role.USER, f"question {n}"))
        out.append(_message(len(out), Role.ASSISTANT, f"answer {n}"))
    return out


def test_only_the_last_ten_exchanges_show_with_a_count_of_the_earlier_messages() -> None:
    lines = recap_lines(_transcript(14))
    assert lines[0] == "… 8 earlier messages …"
    assert lines[1] == "you: question 4"
    assert lines[-1] == "agent: answer 13"
    assert sum(line.startswith("you: ") for line in lines) == 10


def test_short_transcripts_have_no_earlier_line() -> None:
    assert recap_lines(_transcript(2)) == ["you: question 0", "agent: answer 0", "you: question 1", "agent: answer 1"]


def test_user_text_is_cut_at_300_and_assistant_at_3_lines_or_200_but_the_last_reply_is_whole() -> None:
    long_user = "u" * 500
    long_answer = "a" * 500
    many_lines = "\n".join(f"line {n}" for n in range(8))
    transcript = [
        _message(0, Role.USER, long_user),
        _message(1, Role.ASSISTANT, long_answer),
        _message(2, Role.USER, "more"),
        _message(3, Role.ASSISTANT, many_lines),
        _message(4, Role.USER, "last"),
        _message(5, Role.ASSISTANT, long_answer + "\n" + many_lines),
    ]
    lines = recap_lines(transcript)
    assert lines[0] == "you: " + "u" * 299 + "…"
    assert lines[1] == "agent: " + "a" * 199 + "…"
    assert lines[3] == "agent: line 0\nline 1\nline 2 …"
    assert lines[-1] == "agent: " + long_answer + "\n" + many_lines


def test_tool_calls_fold_into_one_line_and_tool_results_are_left_out() -> None:
    calls = json.dumps(
        [
            {"id": "1", "type": "function", "function": {"name": "search", "arguments": "{}"}},
            {"id": "2", "type": "function", "function": {"name": "fetch", "arguments": "{}"}},
        ]
    )
    transcript = [
        _message(0, Role.USER, "find it"),
        _message(1, Role.ASSISTANT, None, calls),
        _message(2, Role.TOOL, "secret tool output"),
        _message(3, Role.ASSISTANT, "found it"),
    ]
    assert recap_lines(transcript) == ["you: find it", "  [2 tool calls: search, fetch]", "agent: found it"]
