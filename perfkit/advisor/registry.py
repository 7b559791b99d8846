"""The advisor's registry: what rules need (NEEDS), the Rule record, the `@rule` decorator that fills RULES,
the measures rule modules share, and the rules that installed packages add.

A rule is a small pure function of a Run returning zero or more Findings, in the module of its concern
(perfkit/advisor/rules/<concern>.py), registered with `@rule("id", needs=(...))`. It declares the data it needs
(keys of NEEDS); `advise` skips it with the stated reason when the run lacks them. A rule raises NotChecked itself
for what only it can tell (e.g. the data mode is unknown). Thresholds sit next to the rule that uses them, relative
to step time, with their source (docs/formats.md §4 lists what MindInsight, MindSpore's analyser, TensorFlow, PyTorch
and msprof-analyze use).

**Rules from other packages.** A package adds rules through an entry point in the group `perfkit.rules` whose
value is a module; importing that module registers its rules with this `@rule` decorator, as perfkit's own rule
modules do (`from perfkit.advisor import Finding, NotChecked, rule`):

    [project.entry-points."perfkit.rules"]          # the plugin's pyproject.toml
    mycompany = "mycompany_perfkit.rules"

Their ids must be new and their needs keys of NEEDS; @rule keeps a package's rules apart from perfkit's own
(RULES) whoever imports its module. perfkit/core/plugins.py loads them as it loads readers and panels: a plugin
that fails to import, registers nothing usable, raises while checking or returns something other than a list of
Findings is one line in `advise`'s not_checked naming it, worded as a broken reader or panel is, never a
traceback; the other rules still run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import pandas as pd

from ..analysis.measures import framework_memory
from ..core import plugins
from ..core.causes import CAUSES
from ..core.model import Run
from ..core.opnames import comm_kind
from .finding import SEVERITIES, Finding, NotChecked

# ---------------------------------------------------------------------------------------------------------
# What rules need, and the reason given when a run lacks it.


def has_steps(run: Run) -> bool:
    """Whether the run has step times (some total known and above zero)."""
    return bool(len(run.steps)) and run.steps["total_ms"].notna().any() and run.steps["total_ms"].sum() > 0


NEEDS: dict[str, tuple[Callable[[Run], bool], str]] = {
    "steps": (has_steps, "no step times"),
    "device": (lambda run: bool(run.meta.device), "device unknown"),
    "sinkable_device": (lambda run: device_name(run) != "CPU",
                        "CPU cannot sink datasets (MindSpore falls back to feed mode)"),
    "fp16_device": (lambda run: device_name(run) != "CPU",
                    "CPU has no fast float16 kernels; mixed precision would not speed it up"),
    "step_split": (lambda run: has_steps(run) and run.steps["interval_ms"].notna().any(),
                   "no step interval (no step times, or they do not split data wait from compute)"),
    "step_tail": (lambda run: has_steps(run) and run.steps["tail_ms"].notna().any(),
                  "no step tail (no step times, or no backward end point in them)"),
    "op_types": (lambda run: bool(len(run.op_types)) and run.op_types["total_ms"].sum() > 0,
                 "no op statistics"),
    "op_shapes": (lambda run: bool(len(run.ops)) and run.ops["input_shapes"].notna().any(),
                  "no op input shapes (framework_raw / cpu_framework / kernel_details shapes)"),
    "queues": (lambda run: bool(len(run.host_queue) or len(run.device_queue)),
               "no data queue samples (device_queue / dataset_iterator / minddata_aicpu profiling)"),
    "cpu_util": (lambda run: bool(len(run.cpu_util)), "no host CPU utilisation (minddata_cpu_utilization)"),
    "comm": (lambda run: has_steps(run) and (
        any(col in run.steps and run.steps[col].notna().any() for col in ("comm_exposed_ms", "comm_ms"))
        or any(comm_kind(str(t)) for t in run.op_types["type"].unique())),
        "no communication times in the step data and no collective ops"),
    "ranks": (lambda run: len(run.ranks) > 1 and (not has_steps(run) or run.steps["rank"].nunique() > 1),
              "single-rank run (or only one rank has step times)"),
    "memory": (lambda run: bool(len(framework_memory(run))) and run.memory["allocated_mb"].notna().any(),
               "no allocator memory records (profile with profile_memory=True: perfkit profile --profile-memory)"),
    "memory_capacity": (lambda run: run.meta.memory_capacity_mb is not None,
                        "device memory capacity unknown (perfkit profile records it)"),
    "comm_ops": (lambda run: bool(len(run.comm_ops)),
                 "no communication op times (communication.json, hccl_raw, or a database's COMMUNICATION_OP / "
                 "CommAnalyzerTime)"),
    "comm_links": (lambda run: bool(len(run.comm_links)),
                   "no communication links (communication_matrix.json, or a database's CommAnalyzerMatrix)"),
}


@dataclass(frozen=True)
class Rule:
    id: str
    needs: tuple[str, ...]
    check: Callable[[Run], list[Finding]]
    plugin: str | None = None  # the installed plugin that added it (plugins.describe); None for perfkit's own
    # the step ledger's causes (perfkit/core/causes.py) its findings claim: the ms the change could win back
    claims: tuple[str, ...] = ()

    def missing(self, run: Run) -> str | None:
        """Why this rule cannot look at `run`, or None when it has what it needs."""
        reasons = [NEEDS[need][1] for need in self.needs if not NEEDS[need][0](run)]
        return "; ".join(reasons) or None


# perfkit's own rules, in the order perfkit/advisor/rules/__init__.py imports their modules
RULES: list[Rule] = []
# The rules other packages' modules registered, by module: a rule plugin's are those of the module its entry point
# names and of the modules below it (installed_rules), whoever imported them first.
_PACKAGE_RULES: dict[str, list[Rule]] = {}


def rule(rule_id: str, needs: tuple[str, ...] = (), claims: tuple[str, ...] = ()):
    """Register the decorated function `check(run) -> list[Finding]` as the rule `rule_id`; its findings claim
    ledger ms of the causes `claims` (up to their est_gain_pct), unless a finding names its own `claim`."""
    unknown = set(claims) - set(CAUSES)
    if unknown:
        raise ValueError(f"rule {rule_id!r} claims unknown causes {sorted(unknown)} (perfkit/core/causes.py)")

    def register(check: Callable[[Run], list[Finding]]):
        made = Rule(rule_id, needs, check, claims=tuple(claims))
        if check.__module__.partition(".")[0] == "perfkit":
            RULES.append(made)
        else:
            _PACKAGE_RULES.setdefault(check.__module__, []).append(made)
        return check
    return register


def needs_met(run: Run, need: str) -> bool:
    """Whether `run` has what the key `need` of NEEDS stands for (the views ask as the rules do)."""
    has, _ = NEEDS[need]
    return bool(has(run))


# ---------------------------------------------------------------------------------------------------------
# Small shared measures.

def device_name(run: Run) -> str:
    """The device, upper case ("CPU", "GPU", "ASCEND"); "" when unknown."""
    return (run.meta.device or "").upper()


def is_torch(run: Run) -> bool:
    """A PyTorch run, torch_npu (`*_ascend_pt`) or a kineto trace (`*.pt.trace.json`): its actions are PyTorch's,
    not MindSpore's."""
    return run.meta.framework in ("torch_npu", "torch")


def torch_device(run: Run) -> str:
    """The device_type a PyTorch action names: "npu" for torch_npu, else "cuda" or "cpu"."""
    if run.meta.framework == "torch_npu":
        return "npu"
    return "cuda" if device_name(run) == "GPU" else "cpu"


def percent(share: float) -> float:
    """A 0-1 share as a percent, to 2 decimals (evidence and gains)."""
    return round(100.0 * share, 2)


def round_ms(value: float) -> float:
    """ms as evidence shows them: to the µs."""
    return round(float(value), 3)


def known_ms(**values: float | None) -> dict[str, float]:
    """Evidence in ms, leaving out what the run does not tell (no NaN in the JSON)."""
    return {key: round_ms(value) for key, value in values.items() if value is not None and not pd.isna(value)}


def run_step_ms(run: Run) -> float | None:
    """Step time over every rank and profiled step: the denominator for time totalled over the run.
    A step whose total is unknown (the first one when its start is not recorded) counts at the mean."""
    if not has_steps(run):
        return None
    per_rank = run.steps.groupby("rank")["total_ms"].agg(["mean", "size"])
    return float((per_rank["mean"] * per_rank["size"]).sum())


def gain_pct(run: Run, saved_ms_over_run: float, fallback_total_ms: float) -> float:
    """Share of step time that `saved_ms_over_run` is, capped at 100; of `fallback_total_ms` when steps are unknown."""
    basis = run_step_ms(run) or fallback_total_ms
    return round(min(100.0, 100.0 * saved_ms_over_run / basis), 2) if basis > 0 else 0.0


# ---------------------------------------------------------------------------------------------------------
# Rules from installed packages (entry point group perfkit.rules).

def _registered(point) -> list[Rule]:
    """Import a rule plugin's module: the rules it, and the modules below it, registered with @rule (when
    imported here, or earlier by other code)."""
    point.load()
    return [found for module, rules in _PACKAGE_RULES.items() if module == point.module
            or module.startswith(point.module + ".") for found in rules]


def _unknown_needs(found: Rule) -> str | None:
    unknown = [need for need in found.needs if need not in NEEDS]
    return f"rule {found.id!r} needs {', '.join(unknown)}, which are not keys of NEEDS" if unknown else None


def installed_rules() -> tuple[tuple[Rule, ...], dict[str, str]]:
    """(the usable rules of the rule plugins installed now, each imported once per process; why a plugin, or
    some of its rules, cannot run: one `advise` not_checked line per plugin, keyed `plugin <name>`)."""
    loaded = plugins.load(plugins.RULES, Rule, "rule", key=lambda found: found.id, taken=(r.id for r in RULES),
                          refuse=_unknown_needs, give=_registered,
                          how="is a module whose import registers rules with @perfkit.advisor.rule")
    problems: dict[str, list[str]] = {}
    for problem in loaded.problems:
        problems.setdefault(f"plugin {problem.plugin}", []).append(problem.reason)
    return (tuple(replace(found, plugin=plugin) for found, plugin in loaded.items),
            {plugin: "; ".join(reasons) for plugin, reasons in problems.items()})


class PluginFailed(Exception):
    """A plugin's rule raised or returned something unusable: the reason advise gives in not_checked."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def checked_by_plugin(plugin_rule: Rule, run: Run) -> list[Finding]:
    """`plugin_rule.check(run)`, with what it returned verified; raises PluginFailed with the reason instead of
    whatever the plugin raised (NotChecked passes through, as from perfkit's own rules)."""
    try:
        found = plugin_rule.check(run)
    except NotChecked:
        raise
    except Exception as error:  # noqa: BLE001 - someone else's bug is reported, not raised
        raise PluginFailed(plugins.failure(plugin_rule.plugin, f"rule {plugin_rule.id!r}", error)) from None
    bad = _not_findings(found, plugin_rule.id)
    if bad:
        raise PluginFailed(plugins.refusal(plugin_rule.plugin, f"rule {plugin_rule.id!r} returned {bad}"))
    return found


def _not_findings(found, rule_id: str) -> str | None:
    """What is wrong with a plugin rule's result (a list of Findings with this rule's id, a known severity and
    finite numbers, which the JSON output and the ranking need), or None."""
    if not isinstance(found, list):
        return f"{type(found).__name__}, not a list of Findings"
    for finding in found:
        if not isinstance(finding, Finding):
            return f"a {type(finding).__name__} among its findings"
        if finding.id != rule_id:
            return f"a finding with id '{finding.id}', not its rule's id '{rule_id}'"
        if finding.severity not in SEVERITIES:
            return f"severity '{finding.severity}' (one of {', '.join(SEVERITIES)})"
        evidence = finding.evidence.values() if isinstance(finding.evidence, dict) else [None]
        if not all(_finite(value) for value in evidence) or not (finding.est_gain_pct is None
                                                                 or _finite(finding.est_gain_pct)):
            return "evidence or est_gain_pct that is not a finite number"
    return None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
