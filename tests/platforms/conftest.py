"""The gateway fixture every platform's tests start their adapter with."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.base import Adapter, Inbox, ReplySender
from tests.platforms.support import StartGateway


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[StartGateway]:
    """See :class:`tests.platforms.support.StartGateway`; every call opens the same ``tmp_path / "state.db"``."""
    with ExitStack() as stack:

        def start(
            adapter: Adapter,
            *,
            senders: Sequence[ReplySender] = (),
            inbox_for: Callable[[Inbox], Inbox] | None = None,
            **options: Any,
        ) -> Gateway:
            options.setdefault("config", RuntimeConfig(outbox_retry_base_s=0.05))
            gateway = Gateway(tmp_path / "state.db", senders=[*adapter.senders(), *senders], **options)
            stack.callback(gateway.stop)
            inbox = GatewayInbox(gateway)
            adapter.start(inbox_for(inbox) if inbox_for is not None else inbox)
            stack.callback(adapter.stop)
            return gateway

        yield start
