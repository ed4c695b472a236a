"""``hermesctl service unit``: the systemd unit that runs this installation's ``hermesd``."""

from __future__ import annotations

from pathlib import Path

import click

from hermes_actors.daemon.service_unit import unit_text

__all__ = ["service"]


@click.group("service")
def service() -> None:
    """Run hermesd as a service."""


@service.command("unit")
@click.option(
    "--home",
    type=click.Path(file_okay=False, dir_okay=True),
    default=None,
    help="State directory of the service (default: systemd's StateDirectory, /var/lib/hermes).",
)
@click.option("--user", "user_unit", is_flag=True, help="A unit for systemctl --user (~/.local/state/hermes).")
def service_unit(home: str | None, user_unit: bool) -> None:
    """Print a systemd unit (Type=notify, watchdog, sandboxed) that runs this installation's hermesd.

    \b
    Examples:
      hermesctl service unit | sudo tee /etc/systemd/system/hermesd.service
      sudo systemctl daemon-reload && sudo systemctl enable --now hermesd
      hermesctl service unit --user > ~/.config/systemd/user/hermesd.service
    """
    click.echo(unit_text(home=Path(home) if home else None, user_unit=user_unit), nl=False)
