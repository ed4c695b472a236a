"""The email adapter: a mailbox reader per account and the SMTP sender for their replies."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from platforms.base import Capabilities, ReplySender
from platforms.email.config import EmailConfig, resolve_account
from platforms.email.poller import MailboxPoller
from platforms.email.sender import PLATFORM, EmailSender
from platforms.email.threads import Threads
from platforms.support.links import Links

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["EmailAdapter"]


class EmailAdapter:
    """Every account of an :class:`EmailConfig`: IMAP readers in, SMTP out.

    Passwords named by ``password_env`` are read from ``environ`` (default ``os.environ``) here, so a missing one is
    a :class:`~hermes_actors.errors.ConfigError` before anything starts. ``clock`` stamps received messages.
    """

    platform = PLATFORM
    capabilities = Capabilities(threads=True)

    def __init__(
        self,
        config: EmailConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        env = os.environ if environ is None else environ
        self.config = config
        self._accounts = {name: resolve_account(name, account, env) for name, account in config.accounts.items()}
        self._clock = clock
        self._threads = Threads()
        self.sender = EmailSender(self._accounts, self._threads, config)
        self.pollers: dict[str, MailboxPoller] = {}
        self._links = Links("account", self._accounts)

    def senders(self) -> Sequence[ReplySender]:
        """The SMTP sender for every account's replies (it also opens mail threads for handoffs)."""
        return [self.sender]

    def start(self, inbox: ChatInbox) -> None:
        """Start reading every account's mailbox (connecting happens on their threads, retried on failure)."""
        self._threads.attach(inbox)
        for name, account in self._accounts.items():
            poller = MailboxPoller(account, inbox, self._threads, self.config, self._links, clock=self._clock)
            self.pollers[name] = poller
            poller.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every mailbox reader; a batch being committed finishes first."""
        for poller in self.pollers.values():
            poller.stop(timeout)

    def connection_problem(self) -> str | None:
        """The accounts whose mailbox cannot be read now (the connection or login failed, or dropped), with the
        error; ``None`` while every mailbox is selected (or still in its first attempt)."""
        return self._links.problem()

    def describe(self) -> list[str]:
        """One banner line per account: where mail is read and sent, who may write."""
        if not self._accounts:
            return ["Email: no accounts; add one under platforms.email.accounts in config.yaml"]
        wait = "IDLE where offered, else polls" if self.config.use_idle else "polls"
        return [
            f"Email account '{a.name}' <{a.config.address}> ({a.origin}): reads {a.config.mailbox} on "
            f"imap://{a.config.imap_host}:{a.config.imap_port} ({a.config.imap_security}; {wait} every "
            f"{self.config.poll_interval_s:g} s); replies via smtp://{a.config.smtp_host}:{a.config.smtp_port} "
            f"({a.config.smtp_security}); one session per {a.config.sessions}; only mail from "
            f"{', '.join(sorted(a.allowed))} starts turns{_vouched(a.config.trusted_authserv_id)}"
            for a in self._accounts.values()
        ]


def _vouched(trusted: str | None) -> str:
    return "" if trusted is None else f", when {trusted} reports dmarc=pass for its From domain"
