"""Session keys: which conversation a message belongs to.

A key is ``agent:<namespace>:<platform>:<chat_type>[:<id>...]``, where the platform segment is
``<platform>[.<scope_id>][~<account_id>]``. Every component has ``%`` and ``:`` percent-encoded (upper-case
hex); the namespace, platform, scope and account also have ``.`` and ``~`` encoded. Nothing else is, so a key
without those characters and without scope or account is byte-identical to a Hermes key.

Everything here is pure: no I/O, no clock, no global state.
"""

from __future__ import annotations

import enum

import msgspec

from hermes_actors.errors import RoutingError

__all__ = [
    "KeyPolicy",
    "LegacyKeyAction",
    "LegacyKeyDecision",
    "SessionKey",
    "SessionSource",
    "build_session_key",
    "format_platform_segment",
    "format_session_key",
    "is_session_key",
    "migrate_legacy_slack_key",
    "migrate_scopeless_key",
    "parse_session_key",
]

_PREFIX = "agent"
_DM = "dm"

# Ids and the chat type only need ":" (the separator) and "%" (the escape) encoded; the tenancy parts
# also need "." and "~", which separate platform, scope and account inside one segment.
_ID_ESCAPES = {"%": "%25", ":": "%3A"}
_TENANCY_ESCAPES = {**_ID_ESCAPES, ".": "%2E", "~": "%7E"}
_ID_TABLE = str.maketrans(_ID_ESCAPES)
_TENANCY_TABLE = str.maketrans(_TENANCY_ESCAPES)
_ID_UNESCAPES = {code[1:]: char for char, code in _ID_ESCAPES.items()}
_TENANCY_UNESCAPES = {code[1:]: char for char, code in _TENANCY_ESCAPES.items()}


class SessionSource(msgspec.Struct, frozen=True, kw_only=True):
    """Where a message came from, as an adapter describes it. Empty strings count as absent."""

    platform: str
    account_id: str | None = None
    scope_id: str | None = None
    chat_type: str = _DM
    chat_id: str | None = None
    thread_id: str | None = None
    user_id: str | None = None
    user_id_alt: str | None = None
    chat_name: str | None = None
    user_name: str | None = None
    message_id: str | None = None

    @property
    def participant_id(self) -> str | None:
        """The sender's most stable id: ``user_id_alt`` when present, else ``user_id``, else ``None``."""
        return self.user_id_alt or self.user_id or None


class KeyPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How sources map to sessions. A namespace of ``""`` or ``"default"`` means ``"main"``."""

    namespace: str = "main"
    group_sessions_per_user: bool = True
    thread_sessions_per_user: bool = False


_DEFAULT_POLICY = KeyPolicy()


class SessionKey(msgspec.Struct, frozen=True, kw_only=True):
    """A session key split into decoded fields.

    ``ids`` are the trailing components in key order. The layout does not record what each one is:
    ``…:group:-100:17`` is thread 17 shared by everyone or user 17 in the main chat, depending on the policy
    that built it, so :func:`parse_session_key` returns the ids and does not guess.
    """

    namespace: str = "main"
    platform: str
    scope_id: str | None = None
    account_id: str | None = None
    chat_type: str
    ids: tuple[str, ...] = ()


class LegacyKeyAction(enum.StrEnum):
    """What to do with a routing entry written under a scope-less Slack key."""

    MOVE = "move"
    CLAIM = "claim"
    REFUSE = "refuse"
    NOT_LEGACY = "not_legacy"


class LegacyKeyDecision(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`migrate_legacy_slack_key`; ``new_key`` is set for ``MOVE`` and ``CLAIM`` only."""

    action: LegacyKeyAction
    new_key: str | None = None
    reason: str


def build_session_key(source: SessionSource, policy: KeyPolicy = _DEFAULT_POLICY) -> str:
    """Return the routing key of ``source`` under ``policy``.

    A DM is keyed by its chat id, or failing that by its participant, then its thread id. Other chats are
    keyed by chat id then thread id, then the participant when ``policy.group_sessions_per_user`` is set;
    inside a thread the participant also needs ``policy.thread_sessions_per_user``. Raises
    :class:`RoutingError` when the source has no platform or no chat type.
    """
    if not source.platform:
        raise RoutingError(
            "SessionSource.platform is empty; the adapter must set it to its platform name (e.g. 'telegram')"
        )
    if not source.chat_type:
        raise RoutingError(
            f"SessionSource.chat_type is empty for platform {source.platform!r}; "
            "set it to 'dm', 'group', 'channel', 'thread' or the adapter's own chat type"
        )
    chat_id = source.chat_id or None
    thread_id = source.thread_id or None
    participant = source.participant_id
    candidates: tuple[str | None, ...]
    if source.chat_type == _DM:
        candidates = (chat_id or participant, thread_id)
    else:
        per_user = policy.group_sessions_per_user and (thread_id is None or policy.thread_sessions_per_user)
        candidates = (chat_id, thread_id, participant if per_user else None)
    namespace = policy.namespace
    if namespace in ("", "default"):
        namespace = "main"
    return format_session_key(
        SessionKey(
            namespace=namespace,
            platform=source.platform,
            scope_id=source.scope_id or None,
            account_id=source.account_id or None,
            chat_type=source.chat_type,
            ids=tuple(part for part in candidates if part),
        )
    )


def format_platform_segment(platform: str, scope_id: str | None = None, account_id: str | None = None) -> str:
    """Return the ``<platform>[.<scope_id>][~<account_id>]`` segment of a key, each part percent-encoded (an
    empty scope or account counts as absent)."""
    segment = platform.translate(_TENANCY_TABLE)
    if scope_id:
        segment += "." + scope_id.translate(_TENANCY_TABLE)
    if account_id:
        segment += "~" + account_id.translate(_TENANCY_TABLE)
    return segment


def format_session_key(key: SessionKey) -> str:
    """Return the string form of ``key``; the inverse of :func:`parse_session_key`.

    Raises :class:`RoutingError` when a component is empty, since an empty component cannot be parsed back.
    """
    if "" in (key.namespace, key.platform, key.chat_type, key.scope_id, key.account_id, *key.ids):
        raise RoutingError(
            f"cannot format {key!r}: a component is empty; use None for an absent scope or account "
            "and leave absent ids out"
        )
    platform = format_platform_segment(key.platform, key.scope_id, key.account_id)
    parts = [_PREFIX, key.namespace.translate(_TENANCY_TABLE), platform, key.chat_type.translate(_ID_TABLE)]
    parts.extend(part.translate(_ID_TABLE) for part in key.ids)
    return ":".join(parts)


def parse_session_key(key: str) -> SessionKey:
    """Split ``key`` into its decoded fields.

    Only the exact form :func:`format_session_key` writes is accepted, so ``format_session_key(
    parse_session_key(key)) == key``. Raises :class:`RoutingError` naming the defect otherwise.
    """
    parts = key.split(":")
    if parts[0] != _PREFIX:
        raise RoutingError(f"{key!r} is not a session key: it must start with 'agent:'")
    if len(parts) < 4:
        raise RoutingError(
            f"{key!r} is not a session key: too few segments; "
            "it needs at least 'agent:<namespace>:<platform>:<chat_type>'"
        )
    head, _, account = parts[2].partition("~")
    platform, _, scope = head.partition(".")
    return SessionKey(
        namespace=_unescape(parts[1], key, "the namespace", tenancy=True),
        platform=_unescape(platform, key, "the platform", tenancy=True),
        scope_id=_unescape(scope, key, "the scope", tenancy=True) if "." in head else None,
        account_id=_unescape(account, key, "the account", tenancy=True) if "~" in parts[2] else None,
        chat_type=_unescape(parts[3], key, "the chat type", tenancy=False),
        ids=tuple(_unescape(part, key, f"id {number}", tenancy=False) for number, part in enumerate(parts[4:], 1)),
    )


def is_session_key(text: str) -> bool:
    """Return whether :func:`parse_session_key` accepts ``text``."""
    try:
        parse_session_key(text)
    except RoutingError:
        return False
    return True


def migrate_legacy_slack_key(
    old_key: str,
    *,
    recorded_scope_id: str | None,
    observed_scope_id: str | None,
    dm_already_claimed: bool,
) -> LegacyKeyDecision:
    """Decide where a routing entry under a scope-less Slack key goes (:func:`migrate_scopeless_key` for Slack,
    the seeds' rule); a key of another platform is ``NOT_LEGACY``. Raises :class:`RoutingError` when ``old_key`` is
    not a session key."""
    if parse_session_key(old_key).platform != "slack":
        return LegacyKeyDecision(action=LegacyKeyAction.NOT_LEGACY, reason=f"{old_key!r} is not a Slack key")
    return migrate_scopeless_key(
        old_key,
        recorded_scope_id=recorded_scope_id,
        observed_scope_id=observed_scope_id,
        dm_already_claimed=dm_already_claimed,
    )


def migrate_scopeless_key(
    old_key: str,
    *,
    recorded_scope_id: str | None,
    observed_scope_id: str | None,
    dm_already_claimed: bool,
) -> LegacyKeyDecision:
    """Decide where a routing entry under a scope-less key goes, for a platform whose keys here carry a workspace
    or tenant (Slack's rule in the seeds, for every such platform).

    ``recorded_scope_id`` is the workspace the old entry itself recorded, ``observed_scope_id`` the workspace
    now seeing that chat, and ``dm_already_claimed`` whether another workspace has already claimed the DM. A
    known workspace moves the entry; a DM is claimed once, by the first workspace that sees it; a channel or
    group of unknown workspace is refused. An account segment on the old key is kept. Raises
    :class:`RoutingError` when ``old_key`` is not a session key.
    """
    parsed = parse_session_key(old_key)
    if parsed.scope_id is not None:
        return LegacyKeyDecision(
            action=LegacyKeyAction.NOT_LEGACY,
            reason=f"{old_key!r} already names its workspace {parsed.scope_id!r}",
        )
    if recorded_scope_id:
        return LegacyKeyDecision(
            action=LegacyKeyAction.MOVE,
            new_key=_with_scope(parsed, recorded_scope_id),
            reason=f"the entry recorded workspace {recorded_scope_id!r}, so it moves to that workspace's key",
        )
    if parsed.chat_type != _DM:
        return LegacyKeyDecision(
            action=LegacyKeyAction.REFUSE,
            reason=f"the workspace of this {parsed.chat_type} is unknown, and migrating it would risk "
            "leaking one tenant's transcript to another; it stays reachable by session id",
        )
    if not observed_scope_id:
        return LegacyKeyDecision(
            action=LegacyKeyAction.REFUSE,
            reason="no workspace has seen this DM yet, so none can claim it; it stays reachable by session id",
        )
    if dm_already_claimed:
        return LegacyKeyDecision(
            action=LegacyKeyAction.REFUSE,
            reason=f"another workspace already claimed this DM, so workspace {observed_scope_id!r} starts "
            "a new session; the old one stays reachable by session id",
        )
    return LegacyKeyDecision(
        action=LegacyKeyAction.CLAIM,
        new_key=_with_scope(parsed, observed_scope_id),
        reason=f"workspace {observed_scope_id!r} is the first to see this DM, so it claims the transcript",
    )


def _unescape(text: str, key: str, where: str, *, tenancy: bool) -> str:
    if not text:
        raise RoutingError(f"{key!r} is not a session key: {where} is empty")
    if tenancy:
        for char in ".~":
            if char in text:
                code = _TENANCY_ESCAPES[char]
                raise RoutingError(f"{key!r} is not a session key: unescaped {char!r} in {where}; write it as {code}")
    unescapes = _TENANCY_UNESCAPES if tenancy else _ID_UNESCAPES
    first, *rest = text.split("%")
    decoded = [first]
    for piece in rest:
        plain = unescapes.get(piece[:2])
        if plain is None:
            allowed = ", ".join(f"%{code}" for code in unescapes)
            raise RoutingError(
                f"{key!r} is not a session key: bad percent escape {'%' + piece[:2]!r} in {where}; "
                f"the escapes allowed there are {allowed}, in upper case"
            )
        decoded += (plain, piece[2:])
    return "".join(decoded)


def _with_scope(key: SessionKey, scope_id: str) -> str:
    return format_session_key(msgspec.structs.replace(key, scope_id=scope_id))
