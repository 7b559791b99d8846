"""The `perfkit` command: a thin layer over the Python API.

Data goes to stdout, diagnostics to stderr. Every PerfkitError becomes one line and exit code 2.
"""

from __future__ import annotations

import atexit
import gc
import json
import math
import os
import shlex
import sys
import threading
from pathlib import Path
from typing import Callable

import click

from ..core.errors import PerfkitError
from ..core.version import __version__

# perfkit's own code: an answer kept in the cache is stale once any of it, or an installed plugin's, changes.
CODE = (Path(__file__).resolve().parents[1],)


class PerfkitGroup(click.Group):
    """Turns perfkit's own errors into one line on stderr and exit code 2, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PerfkitError as exc:
            click.echo(f"perfkit: error: {exc}", err=True)
            ctx.exit(2)
        except KeyboardInterrupt:
            click.echo("perfkit: interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            sys.stderr.close()  # `perfkit summary … | head` is not an error
            ctx.exit(0)


# Allocations between two collections of the garbage collector's youngest generation in a perfkit command
# (console).
COLLECT_EVERY = 10_000


def console() -> None:
    """The `perfkit` command (and `python -m perfkit`): `main`, then the process ends as exiting would end it (the
    exit handlers run, the output is flushed, the exit code is the command's) without tearing the interpreter down
    module by module: with pandas and pyarrow imported that costs ~80 ms, a tenth of a small run's cold answer,
    and nothing anyone sees. Where anything else still runs (a thread, a child process: a dashboard's server, a
    Dask client), the interpreter exits as usual.

    The garbage collector's first generation is collected every COLLECT_EVERY allocations, not Python's 700: a
    command makes a few hundred thousand short-lived objects (rows, dicts, a large run's per-rank Parts) and
    almost no cycles, and at 700 it collected ~540 times in a 4,096-rank summary (0.13 s; 0.05 s so, and the
    same peak memory)."""
    gc.set_threshold(COLLECT_EVERY, *gc.get_threshold()[1:])
    try:
        main(prog_name="perfkit")
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BrokenPipeError:  # `perfkit --version | …` whose reader went away: as PerfkitGroup says it
        code = 0
    except OSError as exc:
        if not _writing_output(exc):  # not the output's: a bug, to be seen
            raise
        code = _unwritten(exc)
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # as sys.exit says a message
        code = 1
    failure = _output_error()  # the answer, flushed now: where it cannot be written, that is said
    if failure is not None:
        code = _unwritten(failure)
    processes = sys.modules.get("multiprocessing")
    if threading.active_count() > 1 or (processes is not None and processes.active_children()):
        sys.exit(code)
    atexit._run_exitfuncs()  # the handlers exiting runs (a timeline's scratch folder removed)
    if failure is None and (failure := _output_error()) is not None:  # what a handler printed
        code = _unwritten(failure)
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code or 0)


def _writing_output(exc: OSError) -> bool:
    """Whether `exc` was raised writing standard output: the frame it was raised in holds the stream
    (click.echo's `file`)."""
    trace = exc.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    return trace is not None and any(value is sys.stdout for value in trace.tb_frame.f_locals.values())


def _unwritten(failure: OSError) -> int:
    """Say in one line that the answer could not be written (a full disk, a device that fails): exit code 2."""
    sys.stderr.write(f"perfkit: error: standard output: cannot be written ({failure.strerror or failure})\n")
    return 2


def _output_error() -> OSError | None:
    """What flushing standard output met where it could not be written (a full disk, a device that fails); None
    where it was, where its reader went away (`perfkit … | head` is no error) or where it is closed."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        return None
    except OSError as exc:
        return exc
    return None


@click.group(cls=PerfkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="perfkit")
def main() -> None:
    """perfkit: find out why MindSpore training is slow.

    \b
    perfkit profile -- python train.py  profile your own training script -> ./profiler_v1
                                       (perfkit's options go before `--`)
    perfkit profile --steps 3          train ResNet-50 under the profiler -> ./profiler_v1
    perfkit summary profiler_v1        where each step's time goes
    perfkit advise profiler_v1         tuning hints with evidence
    perfkit compare profiler_v1 profiler_v2
    perfkit ranks cluster_run          which ranks are slow
    perfkit tune --steps 3             try the advised settings, keep what is measured faster
    perfkit dash profiler_v1 profiler_v2
    """


def progress_printer(stream) -> Callable[[str, float], None]:
    """A `progress(message, fraction)` for `stream`: on a terminal one line redrawn in place; elsewhere (a log,
    a pipe) a line of its own for each new message and each further tenth, so lines never run together."""
    if stream.isatty():
        return lambda message, fraction: click.echo(f"\r{message}: {fraction:.0%}", file=stream,
                                                    nl=fraction >= 1.0)
    said: set[tuple[str, int]] = set()

    def line(message: str, fraction: float) -> None:
        key = (message, int(fraction * 10))
        if key not in said:
            said.add(key)
            click.echo(f"{message}: {fraction:.0%}", file=stream)
    return line


def _load(path: str, cycle=None):
    """The run at `path`, of profiler cycle `cycle` (else --cycle's), with the op-level tables of --rank's ranks,
    every rank's (--all-ranks), else the representative ranks'; a folder of repeats is pointed at them."""
    from ..core.errors import LayoutError
    from ..io.loader import load
    from ..io.repeats import repeats_hint
    try:
        return load(path, _dask(), cycle if cycle is not None else _cycle(), _ranks())
    except LayoutError:
        hint = repeats_hint(path)
        if hint is None:
            raise
        raise LayoutError(hint, path) from None


class Count(click.IntRange):
    """A whole number in ASCII digits (int() also takes other scripts' digits: `--repeat ３`)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip().isascii():
            self.fail(f"{value!r} is not a whole number in digits 0-9", param, ctx)
        return super().convert(value, param, ctx)


def rank_options(command):
    """--rank and --all-ranks: whose op-level tables (kernels, op types, memory, Cells) a reading command reads,
    every rank's step, communication and metadata tables being read (docs/many-ranks.md); kept in the click
    context for _load(), _ranks() and _answer()."""
    def keep(ctx, param, value):
        ctx.meta[f"perfkit_{param.name}"] = value
    command = click.option("--all-ranks", is_flag=True, default=False, expose_value=False, callback=keep,
                           help="Read every rank's op-level tables (kernels, op types, memory, Cells). Without "
                                "it or --rank, a run of more than 16 ranks has those of its representative "
                                "ranks read: per pipeline stage the slowest, fastest and median by step time, "
                                "and the slow ranks found (the 8 farthest out of each finding).")(command)
    return click.option("--rank", "op_ranks", type=Count(min=0), multiple=True, expose_value=False,
                        callback=keep, metavar="N",
                        help="Read the op-level tables of this rank (repeatable) instead of the representative "
                             "ranks'.")(command)


def _rank_choice() -> str | None:
    """What the running command was asked for: "all" (--all-ranks), "3,17" (--rank 3 --rank 17) or None."""
    context = click.get_current_context(silent=True)
    meta = context.meta if context is not None else {}
    if meta.get("perfkit_all_ranks") and meta.get("perfkit_op_ranks"):
        raise PerfkitError("give --rank or --all-ranks, not both")
    if meta.get("perfkit_all_ranks"):
        return "all"
    return ",".join(map(str, sorted(set(meta["perfkit_op_ranks"])))) if meta.get("perfkit_op_ranks") else None


def _ranks():
    """The ranks whose op-level tables the running command reads, as loader.load takes them: --rank's, None for
    --all-ranks, else the function choosing the representative ranks."""
    choice = _rank_choice()
    if choice is None:
        from ..analysis.representatives import representative_ranks
        return representative_ranks
    return None if choice == "all" else tuple(int(rank) for rank in choice.split(","))


class CycleNumber(click.ParamType):
    """A profiler run's number among a rank's several, 1-based in profiling order, or `last` (range-checked by
    the loader, which names the runs there are)."""
    name = "N|last"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "last":
            return value
        if not (value.isascii() and value.isdigit()):  # int() also takes "٣", " 1 " and "1_0"
            self.fail(f"{value!r} is neither a number (1, 2, ... in profiling order) nor 'last'", param, ctx)
        return int(value)


def cycle_option(command):
    """--cycle: which of several profiler runs of one rank (schedule cycles with repeat > 1, dynamic-profiler
    windows) every reading command reads; kept in the click context for _load(), _cycle() and _answer()."""
    def keep(ctx, param, value):
        ctx.meta["perfkit_cycle"] = value
    return click.option("--cycle", type=CycleNumber(), default=None, expose_value=False, callback=keep,
                        help="Where a folder holds several profiler runs of one rank (schedule cycles with "
                             "repeat > 1, dynamic-profiler windows): read the N-th in profiling order, or the "
                             "last. Without it such a folder is refused, naming them.")(command)


def _cycle():
    """The profiler cycle the running command was given (--cycle), or None."""
    context = click.get_current_context(silent=True)
    return context.meta.get("perfkit_cycle") if context is not None else None


def dask_options(command):
    """--dask and --dask-storage: the per-rank read of a command on a Dask cluster (perfkit/io/dask_ingest.py); kept
    in the click context for _dask()."""
    def keep(ctx, param, value):
        ctx.meta[f"perfkit_{param.name}"] = value
    command = click.option("--dask-storage", metavar="PATH|URL", envvar="PERFKIT_DASK_STORAGE", default=None,
                           expose_value=False, callback=keep,
                           help="Where the workers write each rank's tables: a path or fsspec URL that this machine "
                                "and every worker see (default: perfkit's cache dir, for workers on this machine). "
                                "[env PERFKIT_DASK_STORAGE]")(command)
    return click.option("--dask", "dask_address", metavar="ADDRESS", envvar="PERFKIT_DASK", default=None,
                        expose_value=False, callback=keep,
                        help="Read the ranks on this Dask scheduler's workers (e.g. tcp://10.0.0.5:8786); "
                             "needs perfkit[dask]. [env PERFKIT_DASK]")(command)


def _dask():
    """The Dask cluster the running command was given (--dask), or None: read in process."""
    context = click.get_current_context(silent=True)
    address = context.meta.get("perfkit_dask_address") if context is not None else None
    if not address:
        return None
    from ..io.dask_ingest import target
    return target(address, context.meta.get("perfkit_dask_storage"))


def _json(payload) -> str:
    """Strict JSON (jq and most parsers refuse NaN/Infinity): a number that is not finite is null, unknown.
    Inputs are screened as they are read; this covers what arithmetic on sound inputs can still make (a
    ratio over a zero). Indented by msgspec, byte for byte as json.dumps(indent=2) writes it: the standard
    library's encoder leaves C once asked to indent (0.14 s for a 4,096-rank summary's 4 MB, 0.05 s so). The
    payload is walked for non-finite numbers only where the encoder finds one (the walk: 0.02 s of that 4 MB)."""
    import msgspec
    try:
        compact = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    except ValueError:
        compact = json.dumps(_finite(payload), separators=(",", ":"), allow_nan=False)
    return msgspec.json.format(compact, indent=2)


def _finite(node):
    if isinstance(node, float):
        return node if math.isfinite(node) else None
    if isinstance(node, dict):
        return {key: _finite(value) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [_finite(value) for value in node]
    return node


def _answer(question: tuple[str, ...], run: str, compute: Callable[[], tuple[str, int]],
            keyed_by_reads: bool = False) -> None:
    """Print `compute()`'s (output, exit code), or the answer kept from an earlier identical question about
    the same, unchanged files: that costs no pandas import (perfkit/io/cache.py, answers). `keyed_by_reads`, for
    an answer computed from one load of the run alone: kept with what that load read (the folders listed, the
    files read: a large run's cluster-level files and its representative ranks' folders), checked file by file."""
    from ..core import plugins
    from ..io import cache
    if _cycle() is not None:
        question += ("cycle", str(_cycle()))
    if _rank_choice() is not None:
        question += ("ranks", _rank_choice())
    code = CODE + plugins.code_paths()
    entry = (cache.read_answer_entry if keyed_by_reads else cache.answer_entry)(run, question, code)
    kept = ((cache.fetch_read_answer if keyed_by_reads else cache.fetch_answer)(entry)
            if entry is not None else None)
    if kept is None:
        with cache.answer_reads() as reads, cache.stores_in_background():  # a cold load's Run entry written
            output, exit_code = compute()                                   # while the answer is computed
        if entry is not None:
            if keyed_by_reads:
                cache.store_read_answer(entry, output, exit_code, reads)
            else:
                cache.store_answer(entry, output, exit_code)
    else:
        output, exit_code = kept
    click.echo(output)
    if exit_code:
        click.get_current_context().exit(exit_code)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--by", type=click.Choice(["step", "cell"]), default="step", show_default=True,
              help="cell: the whole network Cell tree (ms per step, forward/backward, FLOP/s) instead.")
@dask_options
@rank_options
@cycle_option
def summary(run: str, fmt: str, by: str) -> None:
    """Where each step's time goes, which op types dominate, whether data queues ran empty.

    \b
    Example:
      perfkit summary profiler_v1
      perfkit summary ./rank0_ascend_ms --format json | jq .steps
      perfkit summary profiler_v1 --by cell
    """
    def compute() -> tuple[str, int]:
        from ..render.text import cell_tree_text, summary_text
        from ..views.summary import summarize
        result = summarize(_load(run))
        if fmt == "json":
            return _json(result), 0
        return (cell_tree_text(result) if by == "cell" else summary_text(result)), 0
    _answer(("summary", fmt) + (("by", by) if by != "step" else ()), run, compute, keyed_by_reads=True)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--fail-on", type=click.Choice(["high", "medium", "low"]), default=None,
              help="Exit 1 when a finding at or above this severity exists (for CI).")
@dask_options
@rank_options
@cycle_option
def advise(run: str, fmt: str, fail_on: str | None) -> None:
    """Tuning hints with the numbers behind them, most important first.

    \b
    Example:
      perfkit advise profiler_v1
      perfkit advise profiler_v1 --format json | jq -r '.findings[].id'
      perfkit advise profiler_v1 --format markdown --fail-on high   # CI gate
    """
    def compute() -> tuple[str, int]:
        from ..advisor import advise as run_rules
        from ..advisor import at_or_above
        from ..render.advice import advice_markdown, advice_text
        advice = run_rules(_load(run))
        output = {"json": lambda: _json(advice.to_dict()), "markdown": lambda: advice_markdown(advice),
                  "text": lambda: advice_text(advice)}[fmt]()
        failed = bool(fail_on) and any(at_or_above(finding, fail_on) for finding in advice.findings)
        return output, 1 if failed else 0
    from ..core.plugins import RULES, fingerprint
    # rules from installed packages are part of the answer: adding, removing or upgrading one asks again
    _answer(("advise", fmt, fail_on or "", *fingerprint(RULES)), run, compute, keyed_by_reads=True)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@dask_options
@rank_options
@cycle_option
def ranks(run: str, fmt: str) -> None:
    """Which ranks of a multi-rank run are slow, from the step files alone (fast on hundreds of ranks).

    \b
    Example:
      perfkit ranks ./cluster_run
      perfkit ranks ./cluster_run --format json | jq .slow_ranks
    """
    def compute() -> tuple[str, int]:
        from ..analysis.cluster import slow_ranks
        from ..render.text import slow_ranks_text
        answer = slow_ranks(run, _dask(), _cycle(), _ranks()).to_dict()
        return (_json(answer) if fmt == "json" else slow_ranks_text(answer)), 0
    _answer(("ranks", fmt), run, compute)


@main.command()
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--fail-if-slower", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when B's mean step is more than PCT % slower than A's and beyond the noise (for CI). "
                   "Runs of different devices, networks or batch sizes are refused (exit 2).")
@click.option("--fail-on-new", type=click.Choice(["high", "medium"]), default=None,
              help="Exit 1 when B has a finding A had not, at or above this severity (for CI).")
@click.option("--noise-floor", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="How far single runs of one setting land apart on your machine (default: from the runs' recorded "
                   "load and step spread, see docs/compare.md). Used when each side is one run.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="Samples per step over all ranks, for runs whose files do not tell it (samples/s, and time per "
                   "sample when the batches differ).")
@click.option("--seq-len", type=click.IntRange(min=1), default=None, metavar="L",
              help="Tokens per sample, for runs whose manifest does not record it: tokens/s.")
@cycle_option
@click.option("--cycle-b", type=CycleNumber(), default=None,
              help="B's profiler cycle where it is not --cycle's: two cycles of one folder side by side "
                   "(perfkit compare run run --cycle 1 --cycle-b 2).")
@click.option("--depth", type=click.IntRange(min=1), default=None, metavar="N",
              help="A PyTorch reference against its MindSpore port: the stages (module <-> Cell) down to depth N "
                   "(1: the network's top-level modules; default 2 in text and markdown, the whole tree in JSON).")
@click.pass_context
def compare(ctx: click.Context, run_a: str, run_b: str, fmt: str, fail_if_slower: float | None,
            fail_on_new: str | None, noise_floor: float | None, batch_size: int | None, seq_len: int | None,
            cycle_b, depth: int | None) -> None:
    """Before/after: whether B is faster than A beyond the run-to-run noise (over the runs' means; per sample
    when the batches differ), samples/s, the step ledger's per-cause changes, what differed between the runs,
    each run's step spread, op types in ms per step, resolved and new findings. A is the baseline.

    \b
    Example:
      perfkit compare profiler_v1 profiler_v2
      perfkit compare base candidate      # folders of repeat_1..N (profile --repeat N): judged over run means
      perfkit compare cpu_default cpu_avx2 --format json | jq .verdict.kind
      perfkit compare baseline candidate --fail-if-slower 5 --fail-on-new high --format markdown  # CI gate
      perfkit compare own_v1 own_v2 --batch-size 64 --seq-len 512   # an own script's runs: samples/s, tokens/s
      perfkit compare run run --cycle 1 --cycle-b 2   # two profiler cycles (schedule repeat=2) of one folder
    """
    from ..io.repeats import usable_repeats
    from ..render.compare import compare_markdown, compare_text
    from ..views.compare import compare as compare_runs
    from ..views.compare import gate
    (side_a, failed_a), (side_b, failed_b) = usable_repeats(run_a), usable_repeats(run_b)
    for line in failed_a + failed_b:
        click.echo(f"perfkit: warning: {line}", err=True)
    group_a, group_b = _load_all(tuple(side_a)), _load_all(tuple(side_b), cycle_b)
    if _compared_across_frameworks(group_a, group_b, fmt, fail_if_slower, fail_on_new, noise_floor, depth):
        return
    result = compare_runs(group_a[0], group_b[0], group_a[1:], group_b[1:],
                          noise_floor, batch_size, seq_len)
    gating = fail_if_slower is not None or fail_on_new is not None
    verdict = gate(result, fail_if_slower, fail_on_new) if gating else None
    if result["batch_unknown"]:
        click.echo(f"perfkit: warning: batch size unknown in {' and '.join(result['batch_unknown'])}: samples/s "
                   "unknown, time per step compared; give the global batch with --batch-size N", err=True)
    if fmt == "json":
        click.echo(_json({**result, "gate": verdict} if gating else result))
    elif fmt == "markdown":
        click.echo(compare_markdown(result, verdict))
    else:
        click.echo(compare_text(result))
    if verdict is not None:
        for note in verdict["notes"]:
            click.echo(f"perfkit: gate: {note}", err=True)
        if verdict["failed"]:
            click.echo(f"perfkit: gate failed: {'; '.join(verdict['reasons'])}", err=True)
            ctx.exit(1)


def _compared_across_frameworks(group_a, group_b, fmt, fail_if_slower, fail_on_new, noise_floor, depth) -> bool:
    """A PyTorch reference against its MindSpore port (either order): the migration view (docs/migration.md)."""
    from ..analysis.statistics import NOISE_FLOOR_PCT
    from ..views.migration import compare_across, is_cross_framework
    if not is_cross_framework(group_a[0], group_b[0]):
        return False
    if fail_if_slower is not None or fail_on_new is not None:
        raise PerfkitError("--fail-if-slower/--fail-on-new gate runs of one framework; a PyTorch reference against "
                           "its MindSpore port is compared without a gate")
    from ..render.migration import migration_markdown, migration_text, stages_to_depth
    from ..views.migration import STAGE_DEPTH
    result = compare_across(group_a, group_b, NOISE_FLOOR_PCT if noise_floor is None else noise_floor)
    shown = depth or STAGE_DEPTH
    click.echo((_json(result) if depth is None else _json(stages_to_depth(result, depth))) if fmt == "json"
               else migration_markdown(result, shown) if fmt == "markdown" else migration_text(result, shown))
    return True


class ProfileCommand(click.Command):
    """Notes whether `--` was given: `perfkit profile --` with nothing after it is a mistake, not the
    built-in ResNet-50 run."""

    def parse_args(self, ctx, args):
        ctx.meta["script_mode"] = "--" in args
        return super().parse_args(ctx, args)


# Flags of the built-in ResNet-50 run that mean nothing for the user's own script.
RESNET_ONLY = ("device", "batch_size", "image_size", "data_path", "shards", "shard_id", "sink", "amp_level",
               "workers", "mode")
RESNET_STEPS, RESNET_WARMUP = 3, 1


@main.command(cls=ProfileCommand)
@click.option("--device", type=click.Choice(["auto", "Ascend", "GPU", "CPU"]), default="auto", show_default=True,
              help="Where to train; auto takes the first of Ascend, GPU, CPU that MindSpore can use.")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help=f"Profiled steps. Default {RESNET_STEPS}; with a script: all.")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help=f"Steps before profiling starts (the first one compiles the graph). Default {RESNET_WARMUP}; "
                   "with a script 0 (a script that never calls Model.train nor perfkit.profiling has no steps "
                   "to skip).")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--image-size", type=click.IntRange(min=1), default=None,
              help="Input size. Default 224 on Ascend/GPU (the seed's), 32 on CPU so the default run "
                   "ends in about a minute.")
@click.option("--data-path", type=click.Path(), default=None,
              help="CIFAR-10 binary folder (data_batch_1.bin ...). Default: synthetic CIFAR-10 in the real "
                   "format, cached under ~/.cache/perfkit; the run is marked synthetic.")
@click.option("--shards", type=click.IntRange(min=1), default=40, show_default=True,
              help="Split the training set this many ways and train on one part (the seed profiles 1/40).")
@click.option("--shard-id", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which part; under --ranks, rank r takes shard-id + r.")
@click.option("--sink/--no-sink", default=True, show_default=True,
              help="Dataset sink mode (not available on CPU: feed mode is used and recorded).")
@click.option("--amp-level", type=click.Choice(["O0", "O1", "O2", "O3"]), default="O0", show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="num_parallel_workers of the map and batch ops (default: MindSpore's).")
@click.option("--mode", type=click.Choice(["graph", "pynative"]), default="graph", show_default=True)
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="Set for the training process and recorded, e.g. ONEDNN_MAX_CPU_ISA=AVX2. Repeatable.")
@click.option("--output", type=click.Path(), default="./profiler_v1", show_default=True,
              help="Run folder; if it exists the next free profiler_vN is used (never overwritten).")
@click.option("--ranks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data-parallel ranks on this machine, launched with MindSpore's msrun; one folder per rank.")
@click.option("--profile-memory", is_flag=True, default=False,
              help="Also record the allocator's memory (MindSpore's profile_memory=True) and the memory capacity: "
                   "the Memory page, peak memory and the batch size that would fit.")
@click.option("--repeat", type=Count(min=1), default=1, show_default=True, metavar="N",
              help="Make N runs of the same settings, one after another, in OUTPUT/repeat_1..N: `perfkit compare` "
                   "judges such a folder over its run means.")
@click.option("--reference", is_flag=True, default=False,
              help="The script after `--` is a PyTorch reference: run it under torch.profiler (torch in the script's "
                   "Python; docs/migration.md), for `perfkit compare REFERENCE PORT`.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def profile(ctx, device, steps, warmup, batch_size, image_size, data_path, shards, shard_id, sink, amp_level, workers,
            mode, env_pairs, output, ranks, profile_memory, repeat, reference, command) -> None:
    """Profile your own training script (after `--`), or train the seed's ResNet-50 on CIFAR-10, under the
    MindSpore profiler and write a run folder.

    \b
    Your script runs unchanged: its output and exit code are its own. perfkit's options go before `--`;
    everything after it is the command, run as given (perfkit says which options it took). MindSpore's
    profiler is switched on through MS_PROFILER_OPTIONS, MindData's profiling too, and each Model.train step
    is timed (custom loops: perfkit.profiling's prof.step(), or the steps are read from the op timestamps);
    the batch size of the dataset it iterates is recorded. --output, --env, --ranks, --warmup, --steps and
    --profile-memory apply.

    The built-in run prints a line per step when its output is not a terminal, and on a host with AVX-512
    sets ONEDNN_MAX_CPU_ISA=AVX2 for the CPU (unless --env or the environment set it): oneDNN's AVX-512 3x3
    convolutions are its slow reference kernel (`perfkit advise`: kernel_efficiency).

    The folder holds MindSpore's profiler files, MindData's dataset profile and perfkit_run.json (config,
    versions, step times, status). Ctrl-C (or SIGTERM) stops training after the current step and keeps what
    was profiled (exit code 130, 143 for SIGTERM); a second one stops at once.

    \b
    Example:
      perfkit profile -- python train.py --epochs 1     # your script -> ./profiler_v1
      perfkit profile --ranks 2 -- python train.py      # data parallel through msrun
      perfkit profile --steps 3                       # CPU: about a minute -> ./profiler_v1
      perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2 --workers 4
      perfkit profile --ranks 2 --output runs/dp2
      perfkit profile --profile-memory --batch-size 8  # with the allocator's memory over time
      perfkit profile --repeat 3 --output base          # base/repeat_1..3, for perfkit compare
      perfkit profile --repeat 3 -- python train.py
      perfkit profile --reference --output ref -- python ref_train.py   # PyTorch, under torch.profiler
    """
    from ..profiler import report
    from ..profiler.launch import parse_env
    if reference:
        _profile_reference(ctx, list(command), steps, warmup, parse_env(env_pairs), output)
        return
    if ctx.meta["script_mode"] or command:
        _profile_script(ctx, list(command), steps, warmup, parse_env(env_pairs), output, ranks, profile_memory,
                        repeat)
        return
    from ..profiler.launch import ProfileRequest
    from ..profiler.launch import profile as run_profile
    request = ProfileRequest(device=device, steps=RESNET_STEPS if steps is None else steps,
                             warmup=RESNET_WARMUP if warmup is None else warmup, batch_size=batch_size,
                             image_size=image_size, data_path=data_path, shards=shards, shard_id=shard_id,
                             sink=sink, amp_level=amp_level, workers=workers, mode=mode,
                             env=parse_env(env_pairs), output=output, ranks=ranks, profile_memory=profile_memory)
    if repeat > 1:
        from dataclasses import replace

        from ..profiler.repeat import profile_repeats, repeats_report
        folder, outcomes = profile_repeats(lambda out: run_profile(replace(request, output=out)), output, repeat)
        outcome = outcomes[-1]
        click.echo(repeats_report(folder, outcomes, repeat))
    else:
        outcome = run_profile(request)
        click.echo(report(outcome))
    if outcome.status == "interrupted":
        click.echo(f"perfkit: interrupted: {outcome.folder} holds the steps profiled before {outcome.stop_signal}",
                   err=True)
        ctx.exit(outcome.exit_code)


def _profile_reference(ctx, command, steps, warmup, env, output) -> None:
    from click.core import ParameterSource

    from ..profiler import report
    from ..profiler.reference import ReferenceRequest, profile_reference
    given = [name for name in RESNET_ONLY + ("ranks", "profile_memory", "repeat")
             if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given:
        raise PerfkitError(", ".join("--" + name.replace("_", "-") for name in given) + ": not for --reference")
    output = "./profiler_reference" if ctx.get_parameter_source("output") is ParameterSource.DEFAULT else output
    outcome = profile_reference(ReferenceRequest(command=command, output=output, env=env,
                                                 warmup=1 if warmup is None else warmup,
                                                 steps=RESNET_STEPS if steps is None else steps))
    if outcome.traced:
        click.echo(report(outcome))
    else:
        click.echo(f"perfkit: {outcome.folder} holds no torch.profiler trace: the script ended before its profiled "
                   "steps (it must call an optimizer's step() once per step)", err=True)
    ctx.exit(outcome.exit_code or (0 if outcome.traced else 2))


def _profile_script(ctx, command, steps, warmup, env, output, ranks, profile_memory, repeat) -> None:
    from click.core import ParameterSource

    from ..profiler import report
    from ..profiler.script import ScriptRequest, profile_script
    given = [name for name in RESNET_ONLY if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise PerfkitError(f"{flags}: for the built-in ResNet-50 run only; your script sets these itself")
    request = ScriptRequest(command=command, output=output, env=env, ranks=ranks, warmup=warmup or 0, steps=steps,
                            profile_memory=profile_memory)
    # Said once, before profile_script's first line: after the command was checked (a bad one is one line).
    untold = [f"perfkit: profiling `{shlex.join(command)}` (everything after `--` is the script's); perfkit's own "
              f"options: {_options_given(ctx) or 'none, the defaults (they go before `--`)'}"]

    def say(text: str) -> None:
        while untold:
            click.echo(untold.pop(), err=True)
        click.echo(text, err=True)
    if repeat > 1:
        from dataclasses import replace

        from ..profiler.repeat import profile_repeats, repeats_report
        folder, outcomes = profile_repeats(lambda out: profile_script(replace(request, output=out), say), output,
                                           repeat)
        outcome = outcomes[-1]
    else:
        outcome = profile_script(request, say)
        outcomes = [outcome]
    for note in dict.fromkeys(note for done in outcomes for note in done.notes):
        click.echo(f"perfkit: warning: {note}", err=True)
    if repeat > 1:
        click.echo(repeats_report(folder, outcomes, repeat))
    elif outcome.status in ("ok", "interrupted", "incomplete") and outcome.profiled:
        click.echo(report(outcome))
    if not outcome.profiled:
        click.echo(f"perfkit: {outcome.folder} holds only perfkit_run.json (the script did not use MindSpore); "
                   f"exit code {outcome.exit_code}, the script's", err=True)
    elif outcome.status == "incomplete":
        click.echo(f"perfkit: incomplete: {outcome.folder} holds the step times only (no op data from MindSpore's "
                   "profiler), marked incomplete", err=True)
    elif outcome.status == "interrupted":
        click.echo(f"perfkit: interrupted: {outcome.folder} holds what was profiled before {outcome.stop_signal}",
                   err=True)
    elif outcome.status == "failed":
        click.echo(f"perfkit: the script failed (exit code {outcome.exit_code}): what was profiled is in "
                   f"{outcome.folder}, marked failed (perfkit summary {outcome.folder})", err=True)
    ctx.exit(outcome.exit_code)


def _options_given(ctx) -> str:
    """The options of the running command given on the command line, as they would be typed again."""
    from click.core import ParameterSource

    given = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if not isinstance(param, click.Option) or source is not ParameterSource.COMMANDLINE:
            continue
        flag = param.opts[0]
        value = ctx.params[param.name]
        if param.is_flag:
            given.append(flag if value else param.secondary_opts[0] if param.secondary_opts else flag)
        else:
            given += [f"{flag} {shlex.quote(str(item))}" for item in (value if param.multiple else [value])]
    return " ".join(given)


class TuneCommand(click.Command):
    """Splits `perfkit tune [options] -- python train.py …`: the command after `--` is the user's; the options
    that are not tune's own are `perfkit profile`'s, checked by it."""

    def parse_args(self, ctx, args):
        if "--" in args:
            ctx.meta["command"] = args[args.index("--") + 1:]
            args = args[:args.index("--")]
            if not ctx.meta["command"]:
                raise PerfkitError("no command after `--`: give the training command, e.g. perfkit tune -- python "
                                   "train.py")
        else:
            ctx.meta["command"] = None
        return super().parse_args(ctx, args)


@main.command(cls=TuneCommand, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--output", type=click.Path(file_okay=False), default="./perfkit_tune", show_default=True,
              help="The tune folder: every experiment's run folders and the ledger tune.json. Run again with the same "
                   "folder to go on where it stopped.")
@click.option("--repeats", type=Count(1, 1000), default=3, show_default=True,
              help="Runs of each setting, interleaved with the baseline's (A B A B): 2 or more judge by run means "
                   "(with 2 a side the 95 % interval is wide: t has 1 degree of freedom).")
@click.option("--max-experiments", type=click.IntRange(min=1), default=6, show_default=True,
              help="Candidate settings tried (the combination of the faster ones counts as one).")
@click.option("--max-minutes", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Wall-clock budget of this session, a deadline: a run still going then is stopped with every "
                   "process it started (and made again by a rerun). What is left is shown before each run.")
@click.option("--try", "tries", multiple=True, metavar="KNOB=VALUE",
              help="Also try this setting: env:NAME=VALUE, amp_level=O2, mode=graph, sink_mode=true, "
                   "dataset_workers=4, dataset_workers:map=4, batch_size=64, prefetch=8. Repeatable.")
@click.option("--standard/--no-standard", default=True, show_default=True,
              help="Also try the standard changes that can matter on this machine (the ISA cap on an AVX-512 CPU, "
                   "graph mode for PyNative, a dataset worker per CPU).")
@click.option("--noise-floor", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="With --repeats 1: the change a single run must exceed (default: compare's, from the runs' "
                   "recorded load and step spread).")
@click.option("--fresh", is_flag=True, default=False,
              help="Start over in --output: its ledger (tune.json) is replaced, its runs made again.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.argument("profile_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def tune(ctx, output, repeats, max_experiments, max_minutes, tries, standard, noise_floor, fresh, fmt,
         profile_args) -> None:
    """Try the settings the advisor proposes, re-profiling each against the baseline, and keep what is faster.

    \b
    The baseline is the built-in ResNet-50 with `perfkit profile`'s options, or your script after `--`, unchanged:
    each candidate (the findings' changes, --try, standard ones) is applied without editing it (environment
    variables; amp_level, dataset_sink_mode, num_parallel_workers, batch size, mode through a start-up hook).
    Baseline and candidates run in rounds (A B1 B2 … A B1 B2 …), each judged by `perfkit compare`'s verdict
    over run means; then the faster ones together. Out: a ranked table, the best settings as a diff of your
    script (or the lines to add), every run folder under --output. Ctrl-C keeps the finished runs.

    \b
    Example:
      perfkit tune --steps 3 --image-size 32 --batch-size 8
      perfkit tune --max-minutes 20 -- python train.py
      perfkit tune --try amp_level=O2 --try env:OMP_NUM_THREADS=2 -- python train.py
    """
    from ..advisor.change import parse_change
    from ..profiler.script import script_index
    from .tune import Budget, Tuner, propose, tune_dict, tune_text
    from .tune_patch import command_patch, script_patch
    from .tune_runners import ProfileRunner

    command = ctx.meta["command"]
    args = list(profile_args)
    if not math.isfinite(max_minutes):
        raise PerfkitError(f"--max-minutes {max_minutes}: give a number of minutes (a deadline), e.g. 30")
    checked = profile.make_context("profile", [*args, *(["--", *command] if command else [])])
    if checked.params["ranks"] != 1:
        raise PerfkitError("--ranks: perfkit tune runs one process per experiment")
    if checked.params["repeat"] != 1:
        raise PerfkitError("--repeat: perfkit tune makes the runs of each setting itself (--repeats N)")
    if command:
        from click.core import ParameterSource
        given = [name for name in RESNET_ONLY if checked.get_parameter_source(name) is ParameterSource.COMMANDLINE]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise PerfkitError(f"{flags}: for the built-in ResNet-50 run only; your script sets these itself")
    try:
        changes = [parse_change(text) for text in tries]
    except ValueError as exc:
        raise PerfkitError(f"--try {exc}") from None

    def say(text: str) -> None:
        click.echo(text, err=True)

    tuner = Tuner(ProfileRunner(args, command, say), Path(output), Budget(max_experiments, max_minutes, repeats),
                  say=say, candidates=lambda run: propose(run, changes, standard), noise_floor_pct=noise_floor, fresh=fresh)
    result = tuner.tune()
    patch = None
    if result.best is not None:
        from ..advisor.change import Change
        best = tuple(Change.from_dict(change) for change in result.best["change"])
        index = script_index(command) if command else None
        patch = command_patch(args, best) if not command else (
            script_patch(Path(command[index]), best) if index is not None else None)
    click.echo(_json(tune_dict(result, patch)) if fmt == "json" else tune_text(result, patch))
    if result.interrupted:
        ctx.exit(result.exit_code)


def _load_all(paths: tuple[str, ...], cycle=None) -> list:
    return [_load(path, cycle) for path in paths]


def _load_shown(paths: tuple[str, ...]) -> list:
    """The runs `dash` shows: each path, a folder of repeat_N folders as its repeats (as `compare` reads
    a side), not the record files `perfkit tune` keeps beside each repeat (io.repeats.run_folders). A run that
    cannot be read is one warning line and left out where others can be shown (one broken repeat of a tune folder
    must not hide the rest); with none left, its error."""
    from ..core.errors import PerfkitError
    from ..io.repeats import run_folders
    folders, left_out = run_folders(paths)
    for line in left_out:
        click.echo(f"perfkit: warning: {line}", err=True)
    runs, failures = [], []
    for path in folders:
        try:
            runs.append(_load(path))
        except PerfkitError as exc:
            failures.append(exc)
    if failures and not runs:
        raise failures[0]
    for exc in failures:
        click.echo(f"perfkit: warning: left out {exc}", err=True)
    return runs


def _dash_help() -> str:
    """`perfkit dash --help`, its page list made from the dashboard's own (views/panel.py: ALL_PAGES)."""
    from ..views.panel import ALL_PAGES
    pages = ", ".join(f"{page.title} {page.path}" for page in ALL_PAGES)
    return f"""Serve the dashboard over the given runs; its pages: {pages}.

    The runs are read once at start; the app never reads another path.

    \b
    Example:
      perfkit dash profiler_v1 profiler_v2 profiler_v3      # then open http://127.0.0.1:8050
      perfkit dash ./cluster_run --port 8060
      perfkit dash base candidate       # folders of repeat_1..N (profile --repeat N): compared over run means
      perfkit dash perfkit_tune/*/repeat_*                  # every run of a tune session
    """


@main.command(help=_dash_help())
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind. Anything but loopback exposes the dashboard (no login) to the network.")
@click.option("--port", type=click.IntRange(1, 65535), default=8050, show_default=True)
@rank_options
@cycle_option
def dash(runs: tuple[str, ...], host: str, port: int) -> None:
    from ..dashboards.app import check_port, is_loopback, serve
    check_port(host, port)  # a busy port is said before minutes of loading, not after
    loaded = _load_shown(runs)
    if not is_loopback(host):
        click.echo(f"perfkit: warning: serving on {host}: anyone who can reach this port sees the profiles "
                   "(no authentication)", err=True)
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address needs brackets in a URL
    serve(loaded, host=host, port=port,
          ready=lambda: click.echo(f"perfkit dash: http://{shown}:{port}/  (Ctrl-C stops)", err=True))


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="report.html", show_default=True)
@dask_options
@rank_options
@cycle_option
def report(runs: tuple[str, ...], output: str) -> None:
    """Write one self-contained HTML file with the dashboard's figures and findings (opens offline).

    \b
    Example:
      perfkit report profiler_v1 -o report.html
      perfkit report profiler_v1 profiler_v2 -o ci/perf.html     # with a compare section
    """
    from ..render.report import write_report
    write_report(_load_all(runs), output)
    click.echo(f"wrote {output}", err=True)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--step", type=int, help="The step to cut out (its bounds: the trace's step markers or kernel_details).")
@click.option("--start-ms", type=float, help="Window start, ms after the trace's first event (instead of --step).")
@click.option("--end-ms", type=float, help="Window end, ms after the trace's first event.")
@click.option("--ranks", help="Comma-separated ranks (default: all), e.g. 0,3")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
@click.option("--format", "fmt", type=click.Choice(["json", "parquet"]), default="json", show_default=True,
              help="json: a Chrome trace Perfetto and chrome://tracing open; parquet: the events table.")
@cycle_option
def trace(run: str, step: int | None, start_ms: float | None, end_ms: float | None, ranks: str | None,
          output: str, fmt: str) -> None:
    """Cut one step (or time window) of the timeline out of a big trace, all ranks side by side.

    The first call indexes the trace files into perfkit's cache (seconds per GB); later calls read
    only the window.

    \b
    Example:
      perfkit trace profiler_v1 --step 3 -o step3.json        # open in https://ui.perfetto.dev
      perfkit trace cluster_run --step 3 --ranks 0,7 --format parquet -o step3.parquet
    """
    from ..io.parallel import pyarrow_without_pandas
    from ..io.timeline import window, write_window
    pyarrow_without_pandas()
    if step is None and start_ms is None and end_ms is None:
        raise click.UsageError("give --step N, or --start-ms/--end-ms")
    try:
        chosen = [int(rank) for rank in ranks.split(",")] if ranks else None
    except ValueError:
        raise click.UsageError(f"--ranks takes comma-separated numbers, not {ranks!r}") from None
    events, warnings = window(run, step=step, start_ms=start_ms, end_ms=end_ms, ranks=chosen,
                              progress=progress_printer(sys.stderr), cycle=_cycle())
    for warning in warnings:
        click.echo(f"perfkit: warning: {warning}", err=True)
    write_window(events, output, fmt)
    click.echo(f"wrote {output}: {len(events):,} events", err=True)
