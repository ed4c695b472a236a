"""The ``platforms.email`` section of ``config.yaml``: the mailboxes, their IMAP and SMTP servers, who may write."""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.secrets import check_secret_source, read_env_secret, secret_origin

__all__ = ["SECURITY", "SESSIONS", "EmailAccount", "EmailConfig", "ResolvedAccount", "cluster_parts", "resolve_account"]

SECURITY = ("tls", "starttls", "none")
SESSIONS = ("sender", "thread")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ADDRESS = re.compile(r"[^@\s<>\"(),;:]{1,64}@[A-Za-z0-9.-]{1,253}")
_DOMAIN = re.compile(r"@[A-Za-z0-9.-]{1,253}")
_HOST = re.compile(r"[A-Za-z0-9.:\[\]-]{1,253}")
_SECTION = "platforms.email"


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

    address: str
    imap_host: str
    smtp_host: str
    allowed_senders: list[str]
    imap_port: int = 993
    imap_security: str = "tls"
    smtp_port: int = 587
    smtp_security: str = "starttls"
    username: str | None = None
    password: str | None = None
    password_env: str | None = None
    mailbox: str = "INBOX"
    sessions: str = "sender"
    trusted_authserv_id: str | None = None


class EmailConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.email`` section; nothing runs when ``enabled`` is false or there are no accounts.

    ``use_idle`` waits with IMAP IDLE where the server offers it (renewed every ``idle_renew_s``, under the
    29 minutes RFC 2177 allows); otherwise the mailbox is polled every ``poll_interval_s``. A failed connection is
    tried again after ``retry_s``, doubling to ``retry_max_s``. ``max_batch`` messages are fetched and committed
    at a time. ``messages_per_minute`` paces replies per correspondent (a mail loop cannot flood anyone).
    """

    enabled: bool = True
    accounts: dict[str, EmailAccount] = msgspec.field(default_factory=dict)
    use_idle: bool = True
    idle_renew_s: float = 1500.0
    poll_interval_s: float = 60.0
    retry_s: float = 2.0
    retry_max_s: float = 300.0
    timeout_s: float = 30.0
    max_batch: int = 20
    messages_per_minute: float = 10.0

    def __post_init__(self) -> None:
        for field in ("idle_renew_s", "poll_interval_s", "retry_s", "retry_max_s", "timeout_s", "messages_per_minute"):
            if getattr(self, field) <= 0:
                raise ConfigError(f"{_SECTION}.{field}", "must be a positive number")
        if self.idle_renew_s > 1740:
            raise ConfigError(f"{_SECTION}.idle_renew_s", "must be at most 1740 s (RFC 2177: under 29 minutes)")
        if self.retry_max_s < self.retry_s:
            raise ConfigError(f"{_SECTION}.retry_max_s", "must not be smaller than retry_s")
        if not 1 <= self.max_batch <= 500:
            raise ConfigError(f"{_SECTION}.max_batch", "must be 1..500 messages")
        for name, account in self.accounts.items():
            _check_account(name, account)


def _check_account(name: str, account: EmailAccount) -> None:
    path = f"{_SECTION}.accounts.{name}"
    if not _NAME.fullmatch(name):
        raise ConfigError(path, "an account name is 1 to 64 letters, digits, '_' or '-' (it is part of session keys)")
    if not _ADDRESS.fullmatch(account.address):
        raise ConfigError(f"{path}.address", "must be an email address such as agent@example.com")
    for field in ("imap_host", "smtp_host"):
        if not _HOST.fullmatch(getattr(account, field)):
            raise ConfigError(f"{path}.{field}", "must be a host name such as imap.example.com")
    for field in ("imap_port", "smtp_port"):
        if not 1 <= getattr(account, field) <= 65535:
            raise ConfigError(f"{path}.{field}", "must be a TCP port 1..65535")
    for field in ("imap_security", "smtp_security"):
        if getattr(account, field) not in SECURITY:
            raise ConfigError(f"{path}.{field}", f"must be one of {', '.join(SECURITY)}")
    if account.sessions not in SESSIONS:
        raise ConfigError(f"{path}.sessions", f"must be one of {', '.join(SESSIONS)}")
    if not account.mailbox.strip() or any(c in account.mailbox for c in '"\r\n\\'):
        raise ConfigError(f"{path}.mailbox", "must be a mailbox name such as INBOX")
    if not account.allowed_senders:
        raise ConfigError(
            f"{path}.allowed_senders",
            "must list who may write to the agent (addresses or @domains); an open mailbox must not be an open agent",
        )
    for index, sender in enumerate(account.allowed_senders):
        if not (_ADDRESS.fullmatch(sender) or _DOMAIN.fullmatch(sender)):
            raise ConfigError(
                f"{path}.allowed_senders[{index}]", "must be an address (alice@example.com) or a domain (@example.com)"
            )
    if account.trusted_authserv_id is not None and not _HOST.fullmatch(account.trusted_authserv_id):
        raise ConfigError(f"{path}.trusted_authserv_id", "must be a server name such as mx.example.org")
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
