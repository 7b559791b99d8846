"""How every figure looks and ships: perfkit's font and ground (`style`), the sentence that stands in for a
figure without data (`empty_state`), the dashboard's and report's plot settings, and `new_figure`.

plotly is imported here, inside the functions that make a figure, and nowhere else: the figure modules import
this one, so that `perfkit summary`, which lists the panels holding the figure functions, imports no plotly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..format import NUMBER_SPEC

if TYPE_CHECKING:
    import plotly.graph_objects as go


# A line trace wider than the plot in pixels shows nothing more: a dashboard plot is ~1,000-1,500 px wide,
# and plotly draws 2,000 SVG points per trace well under 100 ms.
MAX_POINTS_PER_TRACE = 2000
FONT = dict(family="Inter, 'Segoe UI', Helvetica, Arial, sans-serif", size=13, color="#222")
# d3-format of ms in hover labels: the formatters' `1,421.820`.
HOVER_MS = "%{y:" + NUMBER_SPEC + "} ms"
# How the dashboard and the report show a figure: the toolbar (on hover, top right) keeps the four buttons a
# reader uses, so it stays narrow and clear of a figure's title on its left.
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": "hover",
               "modeBarButtonsToRemove": ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d",
                                          "toggleSpikelines", "hoverClosestCartesian", "hoverCompareCartesian"]}


def new_figure(*traces: Any) -> go.Figure:
    """A plotly Figure (of `traces`, or a copy of a figure)."""
    import plotly.graph_objects as go
    return go.Figure(*traces)


def empty_state(message: str, height: int = 160) -> go.Figure:
    """A figure that says in words why there is nothing to plot: no axes, no traces."""
    fig = new_figure()
    fig.update_layout(meta={"empty": message}, height=height, font=FONT, plot_bgcolor="white",
                      paper_bgcolor="white", margin=dict(l=20, r=20, t=20, b=20),
                      xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                                        font=dict(size=15, color="#666"))])
    return fig


def empty_message(fig: go.Figure) -> str | None:
    """The sentence of an `empty_state` figure, None for a figure with data."""
    meta = fig.layout.meta
    return meta.get("empty") if isinstance(meta, dict) else None


def style(fig: go.Figure, title: str, height: int = 380, **layout: Any) -> go.Figure:
    """`fig` in perfkit's look: its title top left, white ground, light grid, the legend above on the right."""
    fig.update_layout(title=dict(text=title, x=0.01, xanchor="left", font=dict(size=16)), height=height,
                      font=FONT, plot_bgcolor="white", paper_bgcolor="white",
                      margin=dict(l=60, r=30, t=60, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                                  traceorder="normal"), **layout)
    fig.update_xaxes(gridcolor="#eee", zerolinecolor="#ccc")
    fig.update_yaxes(gridcolor="#eee", zerolinecolor="#ccc")
    return fig
