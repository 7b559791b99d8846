"""perfkit in Jupyter: docs/perfkit_in_jupyter.ipynb executed by nbclient in a real kernel. Its outputs hold the
headline cards, the findings and the figures, each number checked against the sample run's own files."""

from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

import perfkit
from perfkit.render import report  # noqa: E402
from perfkit.views import numbers  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "docs" / "perfkit_in_jupyter.ipynb"
RUN = REPO / "sample_runs" / "cpu_default"
OTHER = REPO / "sample_runs" / "cpu_avx2"


KERNEL = "perfkit-test"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook run in a kernel of this Python (a kernelspec of our own, first on JUPYTER_PATH: a user's
    `python3` kernel may be another Python, without perfkit)."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    cache = tmp_path_factory.mktemp("cache")
    jupyter = tmp_path_factory.mktemp("jupyter")
    (jupyter / "kernels" / KERNEL).mkdir(parents=True)
    (jupyter / "kernels" / KERNEL / "kernel.json").write_text(json.dumps(
        {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
         "display_name": KERNEL, "language": "python"}))
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), "PERFKIT_CACHE_DIR": str(cache),
           "JUPYTER_PATH": str(jupyter)}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nbclient.NotebookClient(notebook, timeout=300, kernel_name=KERNEL,
                                resources={"metadata": {"path": str(REPO)}}).execute()
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def html_of(cell) -> str:
    (output,) = [output for output in cell.outputs if "text/html" in output.get("data", {})]
    return output["data"]["text/html"]


def mean_step_ms(folder: Path, used: list[int]) -> float:
    """Independently: the mean of the steps perfkit profile recorded (perfkit_run.json, epoch ns)."""
    steps = json.loads((folder / "perfkit_run.json").read_text())["steps"]
    return sum((s["end_ns"] - s["begin_ns"]) / 1e6 for s in steps if s["step"] in used) / len(used)


def figures_in(text: str) -> list[dict]:
    """The plotly figures an output draws: the data of each Plotly.newPlot call."""
    calls = re.findall(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', text, flags=re.S)
    return [json.loads(call) for call in calls]


def array(values) -> list:
    """A plotly array as written in HTML: a list, or plotly 6's typed array (base64 bytes and their dtype)."""
    if isinstance(values, dict):
        import base64

        import numpy as np
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return values


def test_a_run_shows_its_cards_findings_and_figures(executed):
    run = perfkit.load(RUN)
    shown = html_of(executed[0])
    assert shown.startswith('<div class="perfkit-output">') and "Plotly.newPlot" in shown
    summary = perfkit.summarize(run)
    mean_of = summary["steps"]["mean_of"]
    used = list(range(mean_of["first"], mean_of["last"] + 1))
    expected = f"{mean_step_ms(RUN, used):,.3f} ms"
    cards = dict(re.findall(r'<div class="label">([^<]*)</div><div class="value">([^<]*)</div>', shown))
    assert cards[f"mean step (steps {used[0]}-{used[-1]})"] == expected == next(
        c.value for c in numbers.headline_cards(run) if c.key == "mean-step")
    for finding in perfkit.advise(run).findings:  # compute_bound (low) and the rest, worded as everywhere
        assert html.escape(finding.title) in shown
    drawn = figures_in(shown)
    step_bars = [trace for figure in drawn for trace in figure if trace.get("name") == "forward+backward"]
    recorded = json.loads((RUN / "perfkit_run.json").read_text())["steps"]
    assert step_bars and list(array(step_bars[0]["x"])) == [step["step"] for step in recorded]  # a bar per step
    assert "body {" not in shown and ".perfkit-output .card" in shown  # the report's look, kept to the output


def test_the_summary_advice_and_compare_show_and_stay_their_json(executed):
    summary_html, advice_html, compare_html, show_html = (html_of(cell) for cell in executed[1:5])
    assert '<div class="kpis">' in summary_html and "Findings" not in summary_html and figures_in(summary_html)
    run = perfkit.load(RUN)
    advice = perfkit.advise(run)
    assert [html.unescape(t) for t in re.findall(r'<span class="title">([^<]*)</span>', advice_html)] == \
        [finding.title for finding in advice.findings]
    assert "Plotly" not in advice_html  # no figure, no bundle
    speedup = mean_step_ms(RUN, list(range(1, 4))) / mean_step_ms(OTHER, list(range(1, 4)))
    summary = perfkit.summarize(run)
    assert summary["steps"]["mean_of"]["count"] == 3  # the speedup above is over the same 3 steps
    # the card's value is the verdict (one run a side, within the noise), the speedup in the verdict line under it
    assert '<div class="value">no significant change</div>' in compare_html
    assert f"speedup {speedup:.2f}x" in compare_html and figures_in(compare_html)
    # plotly.js once per kernel: in the first output with figures only (4 outputs held 5.2 MB, one copy each)
    bundle = f"<script>{report.PLOTLY_BUNDLE.read_text(encoding='utf-8')}</script>"
    outputs = [html_of(cell) for cell in executed[:5]]
    assert [output.count(bundle) for output in outputs] == [1, 0, 0, 0, 0]
    plot_ids = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # each figure's div

    def shown(output: str) -> str:  # the output less its first script: the bundle, or the note where it is missing
        return plot_ids.sub("", re.sub(r"<script>.*?</script>", "", output, count=1, flags=re.S))
    assert shown(show_html) == shown(html_of(executed[0]))  # perfkit.show(run) shows the run
    # the objects are still the JSON contracts' dicts
    assert json.loads(json.dumps(summary))["steps"]["total_ms"] == pytest.approx(summary["steps"]["total_ms"])
    result = perfkit.compare(run, perfkit.load(OTHER))
    assert isinstance(result, dict) and result["speedup"] == pytest.approx(speedup, rel=1e-9)
    assert executed[0].outputs[0]["data"]["text/plain"].startswith("run ")  # the terminal summary as plain text
