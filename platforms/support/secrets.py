"""Secrets in a platform's config: given in ``config.yaml`` as ``X``, or named by ``X_env`` and read from the
environment when the adapter is built.

:func:`check_secret_source` is the check a config Struct makes at load (one of the two, a valid variable name);
:func:`read_env_secret` reads the variable when the adapter is built, so a missing one is a
:class:`~hermes_actors.errors.ConfigError` naming it before anything starts; :func:`resolve_secret` is the two
together with the platform's shape check of a value read from the environment. Checks of the value's own shape (a
token pattern, no surrounding spaces) stay with the platform.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from hermes_actors.errors import ConfigError

__all__ = ["ENV_NAME", "check_secret_source", "read_env_secret", "resolve_secret", "secret_origin"]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What an ``X_env`` field may hold: an environment variable name."""


def check_secret_source(
    path: str, field: str, value: str | None, env: str | None, *, example_env: str, missing: str | None
) -> None:
    """Check that the secret ``field`` of the section at ``path`` is set at most one way, ``field`` or ``field_env``.

    Set neither way, it is a :class:`ConfigError` with the message ``missing`` (``None``: the secret is optional);
    set both ways, or ``field_env`` not a variable name (``example_env`` shows one), a :class:`ConfigError` too.
    """
    if value is None and env is None:
        if missing is not None:
            raise ConfigError(f"{path}.{field}", missing)
        return
    if value is not None and env is not None:
        raise ConfigError(f"{path}.{field}_env", f"set either {field} or {field}_env, not both")
    if env is not None and not ENV_NAME.fullmatch(env):
        raise ConfigError(f"{path}.{field}_env", f"must be an environment variable name such as {example_env}")


def read_env_secret(
    path: str, env: str, environ: Mapping[str, str], *, export: str | None = None, strip: bool = False
) -> str:
    """The value of the variable ``env`` in ``environ`` (``strip``: without surrounding whitespace).

    Unset or empty, it is a :class:`ConfigError` at ``path`` saying so, followed by ``export`` when given (what to
    export, such as "export the bot token").
    """
    value = environ.get(env, "")
    if strip:
        value = value.strip()
    if not value:
        hint = f"; {export}" if export else ""
        raise ConfigError(path, f"environment variable {env} is not set{hint}")
    return value


def resolve_secret(
    path: str,
    value: str | None,
    env: str | None,
    environ: Mapping[str, str],
    *,
    export: str,
    strip: bool = False,
    check: Callable[[str, str, str], object] | None = None,
) -> str | None:
    """The secret at ``path`` (``platforms.x.bots.main.token``): ``value`` as ``config.yaml`` gives it, or read from
    the variable ``env`` (see :func:`read_env_secret`; ``export`` says what to export). A value read from the
    environment goes through ``check(value, f"{path}_env", f"the value of {env}")``, the platform's shape check,
    which raises :class:`ConfigError`; a value in ``config.yaml`` was checked when the file was loaded."""
    if env is None:
        return value
    secret = read_env_secret(f"{path}_env", env, environ, export=export, strip=strip)
    if check is not None:
        check(secret, f"{path}_env", f"the value of {env}")
    return secret


def secret_origin(what: str, env: str | None) -> str:
    """Where a secret comes from, for a banner line: ``"token from $X"`` or ``"token in config.yaml"``."""
    return f"{what} from ${env}" if env else f"{what} in config.yaml"
