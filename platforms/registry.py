"""Which platforms exist, where their code lives, and which run when ``config.yaml`` says nothing.

A platform module defines a config Struct (its ``platforms.<name>`` section) and an adapter class built as
``Adapter(config, environ=...)``. Modules load lazily: a daemon pays only for the platforms it runs, and a platform
whose optional SDK is not installed fails with a message naming the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, cast

import msgspec

from hermes_actors.config import EventsConfig, HttpLimits
from hermes_actors.errors import ConfigError
from hermes_actors.ports import Adapter, ReplySender
from hermes_actors.section_parts import SectionParts

__all__ = [
    "LEASED_PLATFORMS",
    "PLATFORMS",
    "Placement",
    "PlatformSpec",
    "SharedListener",
    "account_scopes",
    "adapter_factory",
    "build",
    "check_credentials",
    "cluster_parts",
    "config_type",
    "enabled",
    "event_sender",
    "fetch_json",
    "new_webhook_secret",
    "placement",
    "probe_listen",
    "shared_listener",
]


Placement = Literal["push", "leased", "request"]
"""Where a platform's adapter runs in cluster mode (``hermesd --cluster``): ``push``, on every replica (the platform
calls it; each request is committed where it arrives); ``leased``, each account that polls or holds a socket on the
one replica holding its role (the section split by :func:`cluster_parts`; its called accounts on every replica);
``request``, on every replica, each reply going back to the replica whose client waits for it (the API server)."""


class PlatformSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One platform: its module, config and adapter class names, where it runs in cluster mode (``placement``;
    ``leased`` exactly when it has ``parts``), and whether it runs without a section.

    How its adapter keys a chat (read by ``hermesctl import-hermes``, so an imported conversation continues):
    ``accounts`` names the section's field listing its accounts (the keys of a mapping, or the items of a list),
    each the ``account_id`` of its messages; ``account_scope`` the account's field naming the only workspace or
    tenant it serves, if it has one; ``scopes`` which chats' keys carry a workspace or tenant (``all``, or only
    ``shared`` chats: not DMs).
    """

    name: str
    placement: Placement
    module: str
    config: str
    adapter: str
    on_by_default: bool = False
    extra: str | None = None  # the pip extra that installs its SDK, if it needs one
    parts: str | None = None  # its function splitting a section by account for cluster mode, if it has one
    accounts: str | None = None
    account_scope: str | None = None
    scopes: Literal["all", "shared"] | None = None

    def __post_init__(self) -> None:
        if (self.placement == "leased") != (self.parts is not None):
            raise ValueError(f"platform {self.name}: a leased platform, and only one, names its parts function")


PLATFORMS: dict[str, PlatformSpec] = {
    spec.name: spec
    for spec in (
        PlatformSpec(
            name="api_server",
            placement="request",
            module="platforms.api_server",
            config="ApiServerConfig",
            adapter="ApiServer",
            on_by_default=True,
        ),
        PlatformSpec(
            name="webhook",
            placement="push",
            module="platforms.webhook",
            config="WebhookConfig",
            adapter="WebhookAdapter",
            on_by_default=True,
        ),
        PlatformSpec(
            name="telegram",
            placement="leased",
            module="platforms.telegram",
            config="TelegramConfig",
            adapter="TelegramAdapter",
            parts="cluster_parts",
            accounts="bots",
        ),
        PlatformSpec(
            name="slack",
            placement="push",
            module="platforms.slack",
            config="SlackConfig",
            adapter="SlackAdapter",
            accounts="apps",
            account_scope="team_id",
            scopes="all",
        ),
        PlatformSpec(
            name="feishu",
            placement="push",
            module="platforms.feishu",
            config="FeishuConfig",
            adapter="FeishuAdapter",
            extra="feishu",
            accounts="apps",
            scopes="all",
        ),
        PlatformSpec(
            name="wechat",
            placement="leased",
            module="platforms.wechat",
            config="WechatConfig",
            adapter="WechatAdapter",
            parts="cluster_parts",
            accounts="accounts",
        ),
        PlatformSpec(
            name="discord",
            placement="leased",
            module="platforms.discord",
            config="DiscordConfig",
            adapter="DiscordAdapter",
            parts="cluster_parts",
            accounts="bots",
            scopes="shared",
        ),
        PlatformSpec(
            name="whatsapp",
            placement="push",
            module="platforms.whatsapp",
            config="WhatsappConfig",
            adapter="WhatsappAdapter",
            accounts="numbers",
        ),
        PlatformSpec(
            name="matrix",
            placement="leased",
            module="platforms.matrix",
            config="MatrixConfig",
            adapter="MatrixAdapter",
            parts="cluster_parts",
            accounts="accounts",
        ),
        PlatformSpec(
            name="signal",
            placement="leased",
            module="platforms.signal",
            config="SignalConfig",
            adapter="SignalAdapter",
            parts="cluster_parts",
            accounts="accounts",
        ),
        PlatformSpec(
            name="mattermost",
            placement="leased",
            module="platforms.mattermost",
            config="MattermostConfig",
            adapter="MattermostAdapter",
            parts="cluster_parts",
            accounts="bots",
            scopes="shared",
        ),
        PlatformSpec(
            name="sms",
            placement="push",
            module="platforms.sms",
            config="SmsConfig",
            adapter="SmsAdapter",
            accounts="numbers",
        ),
        PlatformSpec(
            name="teams",
            placement="push",
            module="platforms.teams",
            config="TeamsConfig",
            adapter="TeamsAdapter",
            extra="teams",
            accounts="bots",
            account_scope="tenant_id",
            scopes="all",
        ),
        PlatformSpec(
            name="email",
            placement="leased",
            module="platforms.email",
            config="EmailConfig",
            adapter="EmailAdapter",
            parts="cluster_parts",
        ),
        PlatformSpec(
            name="qqbot",
            placement="leased",
            module="platforms.qqbot",
            config="QqbotConfig",
            adapter="QqbotAdapter",
            extra="qqbot",
            parts="cluster_parts",
        ),
        PlatformSpec(
            name="bluebubbles",
            placement="push",
            module="platforms.bluebubbles",
            config="BluebubblesConfig",
            adapter="BluebubblesAdapter",
        ),
        PlatformSpec(
            name="dingtalk",
            placement="leased",
            module="platforms.dingtalk",
            config="DingtalkConfig",
            adapter="DingtalkAdapter",
            parts="cluster_parts",
        ),
        PlatformSpec(
            name="wecom",
            placement="push",
            module="platforms.wecom",
            config="WecomConfig",
            adapter="WecomAdapter",
            extra="feishu",
        ),
    )
}


LEASED_PLATFORMS = frozenset(name for name, spec in PLATFORMS.items() if spec.placement == "leased")
"""The platforms whose accounts poll or hold a socket: one replica of a cluster runs each such account."""


def placement(name: str) -> Placement | Literal["not yet"]:
    """Where platform ``name`` runs in cluster mode (:data:`Placement`); ``not yet`` for a name the registry does
    not know."""
    spec = PLATFORMS.get(name)
    return "not yet" if spec is None else spec.placement


def _load(spec: PlatformSpec, attribute: str) -> Any:
    try:
        module = importlib.import_module(spec.module)
    except ImportError as exc:
        hint = f"; install it with: pip install 'hermes-actors[{spec.extra}]'" if spec.extra else ""
        raise ConfigError(f"platforms.{spec.name}", f"this platform cannot be loaded ({exc}){hint}") from None
    return getattr(module, attribute)


def config_type(name: str) -> type[msgspec.Struct]:
    """The config Struct of platform ``name``; :class:`ConfigError` for an unknown name."""
    spec = PLATFORMS.get(name)
    if spec is None:
        raise ConfigError(f"platforms.{name}", f"unknown platform (expected one of: {', '.join(PLATFORMS)})")
    return cast(type[msgspec.Struct], _load(spec, spec.config))


def adapter_factory(name: str) -> Callable[..., Adapter]:
    """The adapter class of platform ``name``, called as ``factory(config, environ=...)``."""
    return cast(Callable[..., Adapter], _load(PLATFORMS[name], PLATFORMS[name].adapter))


def cluster_parts(name: str, config: msgspec.Struct) -> SectionParts | None:
    """Platform ``name``'s section split by account for cluster mode (``None``: the platform has no accounts that
    poll or hold a socket; the whole section runs on every replica)."""
    spec = PLATFORMS[name]
    if spec.parts is None:
        return None
    split = cast(Callable[[msgspec.Struct], SectionParts], _load(spec, spec.parts))
    return split(config)


def account_scopes(name: str, config: msgspec.Struct) -> dict[str, str | None] | None:
    """The accounts platform ``name``'s section configures, each with the only workspace or tenant it serves
    (``None``: any); ``None`` for a platform whose keys carry no account (see :class:`PlatformSpec`)."""
    spec = PLATFORMS[name]
    if spec.accounts is None:
        return None
    listed = getattr(config, spec.accounts)
    items = listed.items() if isinstance(listed, dict) else ((account, None) for account in listed)
    scope = spec.account_scope
    return {str(account): getattr(entry, scope, None) if scope else None for account, entry in items}


def enabled(config: msgspec.Struct) -> bool:
    """Whether a platform section asks for its adapter to run (``enabled: false`` turns it off)."""
    return bool(getattr(config, "enabled", True))


def build(
    name: str, config: msgspec.Struct, environ: Mapping[str, str], *, http_limits: HttpLimits | None = None
) -> Adapter:
    """Construct platform ``name``'s adapter from its config; one that listens on a port of its own holds its
    clients to ``http_limits`` (default :class:`~hermes_actors.config.HttpLimits`)."""
    adapter = adapter_factory(name)(config, environ=environ)
    limit = getattr(adapter, "limit_connections", None)
    if limit is not None and http_limits is not None:
        limit(http_limits)
    return adapter


def check_credentials(adapter: Adapter, *, timeout_s: float) -> list[str] | None:
    """Ask the platform whether ``adapter``'s credentials work, one line per account of what it answered
    (``None``: the platform has no cheap check); a refusal raises :class:`~hermes_actors.errors.PlatformError`."""
    check = getattr(adapter, "check_credentials", None)
    if check is None:
        return None
    return cast(list[str], check(timeout_s=timeout_s))


class SharedListener(Protocol):
    """One HTTP port every HTTP adapter serves on (``daemon.http_port``); see :func:`shared_listener`."""

    def attach(self, name: str, adapter: Adapter) -> bool:
        """Have ``adapter`` serve on this port when it starts; ``False`` if it serves no HTTP."""
        ...

    def probe_listen(self) -> None:
        """Raise :class:`~hermes_actors.errors.PlatformError` as :meth:`start` would if the port is taken now."""
        ...

    def start(self) -> None:
        """Bind the port, once the attached adapters have started (and mounted their routes)."""
        ...

    def stop(self, timeout: float = 10.0) -> None:
        """Close the port."""
        ...

    def describe(self) -> list[str]:
        """Banner lines: the URL and the paths of each entry point."""
        ...


def shared_listener(*, host: str, port: int, limits: HttpLimits | None = None) -> SharedListener:
    """A listener on ``host:port`` for every HTTP adapter, holding its clients to ``limits``
    (``platforms.support.shared_http``, loaded by path like the platforms, so the daemon sees only this protocol)."""
    module = importlib.import_module("platforms.support.shared_http")
    return cast(SharedListener, module.SharedListener(host=host, port=port, limits=limits))


def fetch_json(url: str, *, headers: Mapping[str, str] | None = None, timeout_s: float) -> tuple[int, Any]:
    """``(status, decoded JSON body or None)`` of one GET through the platforms' HTTP client
    (``platforms.support.credentials``, loaded by path like :func:`shared_listener`), for ``config check --online``;
    a request that got no answer is a :class:`~hermes_actors.errors.PlatformError` saying why (never the URL)."""
    get_json = importlib.import_module("platforms.support.credentials").get_json
    return cast(tuple[int, Any], get_json(url, headers=headers, timeout_s=timeout_s))


def probe_listen(adapter: Adapter) -> None:
    """Raise the :class:`~hermes_actors.errors.PlatformError` ``adapter.start`` would give for an address it cannot
    bind now (nothing for an adapter that listens nowhere)."""
    probe = getattr(adapter, "probe_listen", None)
    if probe is not None:
        probe()


def new_webhook_secret() -> str:
    """A fresh secret for a webhook route (the default ``config.yaml`` is written with one)."""
    make = cast(Callable[[], str], _load(PLATFORMS["webhook"], "new_webhook_secret"))
    return make()


def event_sender(
    config: EventsConfig, *, queued_at: Callable[[int], float | None], environ: Mapping[str, str]
) -> ReplySender:
    """The outbox's sender of event deliveries to ``config``'s webhooks (``platforms.support.event_webhooks``, loaded
    by path like :func:`shared_listener`); ``queued_at`` reads when a delivery's row was queued. A secret that is
    missing or malformed is a :class:`~hermes_actors.errors.ConfigError` naming its field."""
    module = importlib.import_module("platforms.support.event_webhooks")
    return cast(ReplySender, module.EventSender(config, queued_at=queued_at, environ=environ))
