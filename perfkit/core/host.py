"""The training host's facts a run records (perfkit_run.json `host`, analysis/flops.cpu_facts) and what they limit.

MindSpore refuses more dataset workers per op than the machine has CPUs (mindspore.dataset's validator compares
num_parallel_workers with multiprocessing.cpu_count()): every worker count perfkit proposes or sets, in advice,
`perfkit tune` and `perfkit profile --workers`, goes through `capped_workers`. The CPU count of a run is the one its
manifest records, never the one of the machine reading the files.
"""

from __future__ import annotations

from typing import Any


def capped_workers(asked: int, cpus: int | None) -> int:
    """`asked` dataset workers per op as MindSpore allows them on a host with `cpus` CPUs (None: unknown: not
    capped)."""
    return max(1, asked if cpus is None else min(asked, cpus))


def recorded_cpus(host: Any) -> tuple[int | None, str]:
    """(the CPU count the host facts record, where it comes from): `cpus` (logical CPUs, what MindSpore counts),
    else `cores` (physical cores: older manifests; never above the CPU count, so a worker count within it is
    accepted); (None, why) where the run records neither."""
    if isinstance(host, dict):
        for key, words in (("cpus", "CPUs"), ("cores", "physical cores")):
            value = host.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, f"the {value} {words} perfkit_run.json records for the host that ran it"
    return None, "the run records no host facts (perfkit_run.json from perfkit profile has them)"


def has_avx512(host: Any) -> bool | None:
    """Whether the recorded host CPU has AVX-512 (flags of analysis/flops.CPU_FLAGS); None where not recorded."""
    if not isinstance(host, dict) or not isinstance(host.get("flags"), list):
        return None
    return "avx512f" in host["flags"]
