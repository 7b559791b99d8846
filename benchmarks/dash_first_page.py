"""How long the dashboard's first page takes to be fully drawn in headless Chromium, per run, warm cache.

For each run: one `perfkit summary RUN` fills a scratch Parquet cache (the cold load), then the real
`perfkit dash RUN --port P` starts over that cache ("server ready": until GET / answers, i.e. warm load + app
build), and the overview page is opened `--repeat` times in headless Chromium. "Warm" is perfkit's cache; the
browser's HTTP cache is off, so every load fetches every script as a first visit does.

"Drawn" is the browser's own clock: a checker injected before the page's scripts runs every 20 ms and records
performance.now() (ms since navigation start) the first time every graph container holds a plot SVG with its
traces drawn, no Dash loading marker remains, and the headline numbers and findings panel are in the DOM. The
checker also wraps fetch to note each callback's output, duration and response size.

    python benchmarks/dash_first_page.py --out benchmarks/results/dash_first_page.txt
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
from dash_load import Server  # noqa: E402
from test_dashboard_browser import CHROMIUM, make_driver  # noqa: E402

GENERATED = REPO / "benchmarks" / "generated"
RUNS = {"big_rank": GENERATED / "big_rank" / "rank0_ascend_pt", "legacy_10k_steps": GENERATED / "legacy_10k_steps",
        "ranks_256": GENERATED / "ranks_256"}
TARGET_RUN, TARGET_S = "big_rank", 3.0
DRAW_TIMEOUT_S = 120
POLL_S = 0.05

# Runs before any page script (CDP Page.addScriptToEvaluateOnNewDocument), so the time is taken by the page
# itself, at most 20 ms late, whatever selenium's polling costs.
PAGE_PROBE = """
window.__firstPage = {drawn: null, callbacks: []};
const realFetch = window.fetch;
window.fetch = function (input, init) {
  const url = typeof input === 'string' ? input : input.url;
  if (!url.includes('_dash-update-component')) return realFetch.apply(this, arguments);
  let output = '?';
  try { output = JSON.parse(init.body).output; } catch (e) {}
  const start = performance.now();
  return realFetch.apply(this, arguments).then(response => {
    window.__firstPage.callbacks.push({output, start, ms: performance.now() - start,
                                       bytes: Number(response.headers.get('content-length') || -1)});
    return response;
  });
};
function firstPageDrawn() {
  if (!document.querySelector('#page .kpis') || !document.querySelector('#page [id^="kpi-"]')) return false;
  const findings = [...document.querySelectorAll('#page .card h2')].find(h => h.textContent.startsWith('Findings'));
  if (!findings || !findings.parentElement.querySelector('#findings, .empty-state')) return false;
  if (document.querySelector('._dash-loading, [data-dash-is-loading="true"]')) return false;
  const graphs = [...document.querySelectorAll('#page .dash-graph')];
  return graphs.length > 0 && graphs.every(g => g.querySelector('.js-plotly-plot .main-svg')
                                              && g.querySelector('.trace, .annotation'));
}
const timer = setInterval(() => {
  if (window.__firstPage.drawn === null && firstPageDrawn()) {
    window.__firstPage.drawn = performance.now();
    clearInterval(timer);
  }
}, 20);
"""

PAGE_FACTS = """
const nav = performance.getEntriesByType('navigation')[0];
const resources = performance.getEntriesByType('resource');
return {drawn: window.__firstPage.drawn, callbacks: window.__firstPage.callbacks,
        graphs: document.querySelectorAll('#page .dash-graph').length,
        html_ms: nav.responseEnd, dom_ready_ms: nav.domContentLoadedEventEnd, load_ms: nav.loadEventEnd,
        bytes: nav.transferSize + resources.reduce((sum, r) => sum + r.transferSize, 0),
        scripts: resources.filter(r => r.initiatorType === 'script').map(r => r.name)};
"""


@dataclass
class PageLoad:
    drawn_s: float          # browser clock: navigation start -> fully drawn
    wall_s: float           # this process: driver.get() called -> drawn seen by polling
    html_s: float
    load_s: float
    graphs: int
    bytes: int
    callbacks: list[dict]   # {output, start, ms, bytes}
    scripts: list[str]      # URLs of the scripts the page fetched


@dataclass
class Measurement:
    name: str
    path: Path
    cold_summary_s: float
    server_ready_s: float
    loads: list[PageLoad]

    @property
    def median_s(self) -> float:
        return statistics.median(load.drawn_s for load in self.loads)

    @property
    def max_s(self) -> float:
        return max(load.drawn_s for load in self.loads)


def browser(profile_dir: Path):
    """Headless Chromium as the browser tests drive it, with its HTTP cache off so every load is a first one."""
    driver = make_driver(profile_dir)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PAGE_PROBE})
    return driver


def load_first_page(driver, url: str, timeout_s: float = DRAW_TIMEOUT_S) -> PageLoad:
    """Open `url` afresh and wait, polling every 50 ms, until the page's probe says it is fully drawn."""
    driver.get("about:blank")
    began = time.perf_counter()
    driver.get(url)
    deadline = began + timeout_s
    while True:
        facts = driver.execute_script(PAGE_FACTS)
        if facts["drawn"] is not None:
            break
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{url} was not fully drawn within {timeout_s:.0f} s ({facts['graphs']} graphs)")
        time.sleep(POLL_S)
    wall = time.perf_counter() - began
    return PageLoad(facts["drawn"] / 1000, wall, facts["html_ms"] / 1000, facts["load_ms"] / 1000,
                    facts["graphs"], int(facts["bytes"]), facts["callbacks"], facts["scripts"])


def measure(name: str, run: Path, driver, cache_dir: Path, repeat: int) -> Measurement:
    env = {**os.environ, "PERFKIT_CACHE_DIR": str(cache_dir)}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perfkit", "summary", str(run)], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cold = time.perf_counter() - began
    with Server([str(run)], startup_timeout_s=300, env=env) as server:
        loads = [load_first_page(driver, server.url) for _ in range(repeat)]
    if server.left:
        raise RuntimeError(f"perfkit dash left processes running: {server.left}")
    return Measurement(name, run, cold, server.ready_s, loads)


def chromium_version() -> str:
    return subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[0]


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe(m: Measurement, verdict: bool) -> list[str]:
    first = m.loads[0]
    callbacks = [c for load in m.loads for c in load.callbacks]
    largest = max(callbacks, key=lambda c: c["bytes"]) if callbacks else None
    slowest = max(callbacks, key=lambda c: c["ms"]) if callbacks else None
    drawn = ", ".join(f"{load.drawn_s:.2f}" for load in m.loads)
    plotly = sorted({url.rsplit("/", 1)[-1].split(".")[0]  # the file name without Dash's fingerprint
                     for load in m.loads for url in load.scripts if "plotly" in url})
    lines = [f"## {m.name}: {os.path.relpath(m.path, REPO)}",
             f"cold load (perfkit summary, empty cache): {m.cold_summary_s:6.1f} s",
             f"server ready (warm load + app build):     {m.server_ready_s:6.1f} s",
             f"first page fully drawn: median {m.median_s:.2f} s, max {m.max_s:.2f} s over {len(m.loads)} loads "
             f"({drawn} s; selenium wall {', '.join(f'{load.wall_s:.2f}' for load in m.loads)} s)"
             + (f"  [target <= {TARGET_S:.0f} s: {'met' if m.max_s <= TARGET_S else 'MISSED'}]" if verdict else ""),
             f"  html received {first.html_s:.2f} s, load event {first.load_s:.2f} s, {first.graphs} graphs, "
             f"transferred {first.bytes / 1e6:.2f} MB per load, {len(first.callbacks)} callbacks, "
             f"plotly.js: {', '.join(plotly) or 'none'}"]
    if largest:
        lines.append(f"  largest callback response: {largest['output']} {largest['bytes'] / 1e3:.0f} kB; "
                     f"slowest callback: {slowest['output']} {slowest['ms']:.0f} ms")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", default=list(RUNS), help=f"which runs ({', '.join(RUNS)}; default all)")
    parser.add_argument("--repeat", type=int, default=3, help="page loads per run (default %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    unknown = set(args.runs) - set(RUNS)
    if unknown:
        parser.error(f"unknown run(s) {', '.join(sorted(unknown))}; choose from {', '.join(RUNS)}")
    missing = [str(RUNS[name]) for name in args.runs if not RUNS[name].exists()]
    if missing:
        parser.error(f"not generated: {', '.join(missing)} (python benchmarks/generate.py)")
    lines = ["# dashboard first page (benchmarks/dash_first_page.py)",
             f"date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}",
             f"nproc: {os.cpu_count()}   {chromium_version()}   Python {sys.version.split()[0]}",
             f"load average at start (1/5/15 min): {load_average()}", ""]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="dash_first_page_") as scratch:
        driver = browser(Path(scratch) / "chromium")
        try:
            for name in args.runs:
                block = describe(measure(name, RUNS[name], driver, Path(scratch) / "cache", args.repeat),
                                 name == TARGET_RUN) + [""]
                print("\n".join(block), flush=True)
                lines += block
        finally:
            driver.quit()
    lines.append(f"load average at end (1/5/15 min): {load_average()}")
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
