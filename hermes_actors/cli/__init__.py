"""Command-line entry points: ``hermesd`` (the daemon) and ``hermesctl`` (admin and terminal tool)."""
