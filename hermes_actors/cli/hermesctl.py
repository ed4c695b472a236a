"""``hermesctl``: the admin and terminal tool.

Each command is a thin shell over library calls; library errors become ``Error: ...`` with exit status 1 and usage
errors exit 2 (click's own). Command groups live in ``ctl_*`` modules and are registered here.
"""

from __future__ import annotations

import click

from hermes_actors.cli.ctl_chat import chat
from hermes_actors.cli.ctl_cluster import cluster
from hermes_actors.cli.ctl_console import console_command
from hermes_actors.cli.ctl_daemon import admin_key_command, config, status
from hermes_actors.cli.ctl_db import db
from hermes_actors.cli.ctl_events import events
from hermes_actors.cli.ctl_import import import_hermes
from hermes_actors.cli.ctl_jobs import jobs
from hermes_actors.cli.ctl_messages import messages
from hermes_actors.cli.ctl_search import search
from hermes_actors.cli.ctl_service import service
from hermes_actors.cli.ctl_sessions import sessions
from hermes_actors.daemon.banner import version

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version(), "--version", prog_name="hermesctl", message="%(prog)s %(version)s")
def main() -> None:
    """Administer hermes-actors sessions and the state database."""


sessions.add_command(search)
for command in (
    chat,
    status,
    config,
    admin_key_command,
    console_command,
    service,
    db,
    sessions,
    import_hermes,
    cluster,
    messages,
    events,
    jobs,
):
    main.add_command(command)
