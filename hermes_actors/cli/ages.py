"""Ages on the command line (``--older-than 90d``, or ``90``: days, as the reference system takes it)."""

from __future__ import annotations

import re
from typing import Any

import click
import msgspec

__all__ = ["DEFAULT_PRUNE_AGE", "Age", "AgeType", "parse_age"]

_AGE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<unit>[mhdw]?)")
_AGE_UNITS = {"m": 60.0, "h": 3_600.0, "d": 86_400.0, "w": 604_800.0}
_AGE_FORMS = "days (30) or a number and a unit: 30m (minutes), 12h (hours), 90d (days) or 2w (weeks)"


class Age(msgspec.Struct, frozen=True, kw_only=True):
    """A span typed on the command line (``90d``), kept as typed for messages."""

    text: str
    seconds: float

    @property
    def days(self) -> float:
        """The span in days, as :class:`PruneFilter` takes it."""
        return self.seconds / 86_400.0


DEFAULT_PRUNE_AGE = Age(text="90d", seconds=90 * 86_400.0)


def parse_age(text: str) -> Age:
    """Parse ``30m``, ``12h``, ``90d``, ``2w`` or plain days (``30``, shown as ``30d``); raise ``ValueError``
    naming the accepted forms."""
    match = _AGE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not an age; give {_AGE_FORMS}")
    unit = match["unit"] or "d"
    return Age(text=match["number"] + unit, seconds=float(match["number"]) * _AGE_UNITS[unit])


class AgeType(click.ParamType[Age, Any]):
    """A click parameter type for :func:`parse_age`; a bad value is a usage error (exit status 2)."""

    name = "age"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Age:
        if isinstance(value, Age):
            return value
        try:
            return parse_age(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
