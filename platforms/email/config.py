"""The ``platforms.email`` section of ``config.yaml``: the mailboxes, their IMAP and SMTP servers, who may write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import AccountName, PositiveRate, PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.secrets import check_secret_source, read_env_secret, secret_origin

__all__ = ["SECURITY", "SESSIONS", "EmailAccount", "EmailConfig", "ResolvedAccount", "cluster_parts", "resolve_account"]

SECURITY = ("tls", "starttls", "none")
SESSIONS = ("sender", "thread")
_SECTION = "platforms.email"
_LOCAL, _DOMAIN = r"[^@\s<>\"(),;:]{1,64}", r"@[A-Za-z0-9.-]{1,253}"
_Address = Annotated[
    str, Rule(Meta(pattern=rf"^{_LOCAL}{_DOMAIN}\Z"), "must be an email address such as agent@example.com")
]
_Sender = Annotated[
    str,
    Rule(
        Meta(pattern=rf"^(?:{_LOCAL})?{_DOMAIN}\Z"),
        "must be an address (alice@example.com) or a domain (@example.com)",
    ),
]
_Senders = Annotated[
    list[_Sender],
    Rule(
        Meta(min_length=1),
        "must list who may write to the agent (addresses or @domains); an open mailbox must not be an open agent",
    ),
]
_HOST = r"^[A-Za-z0-9.:\[\]-]{1,253}\Z"
_Host = Annotated[str, Rule(Meta(pattern=_HOST), "must be a host name such as imap.example.com")]
_ServerName = Annotated[str, Rule(Meta(pattern=_HOST), "must be a server name such as mx.example.org")]
_ServerPort = Annotated[int, Rule(Meta(ge=1, le=65535), "must be a TCP port 1..65535")]
_IdleRenew = Annotated[
    float, Rule(Meta(gt=0, le=1740), "must be a positive number, at most 1740 s (RFC 2177: under 29 minutes)")
]
_Batch = Annotated[int, Rule(Meta(ge=1, le=500), "must be 1..500 messages")]


class EmailAccount(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One mailbox (``platforms.email.accounts.<name>``); the name is the account in session keys.

    ``address`` is the agent's address (the ``From`` of replies). IMAP reads ``mailbox`` on ``imap_host``; SMTP
    sends through ``smtp_host``; both log in as ``username`` (default: the address) with ``password`` (or the
    variable named by ``password_env``). ``*_security`` is ``tls`` (implicit TLS), ``starttls`` or ``none`` (only
    for a server on loopback). ``allowed_senders`` lists the addresses (``alice@example.com``) and domains
    (``@example.com``) whose mail starts turns; anyone else's is skipped with a log line. ``sessions`` is
    ``sender`` (one session per correspondent) or ``thread`` (one per mail thread). The sender is the one mailbox
    of the mail's one From header, read strictly (a defect, a second mailbox or a group refuses the mail). A From
    address is easy to forge: with ``trusted_authserv_id`` set (the receiving server's name in its
    ``Authentication-Results`` headers, such as ``mx.example.org``), mail counts only when the topmost
    ``Authentication-Results`` header is that server's and reports exactly one ``dmarc=pass`` whose
    ``header.from`` is the From domain (:mod:`platforms.email.authres`).
    """

    address: _Address
    imap_host: _Host
    smtp_host: _Host
    allowed_senders: _Senders
    imap_port: _ServerPort = 993
    imap_security: str = "tls"
    smtp_port: _ServerPort = 587
    smtp_security: str = "starttls"
    username: str | None = None
    password: str | None = None
    password_env: str | None = None
    mailbox: str = "INBOX"
    sessions: str = "sender"
    trusted_authserv_id: _ServerName | None = None


class EmailConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.email`` section; nothing runs when ``enabled`` is false or there are no accounts.

    ``use_idle`` waits with IMAP IDLE where the server offers it (renewed every ``idle_renew_s``, under the
    29 minutes RFC 2177 allows); otherwise the mailbox is polled every ``poll_interval_s``. A failed connection is
    tried again after ``retry_s``, doubling to ``retry_max_s``. ``max_batch`` messages are fetched and committed
    at a time. ``messages_per_minute`` paces replies per correspondent (a mail loop cannot flood anyone).
    """

    enabled: bool = True
    accounts: dict[AccountName, EmailAccount] = msgspec.field(default_factory=dict)
    use_idle: bool = True
    idle_renew_s: _IdleRenew = 1500.0
    poll_interval_s: PositiveSeconds = 60.0
    retry_s: PositiveSeconds = 2.0
    retry_max_s: PositiveSeconds = 300.0
    timeout_s: PositiveSeconds = 30.0
    max_batch: _Batch = 20
    messages_per_minute: PositiveRate = 10.0

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        if self.retry_max_s < self.retry_s:
            raise ConfigError(f"{_SECTION}.retry_max_s", "must not be smaller than retry_s")
        for name, account in self.accounts.items():
            _check_account(name, account)


def _check_account(name: str, account: EmailAccount) -> None:
    path = f"{_SECTION}.accounts.{name}"
    for field in ("imap_security", "smtp_security"):
        if getattr(account, field) not in SECURITY:
            raise ConfigError(f"{path}.{field}", f"must be one of {', '.join(SECURITY)}")
    if account.sessions not in SESSIONS:
        raise ConfigError(f"{path}.sessions", f"must be one of {', '.join(SESSIONS)}")
    if not account.mailbox.strip() or any(c in account.mailbox for c in '"\r\n\\'):
        raise ConfigError(f"{path}.mailbox", "must be a mailbox name such as INBOX")
    missing = "is required: set password, or password_env to a variable holding it"
    check_secret_source(
        path, "password", account.password, account.password_env, example_env="EMAIL_PASSWORD", missing=missing
    )


class ResolvedAccount(msgspec.Struct, frozen=True, kw_only=True):
    """An account with its password read and its allow-list normalised."""

    name: str
    config: EmailAccount
    username: str
    password: str
    allowed: frozenset[str]  # lower-cased addresses and @domains
    origin: str  # for the banner: where the password comes from

    def allows(self, address: str) -> bool:
        """Whether mail from ``address`` may start a turn."""
        address = address.lower()
        return address in self.allowed or "@" + address.rpartition("@")[2] in self.allowed


def resolve_account(name: str, account: EmailAccount, environ: Mapping[str, str]) -> ResolvedAccount:
    """``account`` with its password read (from ``environ`` when ``password_env`` names a variable)."""
    password = account.password or ""
    if account.password_env is not None:
        path = f"{_SECTION}.accounts.{name}.password_env"
        password = read_env_secret(path, account.password_env, environ, export="export the mailbox password")
    return ResolvedAccount(
        name=name,
        config=account,
        username=account.username or account.address,
        password=password,
        allowed=frozenset(sender.lower() for sender in account.allowed_senders),
        origin=secret_origin("password", account.password_env),
    )


def cluster_parts(config: EmailConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each mailbox leased on its own, keyed by its name (the ``account_id`` of its mail).
    """
    return split_accounts(config, "accounts")
