"""The `perfkit` command: a thin layer over the Python API.

Data goes to stdout, diagnostics to stderr. Every PerfkitError becomes one line and exit code 2.
"""

from __future__ import annotations

import json
import sys

import click

from . import __version__
from .errors import PerfkitError


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


@click.group(cls=PerfkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="perfkit")
def main() -> None:
    """perfkit: find out why MindSpore training is slow.

    \b
    perfkit profile --steps 3          train ResNet-50 under the profiler -> ./profiler_v1
    perfkit summary profiler_v1        where each step's time goes
    perfkit advise profiler_v1         tuning hints with evidence
    perfkit compare profiler_v1 profiler_v2
    perfkit dash profiler_v1 profiler_v2
    """


def _load(path: str):
    from . import load
    return load(path)


def _emit_json(payload) -> None:
    click.echo(json.dumps(payload, indent=2, allow_nan=False))


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def summary(run: str, fmt: str) -> None:
    """Where each step's time goes, which op types dominate, whether data queues ran empty.

    \b
    Example:
      perfkit summary profiler_v1
      perfkit summary ./rank0_ascend_ms --format json | jq .steps
    """
    from .analysis import summarize
    from .render import summary_text
    result = summarize(_load(run))
    if fmt == "json":
        _emit_json(result)
    else:
        click.echo(summary_text(result))


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--fail-on", type=click.Choice(["high", "medium", "low"]), default=None,
              help="Exit 1 when a finding at or above this severity exists (for CI).")
@click.pass_context
def advise(ctx: click.Context, run: str, fmt: str, fail_on: str | None) -> None:
    """Tuning hints with the numbers behind them, most important first.

    \b
    Example:
      perfkit advise profiler_v1
      perfkit advise profiler_v1 --format json | jq -r '.findings[].id'
      perfkit advise profiler_v1 --format markdown --fail-on high   # CI gate
    """
    from .advisor import advise as run_rules, at_or_above
    from .advisor.render import advice_markdown, advice_text
    advice = run_rules(_load(run))
    if fmt == "json":
        _emit_json(advice.to_dict())
    elif fmt == "markdown":
        click.echo(advice_markdown(advice))
    else:
        click.echo(advice_text(advice))
    if fail_on and any(at_or_above(finding, fail_on) for finding in advice.findings):
        ctx.exit(1)


@main.command()
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def compare(run_a: str, run_b: str, fmt: str) -> None:
    """Before/after: step times, speedup (A/B), op-type share changes, resolved and new findings.

    \b
    Example:
      perfkit compare profiler_v1 profiler_v2
      perfkit compare cpu_default cpu_avx2 --format json | jq .speedup
    """
    from .compare import compare as compare_runs, compare_text
    result = compare_runs(_load(run_a), _load(run_b))
    if fmt == "json":
        _emit_json(result)
    else:
        click.echo(compare_text(result))
