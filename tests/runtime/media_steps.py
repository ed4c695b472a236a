"""Describe steps for the media tests, importable by name as ``media.describe`` would name them."""

from __future__ import annotations

from pathlib import Path

from hermes_actors.messages import Attachment

__all__ = ["NOT_A_FUNCTION", "describe_by_size", "describe_failing"]

NOT_A_FUNCTION = "a string"


def describe_by_size(path: Path, attachment: Attachment) -> str:
    """A description that proves the step saw the saved file and its record."""
    return f"A {attachment.kind} of {path.stat().st_size} bytes named {attachment.name}."


def describe_failing(path: Path, attachment: Attachment) -> str:
    """A describe step that always fails (the file is saved all the same, without a description)."""
    raise RuntimeError("the vision service is down")
