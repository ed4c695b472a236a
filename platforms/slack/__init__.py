"""Slack: the Events API over HTTP in, ``chat.postMessage`` out, for several apps and workspaces at once."""
