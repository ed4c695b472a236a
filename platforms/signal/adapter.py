"""The Signal adapter: the event streams of every configured account in, the JSON-RPC sender out.

There is nothing to serve and no secret: signal-cli's HTTP daemon has no authentication, which is why it should
listen on loopback only (a non-loopback ``url`` is warned about at start). What is checked instead is the
stream itself: an answer that is not ``text/event-stream``, an account signal-cli does not have (400) or a
refused Host header (421) is logged with the fix and retried with backoff, and an event for an account other
than its stream's is refused, so nothing is stored from a stream that is not what it claims to be.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from platforms.base import Capabilities, ReplySender
from platforms.signal.config import SignalConfig
from platforms.signal.envelopes import PLATFORM
from platforms.signal.events import EventStreams, events_url
from platforms.signal.sender import SignalSender
from platforms.support.http_client import shown

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["SignalAdapter"]

_log = logging.getLogger(__name__)


class SignalAdapter:
    """The Signal entry point for the accounts of a :class:`SignalConfig`.

    ``environ`` is accepted like every adapter's (signal-cli's endpoint takes no credentials). ``clock`` stamps
    received messages; ``monotonic`` paces replies.
    """

    platform = PLATFORM

    def __init__(
        self,
        config: SignalConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        del environ  # nothing to read: the daemon's HTTP endpoint has no credentials
        self.config = config
        self.capabilities = Capabilities(max_message_chars=config.max_message_chars)
        self._clock = clock
        self.sender = SignalSender(config.accounts, config, clock=monotonic)
        self._streams: EventStreams | None = None

    def senders(self) -> Sequence[ReplySender]:
        """The JSON-RPC ``send`` sender for replies of every account."""
        return [self.sender]

    def start(self, inbox: ChatInbox) -> None:
        """Connect each account's event stream (in the background: a daemon that is down is retried)."""
        if not self.config.accounts:
            return
        if not self.config.loopback:
            _log.warning(
                "signal: %s is not a loopback address; signal-cli's HTTP endpoint has no authentication, so anyone "
                "who reaches it can read and send as these accounts: keep the daemon on 127.0.0.1",
                shown(self.config.url),
            )
        self._streams = EventStreams(self.config.accounts, inbox, self.config, clock=self._clock)
        self._streams.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Close the event streams; return within about ``timeout`` seconds."""
        if self._streams is not None:
            self._streams.stop(timeout)

    def connection_problem(self) -> str | None:
        """The accounts whose event stream is down, with why; ``None`` while every stream is connected (or in its
        first attempt)."""
        return None if self._streams is None else self._streams.problem()

    def describe(self) -> list[str]:
        """One banner line per account: where its events come from and how replies leave."""
        if not self.config.accounts:
            return [
                "Signal: no accounts; list them under platforms.signal.accounts in config.yaml (numbers registered or "
                "linked in signal-cli, served by: signal-cli daemon --http 127.0.0.1:8080 --receive-mode=on-connection)"
            ]
        rpc_url = shown(self.config.base + "/api/v1/rpc")
        return [
            f"Signal account {account}: events from {shown(events_url(self.config.base, account))} (SSE, "
            f"reconnects with backoff; run signal-cli daemon --http with --receive-mode=on-connection so messages wait "
            f"on the Signal server while it is down); replies by JSON-RPC send to {rpc_url} in parts of "
            f"{self.config.max_message_chars} characters; attachments are fetched with JSON-RPC getAttachment into "
            "the media store"
            for account in self.config.accounts
        ]
