"""The Memory page: the allocator's memory over time per rank and the operators holding the most."""

from __future__ import annotations

from dash import html

from perfkit import analysis, figures
from perfkit.model import Run

from .layout import card, graph


def _peak_line(run: Run) -> str:
    memory = analysis.memory_summary(analysis.memory_peaks(run))
    if memory is None:
        return ""
    capacity = memory["capacity_mb"]
    used = f" · {100 * (memory['peak_reserved_mb'] or 0) / capacity:.1f} % of {capacity:,.0f} MB" if capacity else ""
    return (f"peak allocated {memory['peak_allocated_mb']:,.1f} MB · peak reserved "
            f"{memory['peak_reserved_mb'] or 0:,.1f} MB{used} (largest rank)")


def page(run: Run) -> list:
    return [card("Memory", html.P(_peak_line(run), className="meta", id="memory-peak"),
                 graph(figures.memory_timeline_figure(run), "fig-memory")),
            card("Operators by memory", graph(figures.top_op_memory_figure(run), "fig-op-memory"))]
