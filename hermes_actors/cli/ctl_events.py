"""``hermesctl events deliveries`` and ``hermesctl events replay``: the event webhooks' deliveries as they stand,
and a dead one sent again.

A delivery is an outbox row of platform ``events``: one event for one webhook (``events.webhooks.<name>``), sent
with the event's id as ``webhook-id`` on every attempt. ``deliveries`` lists the newest first with their state
(``queued``, ``retrying``, ``sent`` or ``dead``: given up after ``give_up_after_s``), attempts and last error;
``replay ID`` asks for a dead one to be sent again, as it was (same id and body), by the running
``hermesd`` within a few seconds, or at its next start.
"""

from __future__ import annotations

import click
import msgspec

from hermes_actors.cli.dead_letter_text import ask_replay, at, open_sql_reads, reason, replay_note
from hermes_actors.cli.formatting import render_table
from hermes_actors.cli.options import dsn_option, home_option, open_store, reports_errors
from hermes_actors.config import EVENTS_PLATFORM
from hermes_actors.messages import decode_outbound
from hermes_actors.store.deliveries import DeliveryRow, DeliveryState

__all__ = ["DeliveryView", "events"]


class DeliveryView(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery as ``--json`` prints it."""

    id: int
    webhook: str
    event_id: str | None
    type: str | None
    state: DeliveryState
    attempts: int
    queued_at: float
    sent_at: float | None
    given_up_at: float | None
    next_attempt_at: float | None
    last_error: str | None


def view(row: DeliveryRow) -> DeliveryView:
    """What a delivery row says, its event's id and type read from its body."""
    message = decode_outbound(row.payload)
    try:
        kind = msgspec.json.decode(message.text).get("type")
    except (msgspec.DecodeError, AttributeError):
        kind = None
    return DeliveryView(
        id=row.id,
        webhook=row.account_id,
        event_id=message.reply_to,
        type=kind if isinstance(kind, str) else None,
        state=row.state,
        attempts=row.attempts,
        queued_at=row.created_at,
        sent_at=row.sent_at,
        given_up_at=row.abandoned_at,
        next_attempt_at=row.next_attempt_at if row.state is DeliveryState.RETRYING else None,
        last_error=row.last_error,
    )


@click.group("events")
def events() -> None:
    """The event webhooks' deliveries (events.webhooks in config.yaml)."""


@events.command("deliveries")
@click.option("--webhook", default=None, help="Only this webhook's deliveries (its name in events.webhooks).")
@click.option(
    "--state", type=click.Choice([s.value for s in DeliveryState]), default=None, help="Only deliveries in this state."
)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@home_option
@dsn_option
@reports_errors
def deliveries(
    webhook: str | None,
    state: str | None,
    limit: int,
    as_json: bool,
    home: str | None,
    dsn: str | None,
) -> None:
    """List event deliveries, newest first: state, attempts, last error ('events replay ID' sends a dead one
    again)."""
    chosen = DeliveryState(state) if state is not None else None
    with open_sql_reads(home, dsn) as store:
        rows = store.deliveries.of_platform(EVENTS_PLATFORM, account_id=webhook, state=chosen, limit=limit)
    views = [view(row) for row in rows]
    if as_json:
        click.echo(msgspec.json.encode(views).decode())
        return
    if not views:
        click.echo("No event deliveries.")
        return
    table = [
        [
            str(v.id),
            v.webhook,
            v.type or "?",
            v.event_id or "-",
            str(v.state),
            str(v.attempts),
            at(v.queued_at),
            reason(v.last_error, 60) if v.state is not DeliveryState.SENT else "-",
        ]
        for v in views
    ]
    headers = ["ID", "WEBHOOK", "TYPE", "EVENT", "STATE", "ATTEMPTS", "QUEUED", "LAST ERROR"]
    for line in render_table(headers, table, right_aligned=(0, 5)):
        click.echo(line)
    dead = sum(1 for v in views if v.state is DeliveryState.DEAD)
    if dead:
        noun = "dead delivery" if dead == 1 else "dead deliveries"
        click.echo(f"{dead} {noun}: send one again with 'hermesctl events replay ID'.")


@events.command("replay")
@click.argument("delivery_id", metavar="ID", type=int)
@home_option
@reports_errors
def replay(delivery_id: int, home: str | None) -> None:
    """Send the dead delivery ID again (same event id and body); it is retried and given up as a new one is."""
    with open_store(home) as store:
        row = store.deliveries.get(delivery_id)
    if row is None or row.platform != EVENTS_PLATFORM:
        raise click.ClickException(
            f"no event delivery {delivery_id}; 'hermesctl events deliveries --state dead' lists the dead ones"
        )
    if row.state is not DeliveryState.DEAD:
        raise click.ClickException(
            f"delivery {delivery_id} is {row.state}, not dead: only a delivery that was given up is replayed"
        )
    if not ask_replay(home, outbox_id=delivery_id):
        raise click.ClickException(f"delivery {delivery_id} has no dead letter to replay")
    click.echo(f"Delivery {delivery_id} to webhook '{row.account_id}' will be sent again: {replay_note(home)}.")
