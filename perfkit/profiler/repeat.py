"""`perfkit profile --repeat N`: N runs of the same settings, one after another, in OUTPUT/repeat_1..N.

Each repeat is a complete run folder with its own manifest, made by the same runner as a single run (the
built-in ResNet-50's or the user's script's), so `perfkit compare OUTPUT OTHER` judges the folder over its run
means (perfkit/io/repeats.py). Repeats run one after another, never side by side: two runs sharing
the cores would each measure the other's load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..core.errors import PerfkitError
from ..io.repeats import repeat_folder
from .launch import ProfileOutcome
from .runfolder import claim, write_error


def profile_repeats(profile_one: Callable[[str], ProfileOutcome], output: str,
                    times: int) -> tuple[Path, list[ProfileOutcome]]:
    """Claim OUTPUT (the next free name, as a single run does) and run `profile_one(OUTPUT/repeat_i)` for
    i = 1..times, one after another. Stops after a repeat that did not end "ok": an interrupted series was
    meant to stop, and settings that failed once fail again."""
    try:
        folder = claim(output)
    except OSError as exc:
        raise PerfkitError(f"cannot create the run folder: {write_error(exc)}", output) from exc
    outcomes: list[ProfileOutcome] = []
    for index in range(1, times + 1):
        try:
            outcomes.append(profile_one(str(repeat_folder(folder, index))))
        except BaseException:
            if not outcomes and not any(folder.iterdir()):
                folder.rmdir()  # refused before anything ran (bad input, no device): leave nothing behind
            raise
        if outcomes[-1].status != "ok":
            break
    return folder, outcomes


def repeats_report(folder: Path, outcomes: list[ProfileOutcome], times: int) -> str:
    """Each repeat's folder, status and mean steady step, the run-to-run spread of those means (what a single
    run a side must beat: `perfkit compare --noise-floor`) and how to compare the series."""
    from ..analysis.statistics import run_mean_ms
    from ..io.loader import load

    lines, means = [], []
    for index, outcome in enumerate(outcomes, start=1):
        try:
            mean = run_mean_ms(load(outcome.folder), per_sample=False)
        except PerfkitError:
            mean = None
        if mean is not None:
            means.append(mean)
        lines.append(f"repeat {index} of {times}: {outcome.folder}  {outcome.status}, mean step "
                     + ("unknown" if mean is None else f"{mean:,.1f} ms"))
    if len(outcomes) < times:
        lines.append(f"stopped after repeat {len(outcomes)}: it ended {outcomes[-1].status}")
    if len(means) >= 2:
        lines.append(f"run-to-run spread of the mean steps: {100 * np.std(means, ddof=1) / np.mean(means):.1f} % "
                     f"(std / mean over {len(means)} runs)")
    lines.append(f"compare over run means:  perfkit compare {folder} OTHER   (OTHER: one run or a --repeat folder)")
    return "\n".join(lines)
