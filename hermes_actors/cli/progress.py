"""Progress on stderr for the long ``hermesctl db`` commands: phases with their time, and pages copied.

On a terminal a phase is one line, ``integrity check... 2.1 s``, written as it starts and finished when it ends,
and a copy's counter is rewritten in place. Anywhere else (a log, a pipe) every line is whole when written:
``integrity check: 2.1 s`` once a phase ends, and a copy's counter every tenth of the way. stdout keeps only the
result, so scripts read it unchanged.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType

import click

__all__ = ["PageMeter", "Phases"]


def _on_terminal() -> bool:
    return sys.stderr.isatty()


class Phases:
    """``with Phases() as phases: run(progress=phases)``: each call names the phase starting now and ends the one
    before; leaving the block ends the last (an exception marks it failed)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._terminal = _on_terminal()
        self._phase: str | None = None
        self._started = 0.0

    def __call__(self, phase: str) -> None:
        self._end()
        self._phase, self._started = phase, self._clock()
        if self._terminal:
            click.echo(f"{phase}... ", nl=False, err=True)

    def _end(self, outcome: str = "") -> None:
        if self._phase is None:
            return
        took = f"{self._clock() - self._started:.1f} s{outcome}"
        click.echo(took if self._terminal else f"{self._phase}: {took}", err=True)
        self._phase = None

    def __enter__(self) -> Phases:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end("" if exc_type is None else ", failed")


class PageMeter:
    """A ``(done, total)`` progress callback printing ``<what>: 512/5,000 pages (10%)``."""

    def __init__(self, what: str, unit: str = "pages") -> None:
        self._what = what
        self._unit = unit
        self._terminal = _on_terminal()
        self._shown = -1  # the last tenth a line was written for (off a terminal)

    def __call__(self, done: int, total: int) -> None:
        percent = 100 if total <= 0 else done * 100 // total
        text = f"{self._what}: {done:,}/{total:,} {self._unit} ({percent}%)"
        if self._terminal:
            click.echo("\r" + text, nl=done >= total, err=True)
        elif percent // 10 > self._shown:
            self._shown = percent // 10
            click.echo(text, err=True)
