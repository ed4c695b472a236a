"""Routing keys from the reference system, as our directory spells them.

A reference key has no tenant segments and does not escape ``:`` or ``%`` inside ids. For ids without those
characters it is already our key (SPEC section 2). Otherwise the key is rebuilt from a source it was made from
(the routing entry's origin, the session's origin or its columns): the source whose key, written the reference
way, equals the old key under one of the key policies gives our key under that policy. A key that no source
reproduces is kept as it is when it has no ``%`` (at worst it is never looked up again) and skipped otherwise,
since ``%`` would be read as our escape.

A Slack key then follows the seeds' rule for scope-less keys (:func:`migrate_legacy_slack_key`): a known
workspace moves it to that workspace's key; a DM of unknown workspace stays under the scope-less key, for the
first workspace that sees the DM to claim; a channel or group of unknown workspace is not routed at all.
Everything here is pure.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec

from hermes_actors.errors import RoutingError
from hermes_actors.routing import (
    KeyPolicy,
    LegacyKeyAction,
    SessionSource,
    build_session_key,
    migrate_legacy_slack_key,
    parse_session_key,
)

__all__ = ["KeyOutcome", "KeyTranslation", "translate_key"]

_DM = "dm"


class KeyOutcome(enum.StrEnum):
    """What becomes of a reference key."""

    SAME = "same"  # our key is the reference key
    REWRITTEN = "rewritten"  # same fields, our escaping
    MOVED = "moved"  # a scope-less Slack key, moved to its workspace's key
    KEPT_FOR_CLAIM = "kept_for_claim"  # a scope-less Slack DM, left for the first workspace to claim
    REFUSED = "refused"  # a scope-less Slack channel or group: not routed, reachable by session id
    UNREADABLE = "unreadable"  # not a key we can translate


class KeyTranslation(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`translate_key`; ``key`` is ``None`` for ``REFUSED`` and ``UNREADABLE``."""

    outcome: KeyOutcome
    key: str | None
    reason: str


def _policies(namespace: str) -> tuple[KeyPolicy, ...]:
    return (
        KeyPolicy(namespace=namespace),
        KeyPolicy(namespace=namespace, group_sessions_per_user=False),
        KeyPolicy(namespace=namespace, thread_sessions_per_user=True),
    )


def _reference_form(key: str) -> str:
    """Our ``key`` as the reference system writes it: the same fields, nothing escaped."""
    parsed = parse_session_key(key)
    return ":".join(("agent", parsed.namespace, parsed.platform, parsed.chat_type, *parsed.ids))


def _rebuild(old_key: str, sources: Sequence[SessionSource]) -> str | None:
    """Return our key for ``old_key`` from the first source and policy that reproduce it, or ``None``."""
    segments = old_key.split(":")
    if len(segments) < 4 or segments[0] != "agent" or not segments[1]:
        return None
    for source in sources:
        plain = msgspec.structs.replace(source, scope_id=None, account_id=None)
        for policy in _policies(segments[1]):
            try:
                ours = build_session_key(plain, policy)
                if _reference_form(ours) == old_key:
                    return ours
            except RoutingError:
                continue
    return None


def _unscoped(old_key: str, sources: Sequence[SessionSource]) -> KeyTranslation:
    rebuilt = _rebuild(old_key, sources)
    if rebuilt is not None:
        if rebuilt == old_key:
            return KeyTranslation(outcome=KeyOutcome.SAME, key=old_key, reason="the key is the same here")
        return KeyTranslation(
            outcome=KeyOutcome.REWRITTEN, key=rebuilt, reason="its ids contain ':' or '%', which our keys escape"
        )
    if "%" in old_key:
        return KeyTranslation(
            outcome=KeyOutcome.UNREADABLE,
            key=None,
            reason="it contains '%' and no recorded source rebuilds it, so its ids cannot be told apart",
        )
    try:
        parse_session_key(old_key)
    except RoutingError as exc:
        return KeyTranslation(outcome=KeyOutcome.UNREADABLE, key=None, reason=str(exc))
    return KeyTranslation(outcome=KeyOutcome.SAME, key=old_key, reason="the key is the same here")


def translate_key(old_key: str, sources: Sequence[SessionSource], *, scope_id: str | None) -> KeyTranslation:
    """Return what becomes of the reference key ``old_key``.

    ``sources`` are what the key may have been built from, best first; ``scope_id`` is the Slack workspace
    the entry or its session recorded, if any.
    """
    translated = _unscoped(old_key, sources)
    if translated.key is None:
        return translated
    parsed = parse_session_key(translated.key)
    if parsed.platform != "slack" or parsed.scope_id is not None:
        return translated
    decision = migrate_legacy_slack_key(
        translated.key, recorded_scope_id=scope_id, observed_scope_id=None, dm_already_claimed=False
    )
    if decision.action is LegacyKeyAction.MOVE:
        return KeyTranslation(outcome=KeyOutcome.MOVED, key=decision.new_key, reason=decision.reason)
    if parsed.chat_type == _DM:
        return KeyTranslation(
            outcome=KeyOutcome.KEPT_FOR_CLAIM,
            key=translated.key,
            reason="the DM's workspace is unknown, so it keeps its scope-less key for the first workspace "
            "that sees it to claim",
        )
    return KeyTranslation(outcome=KeyOutcome.REFUSED, key=None, reason=decision.reason)
