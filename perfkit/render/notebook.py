"""Rich display in Jupyter (where HTA and XProf users work): a Run, its summary, its findings and a comparison
show as the report shows them, headline cards, findings and figures, built by the report's renderers over the view
layer's panels (perfkit/views), so every number and its wording have one definition.

`perfkit.summarize(run)` and `perfkit.compare(a, b)` return the JSON contracts' dicts, which here also know their
runs and show themselves (`Summary`, `Comparison`: _repr_html_, _repr_mimebundle_); a Run and an Advice are shown by
run_html / advice_html, which perfkit/__init__.py registers with IPython's formatters (NOTEBOOK_DISPLAY: why not
methods). `perfkit.show(x)` displays any of them (outside Jupyter it prints their terminal text). The kernel's first
output with figures holds plotly.js's basic bundle (the report's, 1.2 MB), so figures draw with no network
(training clusters often have none); later outputs find it in the page.
The report's stylesheet applies inside the output only.
"""

from __future__ import annotations

import html
import re
import sys
from typing import Any

from ..core.model import Run
from ..views import numbers
from ..views.compare import Comparison
from ..views.panel import CARDS, FIGURE, STATUS, TABLE
from ..views.summary import Summary, summarize
from . import report
from .compare import compare_text
from .text import summary_text

SCOPE = "perfkit-output"
# The report's page-level rules (they would restyle the notebook itself) and its dashboard grid tweaks.
PAGE_SELECTORS = ("body", "header", "main", ".ag-")
# One @media block around one rule, as the report's stylesheet has it.
MEDIA_RULE = re.compile(r"@media[^{]*\{[^{}]*\{[^{}]*\}\s*\}")
RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")


def _scoped(css: str) -> str:
    """The report's stylesheet for one output: its page rules and @media blocks left out, every other rule
    limited to the output's own element."""
    rules = []
    for match in RULE.finditer(MEDIA_RULE.sub("", css)):
        selectors = [selector.strip() for selector in match.group(1).split(",")]
        kept = [f".{SCOPE} {selector}" for selector in selectors if not selector.startswith(PAGE_SELECTORS)]
        if kept:
            rules.append(f"{', '.join(kept)} {{{match.group(2)}}}")
    return "\n".join(rules)


STYLE = _scoped(report.STYLESHEET)


# Said in an output with figures whose page holds no plotly.js (the output that carried it was cleared).
NO_PLOTLY = ("plotly.js is not in this page: perfkit sends it once per kernel, with its first output of figures; "
             "restart the kernel and run the notebook again to draw these figures")
# plotly.js goes into this kernel's first output with figures only: every later output's figures find it in the
# page (4 outputs held 5.2 MB, one copy each). A restarted kernel sends it again.
_PLOTLY_SENT: set[str] = set()


def _output(body: str, with_figures: bool) -> str:
    """One output's HTML: the scoped stylesheet, plotly.js where figures follow and the page has none yet, the
    body; where it has no plotly.js after all, a line saying why its figures are blank."""
    script = ""
    if with_figures and "plotly" not in _PLOTLY_SENT:
        script = f"<script>{report.PLOTLY_BUNDLE.read_text(encoding='utf-8')}</script>"
        _PLOTLY_SENT.add("plotly")
    elif with_figures:
        script = ("<script>if (!window.Plotly) { document.currentScript.insertAdjacentHTML('afterend', "
                  f"'<p class=\"meta\">{html.escape(NO_PLOTLY)}</p>'); }}</script>")
    return f'<div class="{SCOPE}"><style>{STYLE}</style>{script}{body}</div>'


def _bundle(html_text: str, text: str) -> dict[str, str]:
    return {"text/html": html_text, "text/plain": text}


# ---- what each object shows

def run_html(run: Run) -> str:
    """A run as the report shows it: cards, findings, figures and tables."""
    return _output(report.run_section(0, run.name, run), with_figures=True)


def summary_html(summary: Summary) -> str:
    """A summary (perfkit.summarize's) as the report shows its run: cards and figures (its findings are
    perfkit.advise's)."""
    return _output(report.run_section(0, summary.run.name, summary.run, kinds=(STATUS, CARDS, FIGURE, TABLE)),
                   with_figures=True)


def summary_plain(summary: Summary, printer=None, cycle: bool = False) -> str:
    """A summary as plain text: `perfkit summary`'s."""
    return _plain(summary_text(summary), printer)


def advice_html(advice) -> str:
    """An Advice: what bounds the step, then its findings (views.numbers.findings_of: worded once)."""
    bound = advice.bound or {}
    lines = "".join(f'<p class="meta">{html.escape(line)}</p>'
                    for line in ([advice.caveat] if advice.caveat else []) + _bound_lines(bound))
    body = lines + report.findings_card("Findings (perfkit advise)", numbers.findings_of(advice))
    return _output(f'<p class="meta">{html.escape(advice.run)}</p>{body}', with_figures=False)


def _bound_lines(bound: dict[str, Any]) -> list[str]:
    from ..views.lines import bound_text
    return [line.strip() for line in bound_text(bound)] if bound else []


def comparison_html(comparison: Comparison) -> str:
    """A comparison (perfkit.compare's) as the dashboard's compare page shows it: speedup with the run-to-run
    verdict and samples/s, step split and spread, op time, queues."""
    return _output(report.compare_section(comparison.runs), with_figures=True)


def comparison_plain(comparison: Comparison, printer=None, cycle: bool = False) -> str:
    """A comparison as plain text: `perfkit compare`'s."""
    return _plain(compare_text(comparison), printer)


def run_text(run: Run, printer=None, cycle: bool = False) -> str:
    """A run as plain text: `perfkit summary`'s (with IPython's pretty printer: written to it)."""
    return _plain(summary_text(summarize(run)), printer)


def advice_text(advice, printer=None, cycle: bool = False) -> str:
    """An Advice as plain text: `perfkit advise`'s."""
    from .advice import advice_text as text
    return _plain(text(advice), printer)


def _plain(text: str, printer) -> str:
    if printer is not None:
        printer.text(text)
    return text


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel), where HTML outputs show."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and getattr(shell, "kernel", None) is not None


def show(value) -> None:
    """Display a Run, a summary, an Advice or a comparison in Jupyter (what the cell's last line shows); elsewhere
    (a script, a terminal IPython) print its terminal text, as `perfkit summary`, `advise` or `compare` print it."""
    from ..advisor import Advice
    shown = {Run: (run_html, run_text), Advice: (advice_html, advice_text), Summary: (summary_html, summary_plain),
             Comparison: (comparison_html, comparison_plain)}
    kind = next((kind for kind in shown if isinstance(value, kind)), None)
    if kind is None:
        raise TypeError(f"perfkit.show takes a Run, perfkit.summarize's, perfkit.advise's or perfkit.compare's "
                        f"result, not {type(value).__name__}")
    as_html, as_text = shown[kind]
    if in_notebook():
        from IPython.display import HTML, display
        display(HTML(as_html(value)))
    else:
        print(as_text(value))
