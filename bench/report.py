"""Output shared by the bench scripts: one ``name: value unit (note)`` line per figure."""

from __future__ import annotations

__all__ = ["figure_line"]


def figure_line(name: str, value: float | int | str, unit: str = "", note: str = "") -> str:
    """Return one figure as ``name: value unit (note)``, with a precision that suits its size."""
    if isinstance(value, float):
        text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    else:
        text = str(value)
    line = f"{name}: {text}"
    if unit:
        line += f" {unit}"
    if note:
        line += f" ({note})"
    return line
