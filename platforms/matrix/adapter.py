"""The Matrix adapter: a ``/sync`` long poll per account and one sender for every account's replies.

Access tokens named by ``access_token_env`` are read when the adapter is built, so a missing one is a
:class:`~hermes_actors.errors.ConfigError` before anything starts. The poller and the sender share the accounts'
committed room details (:class:`~platforms.matrix.state.Snapshots`): the sender quotes the answered message in
group rooms only.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from hermes_actors.errors import ConfigError, PlatformError
from platforms.base import Capabilities, ReplySender
from platforms.matrix.answer import SyncReader
from platforms.matrix.client import Account, Homeserver
from platforms.matrix.config import MatrixAccount, MatrixConfig, is_access_token
from platforms.matrix.events import PLATFORM
from platforms.matrix.sender import MatrixSender
from platforms.matrix.state import Snapshots
from platforms.matrix.sync import AccountSync
from platforms.support.connections import Connections
from platforms.support.credentials import fetch_json
from platforms.support.http_client import shown
from platforms.support.secrets import read_env_secret, secret_origin

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["MatrixAdapter"]

_log = logging.getLogger(__name__)

_MAX_ESCAPED_CHAR_BYTES = 6  # "\u001f": the most one character takes in an event's JSON


def _token(name: str, account: MatrixAccount, environ: Mapping[str, str]) -> str:
    if account.access_token_env is None:
        assert account.access_token is not None  # MatrixConfig requires one of the two
        return account.access_token
    path = f"platforms.matrix.accounts.{name}.access_token_env"
    token = read_env_secret(path, account.access_token_env, environ, export="export the access token")
    if not is_access_token(token):
        raise ConfigError(path, f"the value of {account.access_token_env} is not an access token (printable ASCII)")
    return token


class MatrixAdapter:
    """Every account of a :class:`MatrixConfig`: ``/sync`` long polls and the reply sender.

    ``clock`` (unix time) stamps received messages; ``monotonic`` paces replies.
    """

    platform = PLATFORM

    def __init__(
        self,
        config: MatrixConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        env = os.environ if environ is None else environ
        self.capabilities = Capabilities(
            threads=True, max_message_chars=config.max_message_bytes // _MAX_ESCAPED_CHAR_BYTES
        )
        self._homeservers = {
            name: Homeserver(name, account.homeserver, _token(name, account, env), timeout_s=config.request_timeout_s)
            for name, account in config.accounts.items()
        }
        self._clock = clock
        self._rooms = Snapshots()
        self._sender = MatrixSender(self._homeservers, config, self._rooms, clock=monotonic)
        self._syncs = Connections(
            "account", self._homeservers, thread="hermes-matrix-sync", label="matrix: the sync", log=_log
        )

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """``GET /account/whoami`` with every account's token: one line per account naming its user;
        :class:`PlatformError` for a token the homeserver refuses."""
        seen = []
        for name, homeserver in self._homeservers.items():
            what = f"matrix account {name!r}: GET /account/whoami"
            status, body = fetch_json(
                homeserver.url("/account/whoami"), what=what, headers=homeserver.headers(), timeout_s=timeout_s
            )
            if status != 200 or not isinstance(body, dict) or not body.get("user_id"):
                said = body.get("errcode") if isinstance(body, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no errcode'}); check the access token")
            seen.append(f"account {name!r} is {body['user_id']}")
        return seen

    def senders(self) -> Sequence[ReplySender]:
        """The one sender for every account's replies (it also opens threads for handoffs)."""
        return [self._sender]

    def start(self, inbox: ChatInbox) -> None:
        """Load each account's stored state and start its ``/sync`` long poll."""
        if not self._homeservers:
            return
        own_users: set[str] = set()  # every account's user: bots of ours never answer each other
        reader = SyncReader(self.config, media=inbox.media, clock=self._clock, own_users=own_users)
        self._syncs.start(
            [
                AccountSync(
                    Account(name=name, api=api, auto_join=self.config.accounts[name].auto_join),
                    inbox,
                    self.config,
                    self._rooms,
                    self._syncs.links,
                    reader=reader,
                    own_users=own_users,
                )
                for name, api in self._homeservers.items()
            ]
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling; a commit under way finishes first."""
        self._syncs.stop(timeout)

    def connection_problem(self) -> str | None:
        """The accounts whose last ``/sync`` failed, with its error; ``None`` while every sync is answered (or
        still in its first attempt)."""
        return self._syncs.problem()

    def describe(self) -> list[str]:
        """One banner line per account: where it syncs, where its token comes from, what it does."""
        if not self._homeservers:
            return [
                "Matrix: no accounts; add one under platforms.matrix.accounts in config.yaml "
                "(homeserver: https://matrix.example.org, access_token_env: MATRIX_ACCESS_TOKEN)"
            ]
        lines = []
        for name, account in self.config.accounts.items():
            origin = secret_origin("token", account.access_token_env)
            joins = "joins invites" if account.auto_join else "does not join invites"
            lines.append(
                f"Matrix account '{name}' ({origin}): /sync long poll on {shown(account.homeserver)}; {joins}; "
                f"replies with transaction ids in parts of {self.config.max_message_bytes} bytes; images, files, "
                "audio and video are downloaded into the media store (authenticated media API); end-to-end "
                "encrypted rooms and files are not read"
            )
        return lines
