from __future__ import annotations

import hermes_actors
import hermes_actors.routing
import hermes_actors.store


def test_the_package_exports_are_pinned() -> None:
    assert hermes_actors.__all__ == [
        "AmbiguousSessionError",
        "ConfigError",
        "EndReason",
        "HermesError",
        "KeyPolicy",
        "NewMessage",
        "PlatformError",
        "Role",
        "RoutingError",
        "SchemaVersionError",
        "SessionClosedError",
        "SessionKey",
        "SessionKind",
        "SessionNotFoundError",
        "SessionSource",
        "Store",
        "StoreError",
        "TitleError",
        "TitleInUseError",
        "build_session_key",
        "new_session_id",
        "parse_session_key",
    ]


def _isort_order(name: str) -> tuple[int, str]:
    # Constants, then classes, then functions: the order ruff's RUF022 keeps.
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


def test_every_exported_name_exists_and_lists_are_sorted() -> None:
    for module in (hermes_actors, hermes_actors.routing, hermes_actors.store):
        assert module.__all__ == sorted(module.__all__, key=_isort_order)
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
