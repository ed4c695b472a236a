"""Routing keys from the reference system, as our directory spells them and our adapters build them.

A reference key has no tenant segments and does not escape ``:`` or ``%`` inside ids. For ids without those
characters it is already our key (SPEC section 2). Otherwise the key is rebuilt from a source it was made from
(the routing entry's origin, the session's origin or its columns): the source whose key, written the reference
way, equals the old key under one of the key policies gives our key under that policy. A key that no source
reproduces is kept as it is when it has no ``%`` (at worst it is never looked up again) and skipped otherwise,
since ``%`` would be read as our escape.

The key then takes the platform name, bot account and workspace the live adapter keys that chat by
(:func:`~hermes_actors.importer.tenancy.tenancy`); without an account to take it is not routed (``UNMAPPED``). A
chat the adapter keys under a workspace follows the seeds' rule for scope-less keys
(:func:`~hermes_actors.routing.migrate_scopeless_key`): a known workspace moves it to that workspace's key; a DM of
unknown workspace stays under its scope-less key, for the first workspace that sees the DM to claim; a channel or
group of unknown workspace is not routed at all. Everything here is pure.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec

from hermes_actors.errors import RoutingError
from hermes_actors.importer.tenancy import REFERENCE_RULES, LiveAccounts, tenancy
from hermes_actors.routing import (
    KeyPolicy,
    LegacyKeyAction,
    SessionSource,
    build_session_key,
    format_session_key,
    migrate_scopeless_key,
    parse_session_key,
)

__all__ = ["KeyOutcome", "KeyTranslation", "translate_key"]

_DM = "dm"


class KeyOutcome(enum.StrEnum):
    """What becomes of a reference key."""

    SAME = "same"  # our key is the reference key
    REWRITTEN = "rewritten"  # same fields, our escaping
    MOVED = "moved"  # the key the live adapter builds: with its account, workspace or platform name
    KEPT_FOR_CLAIM = "kept_for_claim"  # a DM of unknown workspace, left for the first workspace to claim
    REFUSED = "refused"  # a channel or group of unknown workspace: not routed, reachable by session id
    UNMAPPED = "unmapped"  # no account to key it under (none configured, or several): not routed
    UNREADABLE = "unreadable"  # not a key we can translate


class KeyTranslation(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`translate_key`; ``key`` is ``None`` for ``REFUSED``, ``UNMAPPED`` and ``UNREADABLE``."""

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


def translate_key(
    old_key: str, sources: Sequence[SessionSource], *, scope_id: str | None, live: LiveAccounts = REFERENCE_RULES
) -> KeyTranslation:
    """Return what becomes of the reference key ``old_key``.

    ``sources`` are what the key may have been built from, best first; ``scope_id`` is the workspace the entry or
    its session recorded, if any; ``live`` is what the live adapters key by (by default: the reference's keys,
    with the seeds' Slack workspace rule).
    """
    translated = _unscoped(old_key, sources)
    if translated.key is None:
        return translated
    parsed = parse_session_key(translated.key)
    if parsed.scope_id is not None or parsed.account_id is not None:
        return translated  # written by us already
    where = tenancy(live, parsed.platform, parsed.chat_type, scope_id)
    if where.unmapped is not None:
        return KeyTranslation(outcome=KeyOutcome.UNMAPPED, key=None, reason=where.unmapped)
    unscoped = format_session_key(msgspec.structs.replace(parsed, platform=where.platform, account_id=where.account_id))
    new_key = unscoped
    if where.needs_scope:
        decision = migrate_scopeless_key(
            unscoped, recorded_scope_id=where.scope_id, observed_scope_id=None, dm_already_claimed=False
        )
        if decision.action is not LegacyKeyAction.MOVE:
            if parsed.chat_type == _DM:
                return KeyTranslation(
                    outcome=KeyOutcome.KEPT_FOR_CLAIM,
                    key=unscoped,
                    reason="the DM's workspace is unknown, so it keeps a key without one for the first workspace "
                    "that sees it to claim" + (f" ({where.reason})" if where.reason else ""),
                )
            return KeyTranslation(outcome=KeyOutcome.REFUSED, key=None, reason=decision.reason)
        new_key = decision.new_key or unscoped
    if new_key == translated.key:
        return translated
    return KeyTranslation(
        outcome=KeyOutcome.MOVED, key=new_key, reason=f"the key the live adapter builds for it: {where.reason}"
    )
