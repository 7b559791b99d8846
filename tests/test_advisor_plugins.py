"""Rules from installed packages (entry point group `perfkit.rules`), touching no perfkit file.

Each test installs a tiny package into tmp_path the way pip lays one out (a module beside a `*.dist-info` folder
with METADATA and entry_points.txt) and puts that folder on the path: of the interpreter for `advise`, of a fresh
one for the CLI.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor import RULES

RUN = FIXTURE_RUNS["legacy_misc"]  # two ranks of 20 and 40 legacy step-trace steps

LONGEST_STEP = '''
from perfkit.advisor import Finding, rule


@rule("{rule_id}", needs=("steps",))
def longest_step(run):
    longest = float(run.steps["total_ms"].max())
    return [Finding(id="{rule_id}", severity="low", title=f"The longest step takes {{longest:.3f}} ms",
                    evidence={{"longest_step_ms": round(longest, 3)}}, action="none: a plugin's example",
                    est_gain_pct=None)]
'''


def install(site: Path, module: str, source: str, entry: str | None = None) -> Path:
    """Lay out the distribution `module`-plugin 1.0: its module and a dist-info naming it in perfkit.rules."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[perfkit.rules]\n{entry or module} = {module}\n")
    return site


def raw_longest_step_ms(folder: Path) -> float:
    """The longest step in the raw step traces: `total` in 10 ns ticks, the average row (`-`) left out."""
    totals = []
    for path in folder.glob("step_trace_raw_*_detail_time.csv"):
        with path.open(newline="") as handle:
            totals += [int(row["total"]) for row in csv.DictReader(handle) if row["step_num"] not in ("-", "0")]
    return max(totals) / 1e5


def perfkit_cli(*args: str, site: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "PERFKIT_CACHE_DIR": str(cache)}
    env.pop("PERFKIT_NO_CACHE", None)
    return subprocess.run([sys.executable, "-m", "perfkit", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def test_a_rule_from_an_installed_package_shows_in_advise_text_and_json(tmp_path):
    site = install(tmp_path / "site", "acme_longest", LONGEST_STEP.format(rule_id="longest_step"))
    expected = round(raw_longest_step_ms(RUN), 3)
    assert expected == 130.652  # rank 0's step 11: 13,065,249 ticks
    cache = tmp_path / "cache"
    cold = perfkit_cli("advise", str(RUN), "--format", "json", site=site, cache=cache)
    warm = perfkit_cli("advise", str(RUN), "--format", "json", site=site, cache=cache)
    assert cold.returncode == warm.returncode == 0 and "Traceback" not in cold.stderr, cold.stderr
    assert warm.stdout == cold.stdout
    payload = json.loads(cold.stdout)
    found = [f for f in payload["findings"] if f["id"] == "longest_step"]
    assert len(found) == 1 and found[0]["evidence"] == {"longest_step_ms": expected}
    text = perfkit_cli("advise", str(RUN), site=site, cache=cache)
    assert text.returncode == 0
    assert "longest_step" in text.stdout and f"The longest step takes {expected:.3f} ms" in text.stdout
    # the kept answer depends on the installed plugins: without the package, advise answers without its rule
    without = perfkit_cli("advise", str(RUN), "--format", "json", site=tmp_path / "empty", cache=cache)
    assert without.returncode == 0 and "longest_step" not in without.stdout
    # and perfkit's own rules said the same with the plugin as without it
    assert json.loads(without.stdout) == {**payload, "findings": [f for f in payload["findings"] if f not in found],
                                          "passed": [r for r in payload["passed"] if r != "longest_step"]}


def test_the_same_rule_runs_in_process_next_to_perfkits_own(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(install(tmp_path / "site", "acme_longest_inproc",
                                            LONGEST_STEP.format(rule_id="longest_step_inproc"))))
    run = perfkit.load(RUN)
    advice = perfkit.advise(run)
    found = [f for f in advice.findings if f.id == "longest_step_inproc"]
    assert [f.evidence for f in found] == [{"longest_step_ms": round(raw_longest_step_ms(RUN), 3)}]
    assert "longest_step_inproc" not in [rule.id for rule in RULES]  # the plugin's rule is not one of perfkit's


BROKEN = {
    # a package whose import fails
    "acme_missing_dep": "import acme_module_that_is_not_installed\n",
    # a rule that raises while checking
    "acme_raises": ("from perfkit.advisor import rule\n\n@rule('raises_at_check', needs=('steps',))\n"
                    "def check(run):\n    return 1 / 0\n"),
    # a rule that returns something that is not a list of Findings
    "acme_returns_text": ("from perfkit.advisor import rule\n\n@rule('returns_text')\n"
                          "def check(run):\n    return 'slow'\n"),
    # a rule whose id is perfkit's own, and one needing what perfkit does not know
    "acme_clashes": ("from perfkit.advisor import rule\n\n@rule('tail')\ndef mine(run):\n    return []\n\n"
                     "@rule('needs_gpu_clock', needs=('gpu_clock',))\ndef other(run):\n    return []\n"),
}


def test_a_broken_plugin_is_one_line_naming_it_and_the_other_rules_still_run(tmp_path):
    site = tmp_path / "site"
    for module, source in BROKEN.items():
        install(site, module, source)
    clean = perfkit_cli("advise", str(RUN), "--format", "json", site=tmp_path / "empty", cache=tmp_path / "c1")
    done = perfkit_cli("advise", str(RUN), "--format", "json", site=site, cache=tmp_path / "c2")
    assert clean.returncode == done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and done.stderr == clean.stderr
    before, after = json.loads(clean.stdout), json.loads(done.stdout)
    assert after["findings"] == before["findings"] and after["passed"] == before["passed"]
    reasons = {entry["rule"]: entry["reason"] for entry in after["not_checked"]}
    added = {rule: reason for rule, reason in reasons.items()
             if rule not in {entry["rule"] for entry in before["not_checked"]}}
    missing_dep = "plugin acme_missing_dep = acme_missing_dep from acme_missing_dep-plugin 1.0"
    clashes = "plugin acme_clashes = acme_clashes from acme_clashes-plugin 1.0"
    assert added.keys() == {missing_dep, "raises_at_check", "returns_text", clashes}
    # the one wording of a broken plugin (perfkit/core/plugins.py), as a broken reader or panel is said
    assert added[missing_dep] == ("importing it raised ModuleNotFoundError: No module named "
                                  "'acme_module_that_is_not_installed'; left out")
    assert added["raises_at_check"] == ("plugin acme_raises = acme_raises from acme_raises-plugin 1.0: rule "
                                        "'raises_at_check' raised ZeroDivisionError: division by zero")
    assert added["returns_text"].endswith("rule 'returns_text' returned str, not a list of Findings")
    assert added[clashes] == ("rule 'tail' is taken; left out; "
                              "rule 'needs_gpu_clock' needs gpu_clock, which are not keys of NEEDS; left out")
    # perfkit's own rules (its tail rule among them) said what they say without the plugins
    assert {rule: reason for rule, reason in reasons.items() if rule not in added} == \
        {entry["rule"]: entry["reason"] for entry in before["not_checked"]}
    text = perfkit_cli("advise", str(RUN), site=site, cache=tmp_path / "c3")
    assert text.returncode == 0 and "Traceback" not in text.stderr
    lines = [line for line in text.stdout.splitlines() if "acme_" in line]
    assert len(lines) == 4 and all(line.startswith("not checked: ") for line in lines)
