"""`perfkit tune`: try the settings the advisor proposes, measure each against the baseline, keep what helped.

The loop (tune()) knows nothing of MindSpore or processes: a Runner trains one setting into one run folder
(perfkit/apps/tune_runners.py runs `perfkit profile`; the tests give a fake). It

1. runs the baseline once and proposes candidates from its findings' changes, `--try` changes and a few standard
   ones (propose());
2. runs baseline and candidates in rounds, A B1 B2 … then A B1 B2 … again (`repeats` rounds), so a machine that
   slows down over time slows every setting alike;
3. judges each candidate against every baseline run with analysis.statistics.verdict (run means, Welch t);
4. tries the faster candidates together (one per setting), in rounds with the baseline again, and names the best.

Every run is recorded in the tune folder's ledger (tune.json) as it finishes, so a rerun with the same folder goes
on where it stopped, and Ctrl-C keeps every finished run. A candidate whose run fails or whose loss turns NaN
"broke the run" and is dropped; one the script never reached (amp_level without Model) is "not applicable".
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..advisor.change import MEASUREMENT_KNOBS, Change
from ..core.errors import PerfkitError
from ..core.units import BYTES_PER_MB

LEDGER = "tune.json"
LEDGER_VERSION = 1
BASELINE = "baseline"
COMBINED = "combined"
# Below this half-width of the speedup's 95 % interval a "no significant change" is a measured no change; above it,
# the runs were too noisy to tell (a change worth editing a script for, ~10 %, could hide inside the interval).
DECIDABLE_PCT = 10.0
OUTPUT_TAIL_LINES = 20
CANNOT_TELL = "cannot tell"
# a batch size change judged where the runs do not tell their batch: step times of different batches do not compare
BATCH_UNKNOWN = "cannot tell: batch size unknown"
BROKE = "broke the run"
NOT_APPLICABLE = "not applicable"


@dataclass
class RunResult:
    """What a Runner returns: the run folder, or why there is none usable."""

    folder: Path | None
    ok: bool
    error: str | None = None         # why the run broke: its error, a NaN loss
    tail: str = ""                   # the last lines of its output, for a run that broke
    not_applied: list[str] = field(default_factory=list)  # changes the script never reached, with why
    notes: list[str] = field(default_factory=list)


class Stopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM while a run was in progress: that run was stopped, the finished ones are kept."""

    def __init__(self, signal_name: str = "SIGINT"):
        super().__init__(signal_name)
        self.signal_name = signal_name


class DeadlineReached(Exception):
    """The run in progress was still going at the --max-minutes deadline: it was killed, with every process it
    started, and is not recorded (a rerun makes it again)."""


class Runner(Protocol):
    def describe(self) -> dict[str, Any]:
        """The baseline, as JSON: a rerun of a tune folder must be given the same one."""

    def run(self, changes: tuple[Change, ...], out_dir: Path, limit_s: float | None = None) -> RunResult:
        """Train the baseline with `changes` applied into the run folder `out_dir` (which does not exist yet);
        raise DeadlineReached past `limit_s` seconds, Stopped on Ctrl-C or SIGTERM."""


@dataclass(frozen=True)
class Candidate:
    changes: tuple[Change, ...]
    source: str                       # "finding <id>", "--try", "standard: <why>", "the faster ones together"

    @property
    def label(self) -> str:
        return " + ".join(change.label for change in self.changes)


@dataclass
class Budget:
    max_experiments: int = 6
    max_minutes: float = 60.0
    repeats: int = 3


# ---------------------------------------------------------------------------------------------------------
# The ledger

class Ledger:
    """tune.json: the baseline, the candidates, and each finished run (written atomically after each)."""

    def __init__(self, folder: Path, data: dict[str, Any]):
        self.folder = folder
        self.data = data

    @classmethod
    def open(cls, folder: Path, baseline: dict[str, Any], repeats: int, fresh: bool = False) -> Ledger:
        """The folder's ledger, or a new one. A ledger that is damaged, of another perfkit, or of another
        baseline is refused in one line naming it, unless `fresh` (start over) or it holds no usable run (a
        tune whose baseline never ran, e.g. of a mistyped script, blocks nothing)."""
        path = folder / LEDGER
        if path.is_file() and not fresh:
            data = read_ledger(path)
            if data["baseline"] != baseline and any(run["ok"] for run in data["runs"]):
                raise PerfkitError(f"holds a tune of another baseline ({_baseline_words(data['baseline'])}); "
                                   "give another --output, --fresh to start over, or the same command and options "
                                   "to go on", path)
            if data["baseline"] == baseline:
                data["repeats"] = max(data["repeats"], repeats)
                return cls(folder, data)
        elif not path.is_file() and folder.exists() and any(folder.iterdir()):
            raise PerfkitError(f"exists and is not a tune folder (no {LEDGER}): give a new --output", folder)
        folder.mkdir(parents=True, exist_ok=True)
        ledger = cls(folder, {"version": LEDGER_VERSION, "baseline": baseline, "repeats": repeats,
                              "candidates": None, "skipped": [], "runs": []})
        ledger.save()
        return ledger

    def save(self) -> None:
        staging = self.folder / f".{LEDGER}.{os.getpid()}.tmp"
        staging.write_text(json.dumps(self.data, indent=2) + "\n")
        os.replace(staging, self.folder / LEDGER)

    @property
    def candidates(self) -> list[Candidate] | None:
        if self.data["candidates"] is None:
            return None
        return [Candidate(tuple(Change.from_dict(c) for c in entry["changes"]), entry["source"])
                for entry in self.data["candidates"]]

    def set_candidates(self, candidates: list[Candidate], skipped: list[str]) -> None:
        self.data["candidates"] = [{"changes": [c.to_dict() for c in candidate.changes], "source": candidate.source}
                                   for candidate in candidates]
        self.data["skipped"] = skipped
        self.save()

    def add_candidate(self, candidate: Candidate) -> None:
        self.data["candidates"].append({"changes": [c.to_dict() for c in candidate.changes],
                                        "source": candidate.source})
        self.save()

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        return [run for run in self.data["runs"] if run["experiment"] == experiment]

    def record(self, experiment: str, repeat: int, result: RunResult, seconds: float) -> None:
        folder = None if result.folder is None else Path(os.path.relpath(result.folder, self.folder)).as_posix()
        self.data["runs"].append({"experiment": experiment, "repeat": repeat, "folder": folder, "ok": result.ok,
                                  "error": result.error, "tail": result.tail, "not_applied": result.not_applied,
                                  "notes": result.notes, "seconds": round(seconds, 3)})
        self.save()

    def seconds_per_run(self) -> float | None:
        seconds = [run["seconds"] for run in self.data["runs"]]
        return float(np.mean(seconds)) if seconds else None


def _baseline_words(baseline: dict[str, Any]) -> str:
    if baseline.get("kind") == "script":
        return "the command " + " ".join(baseline["command"])
    return "perfkit profile " + " ".join(baseline.get("args", []))


# A ledger past this is no ledger tune wrote (each run adds ~2 KB: its last lines of output).
LEDGER_MAX_BYTES = 64 * BYTES_PER_MB
# No tune makes more runs of one setting than this (and a hand-edited 10**25 must not become a loop's bound).
MAX_REPEATS = 1000


def read_ledger(path: Path) -> dict[str, Any]:
    """tune.json read through the bounded decoder and checked field by field against what Ledger writes; any
    other content (truncated, edited, another program's) is a PerfkitError naming the file and the field."""
    from ..core import boundedjson

    try:
        if path.stat().st_size > LEDGER_MAX_BYTES:
            raise PerfkitError(f"is not a tune ledger (over {LEDGER_MAX_BYTES // BYTES_PER_MB} MB); give another "
                               "--output or --fresh to start over", path)
        data = boundedjson.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, boundedjson.JSONError) as exc:
        raise PerfkitError(f"is not a tune ledger ({getattr(exc, 'message', None) or exc}); give another --output "
                           "or --fresh to start over", path) from None
    if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
        raise PerfkitError(f"not a tune ledger of this perfkit (version {LEDGER_VERSION}); give another --output "
                           "or --fresh to start over", path)
    problem = _ledger_problem(data)
    if problem:
        raise PerfkitError(f"is a damaged tune ledger ({problem}); give another --output or --fresh to start over",
                           path)
    return data


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _ledger_problem(data: dict[str, Any]) -> str | None:
    """What in a decoded tune.json is not as Ledger writes it (None: nothing)."""
    baseline = data.get("baseline")
    if not (isinstance(baseline, dict) and isinstance(baseline.get("kind"), str)
            and _is_strings(baseline.get("args", [])) and _is_strings(baseline.get("command", []))):
        return "baseline"
    if not _is_int(data.get("repeats"), 1, MAX_REPEATS):
        return f"repeats is not a whole number from 1 to {MAX_REPEATS}"
    if not _is_strings(data.get("skipped")):
        return "skipped"
    candidates = data.get("candidates")
    if candidates is not None:
        if not isinstance(candidates, list):
            return "candidates"
        for index, entry in enumerate(candidates):
            if not (isinstance(entry, dict) and isinstance(entry.get("source"), str)
                    and isinstance(entry.get("changes"), list) and entry["changes"]):
                return f"candidate {index + 1}"
            for change in entry["changes"]:
                try:
                    if not isinstance(change, dict) or not isinstance(change.get("value"), (str, int, float)):
                        raise ValueError("no value")
                    Change.from_dict(change)
                except (KeyError, TypeError, ValueError):
                    return f"candidate {index + 1}'s change"
    runs = data.get("runs")
    if not isinstance(runs, list):
        return "runs"
    for index, run in enumerate(runs):
        problem = _run_problem(run)
        if problem:
            return f"run {index + 1}: {problem}"
    return None


def _run_problem(run: Any) -> str | None:
    if not isinstance(run, dict):
        return "not an object"
    if not isinstance(run.get("experiment"), str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", run["experiment"]):
        return "experiment"
    if not _is_int(run.get("repeat"), 1, 2 * MAX_REPEATS):
        return "repeat"
    folder = run.get("folder")
    # a run folder is the experiment's repeat_N inside the tune folder, never a path out of it
    if folder is not None and folder != f"{run['experiment']}/repeat_{run['repeat']}":
        return "folder"
    if not isinstance(run.get("ok"), bool) or (run["ok"] and folder is None):
        return "ok"
    if not (run.get("error") is None or isinstance(run["error"], str)) or not isinstance(run.get("tail"), str):
        return "error"
    if not (_is_strings(run.get("not_applied")) and _is_strings(run.get("notes"))):
        return "notes"
    seconds = run.get("seconds")
    if not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 <= seconds < 1e9):
        return "seconds"
    return None


def experiment_name(index: int, candidate: Candidate) -> str:
    """The experiment's folder: exp_01_ONEDNN_MAX_CPU_ISA-AVX2 (its repeats inside: repeat_1, repeat_2, …)."""
    if candidate.source == COMBINED_SOURCE:
        return COMBINED
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", candidate.label.replace("=", "-")).strip("-")[:40]
    return f"exp_{index:02d}_{slug}"


COMBINED_SOURCE = "the faster ones together"


# ---------------------------------------------------------------------------------------------------------
# Candidates

def cpu_flags() -> set[str]:
    """This machine's CPU flags (/proc/cpuinfo; empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    match = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def current_value(run, change: Change) -> Any:
    """What the baseline run already has for the change's setting (None: unknown)."""
    meta = run.meta
    return {"env": meta.env.get(change.name) if change.name else None, "amp_level": meta.amp_level,
            "mode": meta.mode, "sink_mode": None if meta.data_mode is None else meta.data_mode == "sink",
            "batch_size": meta.config.get("batch_size")}.get(change.knob)


def standard_candidates(run) -> list[Candidate]:
    """What tune tries even when no finding proposes it, each only where it can matter on this machine:
    - ONEDNN_MAX_CPU_ISA=AVX2 on a CPU run where this host has AVX-512 (oneDNN then may pick its reference 3x3
      convolutions, far slower: the cap makes it use the AVX2 ones);
    - graph mode for a PyNative run;
    - as many dataset workers as CPUs for map and batch (the input pipeline's usual fix).
    Lower precision is not among them: on a CPU it is slower (no fast float16 kernels), elsewhere the amp_level
    finding proposes it where Cast/BatchNorm time says it would help. `--try` adds any other."""
    device = (run.meta.device or "").upper()
    found = []
    if device == "CPU" and any(flag.startswith("avx512") for flag in cpu_flags()):
        found.append(Candidate((Change("env", "AVX2", name="ONEDNN_MAX_CPU_ISA"),),
                               "standard: this CPU has AVX-512, where oneDNN may pick reference convolutions"))
    if run.meta.mode == "pynative":
        found.append(Candidate((Change("mode", "graph"),), "standard: PyNative runs op by op"))
    cpus = os.cpu_count() or 1
    if cpus > 1:
        found.append(Candidate((Change("dataset_workers", cpus, op="all"),),
                               f"standard: one dataset worker per CPU ({cpus})"))
    return found


def propose(run, tries: Sequence[Change] = (), standard: bool = True) -> tuple[list[Candidate], list[str]]:
    """The candidates for the baseline `run`, in the order tried: `--try` changes, the findings' changes (most
    important finding first), the standard ones; and what was left out, with why. One candidate per setting and
    value; none that the baseline has already."""
    from ..advisor import advise

    proposed = [Candidate((change,), "--try") for change in tries]
    proposed += [Candidate((finding.change,), f"finding {finding.id}") for finding in advise(run).findings
                 if finding.change is not None]
    if standard:
        proposed += standard_candidates(run)
    chosen: list[Candidate] = []
    skipped: list[str] = []
    seen: set[tuple[str, str]] = set()
    for candidate in proposed:
        change = candidate.changes[0]
        identity = (change.key, json.dumps(change.value))
        if identity in seen:
            continue
        seen.add(identity)
        if change.knob in MEASUREMENT_KNOBS:
            skipped.append(f"{change.label} ({candidate.source}): changes what is measured, not the training")
        elif current_value(run, change) == change.value:
            skipped.append(f"{change.label} ({candidate.source}): the baseline has it already")
        else:
            chosen.append(candidate)
    return chosen, skipped


# ---------------------------------------------------------------------------------------------------------
# Judging

@dataclass
class Side:
    """One setting's runs: mean step ms over their run means with a 95 % interval, samples/s."""
    runs: int
    step_ms: float
    step_ms_interval: tuple[float, float] | None
    samples_per_s: float | None

    def to_dict(self) -> dict[str, Any]:
        rate_interval = None
        if self.samples_per_s is not None and self.step_ms_interval is not None and self.step_ms_interval[0] > 0:
            # samples/s is batch / step: its interval is the step interval's, inverted
            rate_interval = [round(self.samples_per_s * self.step_ms / bound, 3)
                             for bound in reversed(self.step_ms_interval)]
        return {"runs": self.runs, "step_ms": round(self.step_ms, 3),
                "step_ms_interval": None if self.step_ms_interval is None else [round(v, 3) for v in
                                                                                 self.step_ms_interval],
                "samples_per_s": None if self.samples_per_s is None else round(self.samples_per_s, 3),
                "samples_per_s_interval": rate_interval}


def side(runs: list) -> Side:
    from ..analysis.statistics import global_batch, run_mean_ms, t_quantile
    from ..core.units import MS_PER_S

    means = np.array([run_mean_ms(run, per_sample=False) for run in runs], dtype=np.float64)
    mean = float(np.mean(means))
    interval = None
    if len(means) >= 2:
        half = t_quantile(len(means) - 1) * float(np.std(means, ddof=1)) / math.sqrt(len(means))
        interval = (mean - half, mean + half)
    batch = global_batch(runs[0])
    return Side(len(runs), mean, interval, None if batch is None else batch * MS_PER_S / mean)


def verdict_words(verdict) -> tuple[str, float]:
    """faster / slower / no change / "cannot tell", and the noise: the interval's half-width in %."""
    from ..analysis.statistics import NO_CHANGE

    low, high = verdict.interval
    noise_pct = 100.0 * math.expm1(math.log(high / low) / 2) if low > 0 else math.inf
    if verdict.kind != NO_CHANGE:
        return verdict.kind, noise_pct
    return ("no change" if noise_pct <= DECIDABLE_PCT else CANNOT_TELL), noise_pct


def finding_keys(run) -> set[tuple[str, str | None]]:
    """The run's findings by rule and target; informational ones (where things stand: data_pipeline_ok,
    compute_bound naming the top op type) are never resolved or new, as in compare."""
    from ..advisor import advise
    from ..advisor.finding import INFORMATIONAL

    return {(finding.id, finding.target) for finding in advise(run).findings if finding.id not in INFORMATIONAL}


# ---------------------------------------------------------------------------------------------------------
# The loop

@dataclass
class Tune:
    """Everything a tune session found (tune.json plus the verdicts); `experiments` ranked, faster first."""
    folder: Path
    baseline: dict[str, Any]
    experiments: list[dict[str, Any]]
    best: dict[str, Any] | None
    skipped: list[str]
    stopped: str | None = None        # why the loop stopped early (budget, Ctrl-C), None when it ran through
    interrupted: bool = False
    exit_code: int = 0                # 130 after Ctrl-C, 143 after SIGTERM, as a shell reports them


class Tuner:
    def __init__(self, runner: Runner, folder: Path, budget: Budget, say: Callable[[str], None],
                 candidates: Callable[[Any], tuple[list[Candidate], list[str]]], noise_floor_pct: float | None = None,
                 load: Callable[[str], Any] | None = None, clock: Callable[[], float] = time.monotonic,
                 fresh: bool = False):
        from ..io.loader import load as perfkit_load

        self.runner = runner
        self.folder = Path(folder)
        self.budget = budget
        self.say = say
        self.propose = candidates
        self.noise_floor_pct = noise_floor_pct
        self.load = load or perfkit_load
        self.clock = clock
        self.fresh = fresh
        self.started = clock()
        self.loaded: dict[str, Any] = {}
        self.ledger: Ledger | None = None
        self.planned = 0   # runs this session means to make (for the progress line)
        self.made = 0

    # -- runs ---------------------------------------------------------------------------------------------
    def seconds_left(self) -> float:
        return self.budget.max_minutes * 60 - (self.clock() - self.started)

    def run_loaded(self, entry: dict[str, Any]):
        folder = str(self.folder / entry["folder"])
        if folder not in self.loaded:
            self.loaded[folder] = self.load(folder)
        return self.loaded[folder]

    def ok_runs(self, experiment: str) -> list:
        return [self.run_loaded(entry) for entry in self.ledger.runs(experiment) if entry["ok"]]

    def fits(self) -> bool:
        """Whether one more run fits in the time left (at the mean time of the runs so far)."""
        estimate = self.ledger.seconds_per_run()
        return estimate is None or estimate <= self.seconds_left()

    def run(self, experiment: str, repeat: int, changes: tuple[Change, ...]) -> dict[str, Any]:
        done = [entry for entry in self.ledger.runs(experiment) if entry["repeat"] == repeat]
        if done:
            return done[0]
        out_dir = self.folder / experiment / f"repeat_{repeat}"
        if out_dir.exists():  # a run cut short before it was recorded (Ctrl-C, a kill): made again
            shutil.rmtree(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.made += 1
        left = self.seconds_left()
        self.say(f"perfkit tune: [{self.made}/{max(self.planned, self.made)}] {experiment} repeat {repeat} "
                 f"({', '.join(c.label for c in changes) or 'as given'}); {left / 60:.1f} min of "
                 f"{self.budget.max_minutes:g} left")
        began = self.clock()
        result = self.runner.run(changes, out_dir, limit_s=max(left, 0.0))
        if result.ok and result.folder is not None:
            result = self.with_step_times(result)
        self.ledger.record(experiment, repeat, result, self.clock() - began)
        return self.ledger.runs(experiment)[-1]

    def with_step_times(self, result: RunResult) -> RunResult:
        """`result`, or, where its run has no step times to judge by, the same run marked failed saying so."""
        from ..analysis.statistics import run_mean_ms

        folder = str(result.folder)
        try:
            self.loaded[folder] = self.load(folder)
            mean = run_mean_ms(self.loaded[folder], per_sample=False)
        except PerfkitError as exc:
            return RunResult(result.folder, False, error=f"its run folder cannot be read: {exc}", notes=result.notes)
        if mean is None:
            return RunResult(result.folder, False, error="the run has no step times to judge it by "
                             "(perfkit summary on its folder says why)", notes=result.notes)
        return result

    def baseline_failed(self, entry: dict[str, Any]) -> PerfkitError:
        if entry["tail"]:
            self.say(entry["tail"])
        where = "its output is above" if entry["tail"] else "its output is in the .log beside its folder"
        return PerfkitError(f"the baseline failed ({entry['error']}): nothing to tune against; {where}",
                            self.folder / BASELINE)

    # -- the session --------------------------------------------------------------------------------------
    def tune(self) -> Tune:
        self.ledger = Ledger.open(self.folder, self.runner.describe(), self.budget.repeats, self.fresh)
        stopped, signal_name = None, None
        try:
            stopped = self.explore()
        except DeadlineReached:
            stopped = self.out_of_time()
        except KeyboardInterrupt as exc:
            signal_name = getattr(exc, "signal_name", "SIGINT")
            stopped = (f"interrupted ({'Ctrl-C' if signal_name == 'SIGINT' else signal_name}): the finished runs "
                       "are kept; run again to go on")
        result = self.result(stopped, signal_name is not None)
        if signal_name is not None:
            result.exit_code = 128 + getattr(signal, signal_name)
        return result

    def explore(self) -> str | None:
        ledger = self.ledger
        estimate = ledger.seconds_per_run()
        if estimate is not None and estimate > self.seconds_left():
            raise self.too_small(estimate)
        try:
            first = self.run(BASELINE, 1, ())
        except DeadlineReached:
            raise PerfkitError(f"--max-minutes {self.budget.max_minutes:g} ended before the baseline's first run did "
                               "(it was stopped): nothing to tune against; give more minutes") from None
        if not first["ok"]:
            raise self.baseline_failed(first)
        if ledger.candidates is None:
            candidates, skipped = self.propose(self.run_loaded(first))
            kept = candidates[:self.budget.max_experiments]
            skipped += [f"{c.label} ({c.source}): over --max-experiments {self.budget.max_experiments}"
                        for c in candidates[self.budget.max_experiments:]]
            ledger.set_candidates(kept, skipped)
            for line in skipped:
                self.say(f"perfkit tune: not tried: {line}")
        estimate = ledger.seconds_per_run()
        if not ledger.candidates:
            return "nothing to try: no finding proposes a setting and no standard change applies here"
        if estimate > self.seconds_left() and not any(ledger.runs(name) for name in self.names()):
            raise self.too_small(estimate)
        repeats = ledger.data["repeats"]
        singles = [(name, candidate) for name, candidate in zip(self.names(), ledger.candidates)
                   if candidate.source != COMBINED_SOURCE]
        settings = [(BASELINE, ()), *((name, candidate.changes) for name, candidate in singles)]
        done = sum(1 for name, _ in settings for entry in ledger.runs(name) if entry["repeat"] <= repeats)
        self.planned = self.made + max(repeats * len(settings) - done, 0)
        stopped = self.schedule((name, repeat, changes) for repeat in range(1, repeats + 1)
                                for name, changes in settings)
        if stopped:
            return stopped
        combined = self.combination()
        if combined is None:
            return None
        if len(singles) >= self.budget.max_experiments:
            return f"the faster changes were not tried together: --max-experiments {self.budget.max_experiments} used"
        recorded = [c for c in ledger.candidates if c.source == COMBINED_SOURCE]
        if recorded:
            combined = recorded[0]  # a resumed session goes on with the combination it started
        else:
            ledger.add_candidate(combined)
        # fresh baseline runs interleaved with the combination's (A C A C): the baseline's repeats go on counting
        self.planned += 2 * repeats
        return self.schedule(run for repeat in range(1, repeats + 1)
                             for run in ((BASELINE, repeats + repeat, ()), (COMBINED, repeat, combined.changes)))

    def names(self) -> list[str]:
        return [experiment_name(index, c) for index, c in enumerate(self.ledger.candidates or [], start=1)]

    def dropped(self, entry: dict[str, Any]) -> bool:
        return not entry["ok"] or bool(entry["not_applied"])

    def schedule(self, runs: Iterable[tuple[str, int, tuple[Change, ...]]]) -> str | None:
        """Make the (experiment, repeat, changes) runs in order, but those done already and those of an experiment
        that broke or could not be applied; stop when the next one does not fit in the time left."""
        for name, repeat, changes in runs:
            previous = self.ledger.runs(name)
            if name != BASELINE and any(self.dropped(entry) for entry in previous):
                continue
            if any(entry["repeat"] == repeat for entry in previous):
                continue
            if not self.fits():
                return self.out_of_time()
            entry = self.run(name, repeat, changes)
            if name == BASELINE and not entry["ok"]:
                raise self.baseline_failed(entry)
        return None

    def out_of_time(self) -> str:
        return (f"--max-minutes {self.budget.max_minutes:g} reached: the runs so far are judged; run again with the "
                "same --output to go on")

    def too_small(self, estimate: float) -> PerfkitError:
        return PerfkitError(f"--max-minutes {self.budget.max_minutes:g} leaves {max(self.seconds_left(), 0):.0f} s, "
                            f"less than one run ({estimate:.0f} s each so far): nothing can be tried")

    def combination(self) -> Candidate | None:
        """The changes judged faster, one per setting (the fastest), together; None unless two or more."""
        best_of_key: dict[str, tuple[float, Change]] = {}
        for name, candidate in zip(self.names(), self.ledger.candidates):
            if candidate.source == COMBINED_SOURCE:
                continue
            judged = self.judge(name)
            if judged is None or judged[0].kind != "faster":
                continue
            for change in candidate.changes:
                if change.key not in best_of_key or judged[0].speedup > best_of_key[change.key][0]:
                    best_of_key[change.key] = (judged[0].speedup, change)
        if len(best_of_key) < 2:
            return None
        return Candidate(tuple(change for _, change in best_of_key.values()), COMBINED_SOURCE)

    def judge(self, name: str):
        """(verdict, baseline side, experiment side) of an experiment over its usable runs; None without any."""
        from ..analysis.statistics import verdict

        runs = self.ledger.runs(name)
        if not runs or any(self.dropped(entry) for entry in runs):
            return None
        base, mine = self.ok_runs(BASELINE), self.ok_runs(name)
        return verdict(base, mine, noise_floor_pct=self.noise_floor_pct), side(base), side(mine)

    # -- the result ---------------------------------------------------------------------------------------
    def result(self, stopped: str | None, interrupted: bool) -> Tune:
        ledger = self.ledger
        candidates = ledger.candidates or []
        base_runs = self.ok_runs(BASELINE)
        base_findings = finding_keys(base_runs[0]) if base_runs else set()
        experiments = []
        for name, candidate in zip(self.names(), candidates):
            entries = ledger.runs(name)
            row: dict[str, Any] = {"name": name, "change": [c.to_dict() for c in candidate.changes],
                                   "label": candidate.label, "source": candidate.source,
                                   "runs": [entry["folder"] for entry in entries if entry["folder"]],
                                   "before": None, "after": None, "speedup": None, "interval": None,
                                   "verdict": "not run", "noise_pct": None, "resolved": [], "new": [],
                                   "error": None, "output_tail": None, "notes": sorted({n for e in entries
                                                                                        for n in e["notes"]})}
            broke = next((entry for entry in entries if not entry["ok"]), None)
            unapplied = next((entry for entry in entries if entry["not_applied"]), None)
            if broke is not None:
                row.update(verdict=BROKE, error=broke["error"], output_tail=broke["tail"])
            elif unapplied is not None:
                row.update(verdict=NOT_APPLICABLE, error="; ".join(unapplied["not_applied"]))
            elif entries and base_runs:
                found, before, after = self.judge(name)
                words, noise = verdict_words(found)
                if any(change.knob == "batch_size" for change in candidate.changes) and not found.per_sample:
                    words = BATCH_UNKNOWN
                mine = finding_keys(self.ok_runs(name)[0])
                row.update(before=before.to_dict(), after=after.to_dict(), speedup=round(found.speedup, 4),
                           interval=[round(v, 4) for v in found.interval], verdict=words,
                           noise_pct=round(noise, 1), per_sample=found.per_sample,
                           resolved=[_finding_label(key) for key in sorted(base_findings - mine, key=str)],
                           new=[_finding_label(key) for key in sorted(mine - base_findings, key=str)])
            experiments.append(row)
        faster = [row for row in experiments if row["verdict"] == "faster"]
        best = max(faster, key=lambda row: row["speedup"]) if faster else None
        experiments.sort(key=_rank)
        return Tune(self.folder, ledger.data["baseline"], experiments, best, ledger.data["skipped"], stopped,
                    interrupted)


def _finding_label(key: tuple[str, str | None]) -> str:
    finding, target = key
    return finding if target is None else f"{finding} [{target}]"


VERDICT_ORDER = ("faster", "no change", CANNOT_TELL, BATCH_UNKNOWN, "slower", BROKE, NOT_APPLICABLE, "not run")


def _rank(row: dict[str, Any]) -> tuple:
    """Faster first (largest speedup first), then no change, cannot tell, slower, broke, not applicable."""
    return VERDICT_ORDER.index(row["verdict"]), -(row["speedup"] or 0.0)


# ---------------------------------------------------------------------------------------------------------
# Output

def _side_words(data: dict[str, Any] | None) -> tuple[str, str]:
    """(step ms with its interval, samples/s) of one side."""
    if data is None:
        return "", ""
    interval = data["step_ms_interval"]
    step = f"{data['step_ms']:,.1f}" + ("" if interval is None else f" ±{(interval[1] - interval[0]) / 2:,.1f}")
    rate = "" if data["samples_per_s"] is None else f"{data['samples_per_s']:,.1f}"
    return f"{step} ms (n={data['runs']})", rate


def _verdict_cell(row: dict[str, Any]) -> str:
    if row["verdict"] == CANNOT_TELL:
        return f"cannot tell; noise ±{row['noise_pct']:.0f} %"
    if row["speedup"] is None:
        return row["verdict"]
    low, high = row["interval"]
    return f"{row['verdict']} {row['speedup']:.2f}x [{low:.2f}-{high:.2f}]"


def tune_text(result: Tune, patch) -> str:
    """The ranked table, what broke and why, the best settings and the patch."""
    header = ("change", "step before", "step after", "samples/s before -> after", "verdict (speedup, 95 %)",
              "findings resolved / new")
    rows = []
    for row in result.experiments:
        before, rate_before = _side_words(row["before"])
        after, rate_after = _side_words(row["after"])
        findings = (", ".join(row["resolved"]) or "-") + " / " + (", ".join(row["new"]) or "-")
        rows.append((row["label"], before, after, f"{rate_before} -> {rate_after}" if rate_before else "",
                     _verdict_cell(row), findings if row["before"] else ""))
    widths = [max(len(str(cells[i])) for cells in [header, *rows]) for i in range(len(header))]
    lines = [f"tune   {result.folder}   baseline: {_baseline_words(result.baseline)}", ""]
    lines += ["  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)).rstrip()
              for cells in [header, *rows]]
    for row in result.experiments:
        if row["verdict"] in (BROKE, NOT_APPLICABLE):
            lines += ["", f"{row['label']}: {row['verdict']}: {row['error']}"]
            if row["output_tail"]:
                lines += ["  " + line for line in row["output_tail"].splitlines()]
        for note in row["notes"]:
            lines.append(f"{row['label']}: note: {note}")
    if result.skipped:
        lines += ["", "not tried:"] + [f"  {line}" for line in result.skipped]
    lines.append("")
    if result.best is None:
        lines.append("best: the baseline (no change was judged faster)")
    else:
        lines.append(f"best: {result.best['label']}  ({result.best['speedup']:.2f}x, "
                     f"{result.best['interval'][0]:.2f}-{result.best['interval'][1]:.2f}x at 95 %)")
    if patch is not None:
        if patch.command:
            lines.append(f"  {patch.command}")
        if patch.diff:
            lines += ["", patch.diff.rstrip("\n")]
        for line in patch.add:
            lines.append(f"  add: {line}")
    if result.stopped:
        lines += ["", f"stopped: {result.stopped}"]
    lines += ["", f"every run: perfkit dash {result.folder}/*/repeat_*   "
                  f"(compare one: perfkit compare {result.folder}/{BASELINE} {result.folder}/<experiment>)"]
    return "\n".join(lines)


def tune_dict(result: Tune, patch) -> dict[str, Any]:
    """The `perfkit tune --format json` contract."""
    keys = ("name", "change", "source", "runs", "before", "after", "speedup", "interval", "verdict", "noise_pct",
            "resolved", "new", "error", "output_tail", "notes")
    return {"tune": str(result.folder), "baseline": result.baseline,
            "experiments": [{key: row.get(key) for key in keys} for row in result.experiments],
            "best": None if result.best is None else {key: result.best.get(key) for key in keys},
            "patch": None if patch is None else patch.to_dict(), "skipped": result.skipped,
            "stopped": result.stopped}
