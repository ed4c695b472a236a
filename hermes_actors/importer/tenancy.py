"""Where an imported conversation continues: the platform name, bot account and workspace the live adapter uses.

The reference system's keys and sessions name no bot account, and a workspace for Slack at most. Our adapters key
every chat under the account that received it (``agent:main:telegram~main:dm:12345``), and some under a workspace
or tenant too (Slack, Teams and Feishu every chat; Discord and Mattermost shared chats), and the session belongs to
that principal (:class:`~hermes_actors.principal.Principal`). So an imported key and session take the account
and workspace the live adapter will use: :class:`LiveAccounts` says what ``config.yaml`` configures (built by
``hermesctl import-hermes`` from the platform registry) and what ``--account`` chose, and :func:`tenancy` picks:

- the platform: ours, where the reference calls it otherwise (``weixin`` is ``wechat`` here);
- the account: the one ``--account`` names, else the only one configured, else the only one whose configured
  workspace is the chat's; otherwise none, and the reason says what to configure or choose;
- the workspace: the one the reference recorded with the chat, else the only one the account serves.

Everything here is pure.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ["PLATFORM_NAMES", "REFERENCE_RULES", "LiveAccounts", "LivePlatform", "ScopeRule", "Tenancy", "tenancy"]

PLATFORM_NAMES = {"weixin": "wechat"}
"""The reference system's platform names that are spelled otherwise here."""

_DM = "dm"


class ScopeRule(enum.StrEnum):
    """Which chats a platform's adapter keys under a workspace or tenant."""

    NONE = "none"
    ALL = "all"  # every chat (Slack workspaces, Teams and Feishu tenants)
    SHARED = "shared"  # shared chats only; a DM has none (Discord guilds, Mattermost teams)


class LivePlatform(msgspec.Struct, frozen=True, kw_only=True):
    """How one platform's live adapter keys a chat.

    ``accounts`` maps each configured account (the ``account_id`` of its messages) to the only workspace it
    serves, when its configuration names one (a Slack app's ``team_id``, a Teams bot's ``tenant_id``).
    ``needs_account`` is whether every key carries an account; ``section`` is where accounts are configured.
    """

    accounts: dict[str, str | None] = msgspec.field(default_factory=dict)
    scopes: ScopeRule = ScopeRule.NONE
    needs_account: bool = True
    section: str = ""


class LiveAccounts(msgspec.Struct, frozen=True, kw_only=True):
    """What the live adapters of this home will use: the platforms that key by account or workspace (a platform
    not listed keys by neither) and the account chosen per platform (``--account PLATFORM=NAME``)."""

    platforms: dict[str, LivePlatform] = msgspec.field(default_factory=dict)
    chosen: dict[str, str] = msgspec.field(default_factory=dict)


REFERENCE_RULES = LiveAccounts(platforms={"slack": LivePlatform(scopes=ScopeRule.ALL, needs_account=False)})
"""Without knowing the adapters: keys as the reference wrote them (platform names spelled ours), with the seeds'
Slack workspace rule."""


class Tenancy(msgspec.Struct, frozen=True, kw_only=True):
    """Where a chat of the reference system is keyed here, and why: the platform, workspace and account of its key
    and of its session's principal.

    ``unmapped`` says why no account could be chosen (the key and session then keep none, and no adapter will
    reach them). ``needs_scope`` with ``scope_id`` ``None``: the adapter keys the chat under a workspace no one
    recorded (a DM waits for the first workspace to claim it; a shared chat is not routed).
    """

    platform: str
    account_id: str | None = None
    scope_id: str | None = None
    needs_scope: bool = False
    unmapped: str | None = None
    reason: str = ""


def _needs_scope(rule: ScopeRule, chat_type: str | None) -> bool:
    return rule is ScopeRule.ALL or (rule is ScopeRule.SHARED and (chat_type or _DM) != _DM)


def _account(live: LiveAccounts, platform: str, spec: LivePlatform, scope_id: str | None) -> tuple[str | None, str]:
    """The account a chat of ``platform`` (in workspace ``scope_id``, if known) continues under, and why; ``None``
    and the fix when there is no telling."""
    chosen = live.chosen.get(platform)
    if chosen is not None:
        return chosen, f"bot account {chosen!r} (chosen with --account)"
    names = sorted(spec.accounts)
    if len(names) == 1:
        return names[0], f"bot account {names[0]!r} (the only one configured)"
    serving = [name for name in names if scope_id is not None and spec.accounts[name] == scope_id]
    if len(serving) == 1:
        return serving[0], f"bot account {serving[0]!r} (the only one serving workspace {scope_id!r})"
    where = f" under {spec.section}" if spec.section else ""
    if not names:
        return None, (
            f"no {platform} account is configured here{where}, so no adapter would reach it; configure the "
            f"account, or name it with --account {platform}=<name>, and run the import again"
        )
    return None, (
        f"{platform} has several accounts here ({', '.join(names)}) and nothing tells which one this chat reaches; "
        f"choose with --account {platform}=<name> and run the import again"
    )


def tenancy(live: LiveAccounts, platform: str, chat_type: str | None, scope_id: str | None) -> Tenancy:
    """Where a chat of the reference platform ``platform`` (of ``chat_type``, in workspace ``scope_id`` when the
    reference recorded one) is keyed here: :func:`~hermes_actors.routing.format_platform_segment`'s parts."""
    ours = PLATFORM_NAMES.get(platform, platform)
    renamed = [f"platform {ours!r} (the reference's {platform!r})"] if ours != platform else []
    spec = live.platforms.get(ours)
    if spec is None:  # keyed by neither account nor workspace as far as we know: the recorded workspace stays
        return Tenancy(platform=ours, scope_id=scope_id, reason=", ".join(renamed))
    needs_scope = _needs_scope(spec.scopes, chat_type)
    account, why = _account(live, ours, spec, scope_id) if spec.needs_account else (None, "")
    if spec.needs_account and account is None:
        return Tenancy(platform=ours, needs_scope=needs_scope, unmapped=why)
    served = spec.accounts.get(account) if account is not None else None
    if needs_scope and scope_id is not None and served is not None and served != scope_id:
        return Tenancy(
            platform=ours,
            needs_scope=True,
            unmapped=f"it was in workspace {scope_id!r}, but {ours} account {account!r} serves only {served!r}; "
            f"choose another with --account {ours}=<name>",
        )
    scope = (scope_id or served) if needs_scope else None
    parts = [*renamed, *([why] if why else [])]
    if scope is not None:
        recorded = "recorded with the chat" if scope_id else "the only one the account serves"
        parts.append(f"workspace {scope!r} ({recorded})")
    return Tenancy(platform=ours, account_id=account, scope_id=scope, needs_scope=needs_scope, reason=", ".join(parts))
