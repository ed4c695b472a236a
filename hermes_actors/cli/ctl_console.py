"""``hermesctl console``: where the web console is and how to log in to it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.options import home_option, reports_errors, resolve_home
from hermes_actors.daemon.admin_key import admin_key
from hermes_actors.daemon.config_file import Settings
from hermes_actors.daemon.control import connect
from hermes_actors.daemon.home import make_home, socket_path
from platforms import registry

__all__ = ["console_command", "console_url"]

_API = "api_server"
_URL = re.compile(r"https?://[^\s/()']+")


def _running_base(root: Path, settings: Settings) -> str | None:
    """The API server's base URL as a running ``hermesd`` reports it (``None``: not running, or no API)."""
    client = connect(socket_path(root, settings))
    if client is None:
        return None
    with client:
        status = client.status()
    for platform in status.platforms:
        if platform.name == _API:
            for line in platform.detail:
                found = _URL.search(line)
                if found is not None:
                    return found.group()
    return None


def console_url(root: Path, settings: Settings) -> str:
    """The console's URL: from the running ``hermesd`` when there is one, else from the configuration."""
    base = _running_base(root, settings)
    if base is None:
        section = settings.platforms.get(_API)
        if section is None or not registry.enabled(section):
            raise click.ClickException(
                "the API server is off (platforms.api_server.enabled: false in config.yaml); it serves the console, "
                "so turn it on"
            )
        if settings.daemon.http_port:
            host, port = settings.daemon.http_host, settings.daemon.http_port
        else:
            host, port = getattr(section, "host", "127.0.0.1"), getattr(section, "port", 8642)
        shown = f"[{host}]" if ":" in str(host) else str(host)
        base = f"http://{shown}:{port}"
    return f"{base}/console"


@click.command("console")
@home_option
@reports_errors
def console_command(home: str | None) -> None:
    """Print the web console's URL and how to log in.

    The console (conversations, search, transcripts, the live view) is served by hermesd on the API server's
    listener at /console; its login takes the admin key, which 'hermesctl admin-key' prints.

    Example: hermesctl console
    """
    root = resolve_home(home)
    make_home(root)
    settings = home_settings(root)
    url = console_url(root, settings)
    found = admin_key(root, settings, os.environ)
    click.echo(url)
    click.echo(f"  log in with the admin key ({found.describe()}): 'hermesctl admin-key' prints it", err=True)
    if _running_base(root, settings) is None:
        click.echo("  hermesd is not running on this home: start it with 'hermesd' first", err=True)
