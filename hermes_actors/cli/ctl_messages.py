"""``hermesctl messages``: what became of an accepted message, what could not be done, and running it again.

Every accepted message ends answered, refused with a reply (busy, the session ended, the agent gave no answer), or
dead-lettered with a reason (its turn failed, or its reply could not be delivered). ``show ID`` tells one message's
path: its inbox row, the session its turn ran in, its replies with their attempts and its dead letters (``ID`` is
the inbox row's id, or the platform's message id with ``--platform``). ``dead-letters`` lists what could not be
done, newest first; ``replay ID`` asks for it to be run again: a message whose turn failed runs as a new turn, a
reply that could not be delivered is sent again; the running ``hermesd`` does it within a few seconds, else its
next start.
"""

from __future__ import annotations

import click
import msgspec

from hermes_actors.cli.dead_letter_text import ask_replay, at, open_sql_reads, reason, replay_note
from hermes_actors.cli.formatting import one_line, render_table, truncate
from hermes_actors.cli.options import dsn_option, home_option, open_store, reports_errors
from hermes_actors.messages import decode_inbound, decode_outbound
from hermes_actors.store import StoreInterface
from hermes_actors.store.dead_letters import DeadLetterRow
from hermes_actors.store.records import InboxKind, InboxRow, InboxState

__all__ = ["MessageTrail", "messages", "trail"]


class ReplyView(msgspec.Struct, frozen=True, kw_only=True):
    """A reply to the message and what became of it."""

    outbox_id: int
    state: str
    attempts: int
    queued_at: float
    sent_at: float | None
    given_up_at: float | None
    last_error: str | None


class MessageTrail(msgspec.Struct, frozen=True, kw_only=True):
    """One accepted message's path, as ``show`` prints it (``--json``)."""

    inbox_id: int
    platform: str
    account_id: str
    message_id: str
    chat_id: str | None
    user_id: str | None
    text: str
    received_at: float
    inbox_state: str
    session_id: str | None
    outcome: str  # pending, answered, refused, dead_lettered
    replies: list[ReplyView]
    dead_letters: list[DeadLetterRow]


def trail(store: StoreInterface, row: InboxRow) -> MessageTrail:
    """What became of the message of inbox row ``row``."""
    inbound = decode_inbound(row.payload)
    chat = inbound.source.chat_id or None
    replies = [
        ReplyView(
            outbox_id=r.id,
            state=str(r.state),
            attempts=r.attempts,
            queued_at=r.created_at,
            sent_at=r.sent_at,
            given_up_at=r.abandoned_at,
            last_error=r.last_error,
        )
        for r in store.deliveries.to_chat(row.platform, row.account_id, chat, since=row.received_at)
        if row.platform_message_id in decode_outbound(r.payload).answers
    ]
    letters = store.dead_letters.of_inbox(row.id)
    if any(letter.replayed_at is None for letter in letters):
        outcome = "dead_lettered"
    elif row.state is InboxState.PENDING:
        outcome = "pending"
    else:
        outcome = "refused" if row.state is InboxState.REJECTED else "answered"
    return MessageTrail(
        inbox_id=row.id,
        platform=row.platform,
        account_id=row.account_id,
        message_id=row.platform_message_id,
        chat_id=chat,
        user_id=inbound.source.participant_id,
        text=inbound.text,
        received_at=row.received_at,
        inbox_state=str(row.state),
        session_id=row.session_id,
        outcome=outcome,
        replies=replies,
        dead_letters=letters,
    )


def _find(store: StoreInterface, reference: str, platform: str | None, account: str) -> InboxRow:
    """The message ``reference`` names: an inbox row id, or with ``platform`` that platform's message id."""
    if platform is not None:
        row = store.inbox.find(platform, account, reference)
    elif reference.isdigit():
        row = store.inbox.get(int(reference))
    else:
        raise click.ClickException(
            f"{reference!r} is not an inbox id; name a platform's message id with --platform (and --account)"
        )
    if row is None or row.kind is not InboxKind.MESSAGE:
        raise click.ClickException(f"no message {reference!r} in the inbox (answered rows go after queue retention)")
    return row


def _outcome_line(found: MessageTrail) -> str:
    match found.outcome:
        case "pending":
            return "Outcome: pending: its turn has not committed yet."
        case "dead_lettered":
            last = found.dead_letters[-1]
            return (
                f"Outcome: dead-lettered: {one_line(last.reason)}. Run it again with: hermesctl messages replay "
                f"{found.inbox_id}"
            )
        case "refused":
            return "Outcome: refused with a reply."
    waiting = [r for r in found.replies if r.state in ("queued", "retrying")]
    return "Outcome: answered; its reply waits to be sent." if waiting else "Outcome: answered."


def _show_lines(found: MessageTrail) -> list[str]:
    account = f" (account {found.account_id})" if found.account_id else ""
    lines = [
        f"Message {found.inbox_id}: {found.platform}{account}, platform message {one_line(found.message_id)}",
        f"  From:      chat {one_line(found.chat_id or '-')}, user {one_line(found.user_id or '-')}",
        f"  Received:  {at(found.received_at)}",
        f"  Text:      {truncate(one_line(found.text), 100)}",
        f"  Inbox:     {found.inbox_state}" + (f", session {found.session_id}" if found.session_id else ""),
    ]
    lines.append("  Replies:" if found.replies else "  Replies:   none")
    for r in found.replies:
        when = {"sent": f" {at(r.sent_at)}", "dead": f" (given up {at(r.given_up_at)})"}.get(r.state, "")
        error = f": {reason(r.last_error)}" if r.last_error and r.state != "sent" else ""
        lines.append(f"    outbox {r.outbox_id}: {r.state}{when}, {r.attempts} attempts{error}")
    if found.dead_letters:
        lines.append("  Dead letters:")
    for letter in found.dead_letters:
        replayed = f" (replayed {at(letter.replayed_at)})" if letter.replayed_at is not None else ""
        lines.append(f"    #{letter.id} {at(letter.created_at)}: {reason(letter.reason)}{replayed}")
    lines.append(_outcome_line(found))
    return lines


@click.group("messages")
def messages() -> None:
    """What became of accepted messages; dead letters and their replay."""


@messages.command("show")
@click.argument("reference", metavar="ID")
@click.option("--platform", default=None, help="ID is this platform's message id, not an inbox row id.")
@click.option("--account", default="", help="With --platform: the account that received it.")
@click.option("--json", "as_json", is_flag=True, help="Print the message's path as JSON.")
@home_option
@dsn_option
@reports_errors
def show(reference: str, platform: str | None, account: str, as_json: bool, home: str | None, dsn: str | None) -> None:
    """Tell one message's path: its inbox row, its session, its replies' attempts, its dead letters."""
    with open_sql_reads(home, dsn) as store:
        found = trail(store, _find(store, reference, platform, account))
    if as_json:
        click.echo(msgspec.json.encode(found).decode())
        return
    for line in _show_lines(found):
        click.echo(line)


@messages.command("dead-letters")
@click.option("--all", "everything", is_flag=True, help="Also those replayed since.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@home_option
@dsn_option
@reports_errors
def dead_letters(everything: bool, limit: int, as_json: bool, home: str | None, dsn: str | None) -> None:
    """List the messages that could not be done, newest first, with why."""
    with open_sql_reads(home, dsn) as store:
        rows = store.dead_letters.listed(messages=True, open_only=not everything, limit=limit)
    if as_json:
        click.echo(msgspec.json.encode(rows).decode())
        return
    if not rows:
        click.echo("No dead letters." if everything else "No dead letters waiting for a replay.")
        return
    table = [
        [
            str(row.id),
            str(row.inbox_id),
            row.platform,
            at(row.created_at),
            "replayed" if row.replayed_at else "asked" if row.replay_requested_at else "-",
            reason(row.reason),
        ]
        for row in rows
    ]
    for line in render_table(
        ["ID", "MESSAGE", "PLATFORM", "DEAD SINCE", "REPLAY", "REASON"], table, right_aligned=(0, 1)
    ):
        click.echo(line)
    click.echo(
        "Run one again with 'hermesctl messages replay MESSAGE'; 'hermesctl messages show MESSAGE' tells its path."
    )


@messages.command("replay")
@click.argument("inbox_id", metavar="ID", type=int)
@home_option
@reports_errors
def replay(inbox_id: int, home: str | None) -> None:
    """Run the dead-lettered message ID again: a failed turn as a new turn, an undelivered reply sent again."""
    with open_store(home) as store:
        row = store.inbox.get(inbox_id)
    if row is None or row.kind is not InboxKind.MESSAGE:
        raise click.ClickException(f"no message {inbox_id} in the inbox; 'hermesctl messages dead-letters' lists them")
    asked = ask_replay(home, inbox_id=inbox_id)
    if not asked:
        raise click.ClickException(
            f"message {inbox_id} has no dead letter waiting for a replay ('hermesctl messages show {inbox_id}' tells "
            "what became of it)"
        )
    what = "its reply sent again" if any(letter.outbox_id is not None for letter in asked) else "run again"
    click.echo(f"Message {inbox_id} will be {what}: {replay_note(home)}.")
