"""The WeChat adapter: one long-poll thread and one batch thread per bot account, and the reply sender.

The poll thread asks ``getupdates`` for messages after the account's ``get_updates_buf``, waiting as long as the
server suggests (``longpolling_timeout_ms``). New messages are deduped and batched; every change is committed with
``inbox.accept_many(turns, cursor=...)``, the turns that are due together with the account's whole state
(:mod:`platforms.wechat.batching`), so the cursor never covers a message that is not stored. The batch thread
releases batches whose quiet spell has passed. An expired session (errcode -14) is logged with what to do and
polled again after ``session_expired_backoff_s``; a rate limit (-2) waits ``rate_limit_backoff_s``; other failures
back off from ``retry_base_s`` to ``retry_max_s``. Nothing ends the threads but :meth:`WechatAdapter.stop`, which
aborts a poll the server is holding.

The images, voice, files and video of an answer are downloaded from WeChat's CDN and decrypted into the media
store (:mod:`platforms.wechat.files`) on the poll thread before the answer's messages are batched and committed,
so the stored state and turns hold attachment records, never the keys that open the files.

Keys: a direct chat is ``agent:main:wechat~<account>:dm:<sender>``; a group (the message has a ``group_id``) is
``agent:main:wechat~<account>:group:<group_id>:<sender>`` (per sender unless the key policy says otherwise).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from hermes_actors.errors import ConfigError
from platforms.base import Capabilities, ReplySender
from platforms.support.http_client import shown
from platforms.support.links import Links
from platforms.support.ratelimit import Rate
from platforms.support.secrets import read_env_secret, secret_origin
from platforms.wechat.account import PLATFORM, BotAccount
from platforms.wechat.config import WechatConfig, is_bot_token
from platforms.wechat.sender import AccountAuth, ContextTokens, WechatSender

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["PLATFORM", "WechatAdapter"]


def _resolve(name: str, config: WechatConfig, environ: Mapping[str, str]) -> AccountAuth:
    account = config.accounts[name]
    if account.token_env is not None:
        path = f"platforms.wechat.accounts.{name}.token_env"
        token = read_env_secret(path, account.token_env, environ, export="export the bot token")
        if not is_bot_token(token):
            raise ConfigError(path, f"the value of {account.token_env} is not a bot token (printable ASCII expected)")
    else:
        token = account.token or ""
    return AccountAuth(name=name, token=token, base_url=account.base_url)


class WechatAdapter:
    """The WeChat iLink entry point for the accounts of a :class:`WechatConfig`.

    Tokens named by ``token_env`` are read from ``environ`` (default ``os.environ``) here, so a missing one is a
    :class:`ConfigError` before anything starts. ``clock`` (unix time) stamps messages and times the dedupe
    window; ``monotonic`` times batches.
    """

    platform = PLATFORM

    def __init__(
        self,
        config: WechatConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        env = os.environ if environ is None else environ
        self.capabilities = Capabilities(max_message_chars=config.max_message_chars)
        self._auth = {name: _resolve(name, config, env) for name in config.accounts}
        self._tokens = ContextTokens()
        self._sender = WechatSender(
            self._auth,
            self._tokens,
            max_chars=config.max_message_chars,
            timeout_s=config.send_timeout_s,
            rate_limit_backoff_s=config.rate_limit_backoff_s,
            session_expired_backoff_s=config.session_expired_backoff_s,
            per_chat=Rate(per_second=config.sends_per_second_per_chat, burst=3.0),
        )
        self._links = Links("account", self._auth)
        self._accounts = [
            BotAccount(auth, config, self._tokens, self._links, clock=clock, monotonic=monotonic)
            for auth in self._auth.values()
        ]

    def senders(self) -> Sequence[ReplySender]:
        """The ``sendmessage`` sender for replies to WeChat sessions."""
        return [self._sender]

    def start(self, inbox: ChatInbox) -> None:
        """Load each account's stored state and start polling."""
        self._tokens.attach(inbox)
        for account in self._accounts:
            account.start(inbox)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling (a held poll is aborted); waiting batches stay stored for the next start."""
        deadline = time.monotonic() + timeout
        for account in self._accounts:
            account.stop()
        for account in self._accounts:
            account.join(deadline)

    def connection_problem(self) -> str | None:
        """The accounts whose last ``getupdates`` failed, with its error (naming the setting to fix for a refused
        token or an expired session); ``None`` while every poll is answered (or still in its first attempt)."""
        return self._links.problem()

    def describe(self) -> list[str]:
        """One banner line per account: where it polls, where its token comes from, and what arrives how."""
        if not self._accounts:
            return [
                "WeChat (iLink): no accounts; add one under platforms.wechat.accounts in config.yaml with the "
                "bot_token from the iLink QR login"
            ]
        lines = []
        for name, account in self.config.accounts.items():
            origin = secret_origin("token", account.token_env)
            lines.append(
                f"WeChat account '{name}': long-polling {shown(self._auth[name].url('getupdates'))} ({origin}); "
                f"messages within {self.config.batch_window_s:g} s are one turn; images, voice, files and video "
                f"are downloaded from {shown(self.config.cdn_base_url)} and decrypted into the media store"
            )
        return lines
