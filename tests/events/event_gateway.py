"""A gateway whose outbox sends events to webhooks, for the event tests: :func:`gateway_with`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hermes_actors.config import EventsConfig, RuntimeConfig
from hermes_actors.daemon.startup import queued_at
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakePlatform
from platforms.support.event_webhooks import EventSender

__all__ = ["gateway_with"]


@contextmanager
def gateway_with(home: Path, config: EventsConfig, **sender: Any) -> Iterator[tuple[Gateway, FakePlatform]]:
    """A gateway on ``home``'s state.db whose outbox sends events to ``config``'s webhooks (quick retries)."""
    db = home / "state.db"
    fake = FakePlatform()
    events = EventSender(config, queued_at=sender.pop("queued_at", queued_at(db)), environ={}, **sender)
    gateway = Gateway(
        db,
        config=RuntimeConfig(outbox_retry_base_s=0.2),
        senders=[fake, events],
        events=config,
        tick_interval_s=0.2,
    )
    fake.attach(gateway)
    try:
        yield gateway, fake
    finally:
        gateway.stop(timeout=10)
