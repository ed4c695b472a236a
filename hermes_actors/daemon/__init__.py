"""``hermesd``: the daemon process, its configuration file, control socket and logs."""
