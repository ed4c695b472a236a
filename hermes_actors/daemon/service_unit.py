"""The systemd unit that runs ``hermesd``: shipped as ``hermesd.service`` beside this module, filled in for one
installation by :func:`unit_text` (``hermesctl service unit`` prints it).

The unit is ``Type=notify`` (:mod:`hermes_actors.daemon.notify`): systemd counts hermesd started once its entry
points listen, restarts it when it fails or misses its watchdog, and runs it sandboxed: the file system read-only
but for the home, a private ``/tmp``, no new privileges. ``LimitNOFILE=`` leaves room for every HTTP listener at
its connection cap (``daemon.http_max_connections``). Without a home of its own the unit keeps the state in
systemd's ``StateDirectory=hermes`` (``/var/lib/hermes``; ``~/.local/state/hermes`` for a user unit).
"""

from __future__ import annotations

import getpass
import shutil
import sys
from importlib import resources
from pathlib import Path

__all__ = ["hermesd_command", "unit_text"]

# Options that need a mount or user namespace, which a user's service manager may not be able to set up.
_SYSTEM_ONLY = (
    "PrivateTmp=",
    "ProtectSystem=",
    "ProtectHome=",
    "PrivateDevices=",
    "ProtectKernelTunables=",
    "ProtectKernelModules=",
    "ProtectKernelLogs=",
    "ProtectControlGroups=",
    "ProtectClock=",
    "ProtectHostname=",
    "RestrictNamespaces=",
)
_HOMES = (Path("/home"), Path("/root"), Path("/run/user"))


def hermesd_command() -> str:
    """The ``hermesd`` of this installation: the script beside this interpreter, else the one on ``PATH``, else
    this interpreter running the module."""
    beside = Path(sys.executable).parent / "hermesd"
    if beside.exists():
        return _quoted(str(beside.absolute()))
    found = shutil.which("hermesd")
    if found is not None:
        return _quoted(str(Path(found).absolute()))
    return f"{_quoted(sys.executable)} -m hermes_actors.cli.hermesd"  # the module runs main() as a script


def unit_text(*, home: Path | None = None, user_unit: bool = False, hermesd: str | None = None) -> str:
    """The unit for ``hermesd`` (default :func:`hermesd_command`) on ``home`` (default systemd's state directory
    ``hermes``); ``user_unit`` for ``systemctl --user`` (no ``User=``, no namespace sandboxing)."""
    command = hermesd or hermesd_command()
    if home is None:
        state = ["StateDirectory=hermes", "StateDirectoryMode=0700"]
        home_value = "%S/hermes"
    else:
        home = home.expanduser().absolute()
        state = [f"ReadWritePaths={_quoted(str(home))}"]  # ProtectSystem=strict leaves only this writable
        home_value = _quoted(str(home))
    account = getpass.getuser()
    if not user_unit and account != "root":
        state.insert(0, f"User={account}")
    # The interpreter (a virtualenv's, or the one its symlink leads to) must stay readable under ProtectHome.
    places = [Path(sys.executable).absolute(), Path(sys.executable).resolve(), *([home] if home is not None else [])]
    inside_homes = any(_under(place, root) for place in places for root in _HOMES)
    text = (
        resources.files("hermes_actors.daemon")
        .joinpath("hermesd.service")
        .read_text(encoding="utf-8")
        .replace("@HERMESD@", command)
        .replace("@HOME@", home_value)
        .replace("@STATE@", "\n".join(state))
        .replace("@PROTECT_HOME@", "read-only" if inside_homes else "yes")
        .replace("@WANTED_BY@", "default.target" if user_unit else "multi-user.target")
    )
    if user_unit:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(_SYSTEM_ONLY)) + "\n"
    return text


def _under(path: Path, root: Path) -> bool:
    return path.is_absolute() and (path == root or root in path.parents)


def _quoted(value: str) -> str:
    """``value`` as one word of a unit file line: ``%`` doubled (systemd's specifier escape), double-quoted when
    it has spaces."""
    value = value.replace("%", "%%")
    if any(c.isspace() for c in value) or '"' in value:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value
