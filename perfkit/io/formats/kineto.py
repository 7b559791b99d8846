"""PyTorch's profiler output: the kineto trace `torch.profiler` writes through `tensorboard_trace_handler`,
`{worker}.{ns}.pt.trace.json[.gz]` (docs/formats.md §5, docs/migration.md). Read without torch: it is JSON.

A Run with meta.framework "torch". What the trace holds and how it becomes the Run's tables:
- steps: the `ProfilerStep#N` spans the profiler's `step()` writes (numbered by the schedule's counter, so #2..#4
  after wait=1 warmup=1); a step's interval is the data wait (the DataLoader's `__next__` spans inside it, torch's
  only record of data loading: worker processes are not traced), its tail runs from the end of its last backward op
  to its end (the optimizer), fwd_bwd is the rest;
- op time counted once: `cpu_op` events nest (aten::conv2d > aten::convolution > aten::_convolution >
  aten::mkldnn_convolution), so each event's self time is its duration less its nested ops', and an op family is the
  outermost aten:: op of a nesting with the self time of everything under it (a conv once, not four times); the
  autograd engine's own wrappers (`autograd::engine::evaluate_function: XBackward0`, `XBackward0`) are one family,
  AUTOGRAD_ENGINE;
- passes: backward = under an autograd wrapper, other = under `Optimizer.step#`/`Optimizer.zero_grad#` (their ops
  in the scope `optimizer-Adam`, as MindSpore's) or outside every module span of a trace that has them, forward =
  the rest; data loading is the step's interval, not an op;
- shapes: the family op's `Input Dims` and `Input type` (recorded with record_shapes=True);
- Cells: the `nn.Module: …` spans (perfkit's reference runner names them `nn.Module: layer1.0.conv1 (Conv2d)`, torch's
  with_stack `nn.Module: Conv2d_17`); a backward op goes in the module of the forward op its `fwdbwd` flow names.
- the GPU side, where the trace has one (a reference profiled on CUDA or ROCm): device events (`kernel`,
  `gpu_memcpy`, `gpu_memset`; device in pid, stream in tid) each linked to the host launch (`cuda_runtime` /
  `cuda_driver`, `hipLaunchKernel` on ROCm) that shares its `args.correlation` (else the `ac2g` flow between the
  two), so to the cpu_op around the launch and its family. A device event belongs to the step whose host span
  holds its launch (kernels run after their launch, often in the next step's span). The step itself is its
  window on the trace's clock (step_windows): from the end of the step before it to the later of its host span's
  end and its device events' end, so that every µs is in one step and a step's kernels in its own; the device-side
  `ProfilerStep#N` annotation is not used (on ROCm it ends before the step's backward kernels). Op time is the
  device time of the events a family launched, 0 for a family that launched none (the op-time rule, which
  meta.device "GPU" says holds: the host works while the device runs, so its time is no step time of its own
  but where the device waits for it, the step's free time); busy_ms is the union of the device's compute events
  in the window over every stream (kernels overlapping on two streams count once), comm_ms the union of its NCCL
  kernels and comm_exposed_ms the part of it no compute event overlaps, free_ms the window's time no device event
  covers, interval_ms the part of that the host spent waiting for the DataLoader.
The sidecar perfkit_run.json (torch version, threads, batch) is the manifest reader's (manifest.py).
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import tempfile
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.files import open_regular
from ...core.units import NS_PER_US, US_PER_MS
from ..discovery import has_match
from .base import Parts, Reader, TraceFile

if TYPE_CHECKING:
    import pandas as pd

TRACE_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz")
STEP_SPAN = re.compile(r"^ProfilerStep#(\d+)$")
DATA_SPAN = re.compile(r"DataLoader.*__next__")
OPTIMIZER_SPAN = re.compile(r"^Optimizer\.(step|zero_grad)#(?P<cls>\w+)\.")
MODULE_SPAN = "nn.Module: "
# `layer1.0.conv1 (Conv2d)` (perfkit's reference runner) or `Conv2d_17` (torch's with_stack)
NAMED_MODULE = re.compile(r"^(?P<path>\S+) \((?P<cls>[\w.]+)\)$")
AUTOGRAD_WRAPPER = re.compile(r"^(autograd::engine::evaluate_function: .*|\w+Backward\d+)$")
AUTOGRAD_ENGINE = "autograd::engine"
ATEN = "aten::"
OP_CATEGORIES = ("cpu_op", "Operator")  # `Operator` in traces of torch before 1.9
SPAN_CATEGORIES = ("user_annotation", "cpu_instant_event", "python_function")
# Two events nest when the inner one lies within the outer one, up to the µs rounding a writer may apply.
NEST_SLACK_US = 1e-3
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
# the flow from a launch to its device event: `ac2g`, `async_cpu_to_gpu` in older (2022) traces
LAUNCH_FLOWS = ("ac2g", "async_cpu_to_gpu")
# NCCL's kernels (RCCL's on ROCm keep the names): a GPU trace's communication, apart from its compute
COMM_KERNEL = re.compile(r"^nccl", re.IGNORECASE)


def detect(folder: Path) -> bool:
    return has_match(folder, TRACE_PATTERNS)


def trace_files(folder: Path) -> list[Path]:
    return sorted(path for pattern in TRACE_PATTERNS for path in folder.glob(pattern) if path.is_file())


def load_trace(path: Path) -> dict:
    """The trace's top-level object (gzip or plain JSON), through the bounded decoder."""
    try:
        with open_regular(path) as handle:
            raw = handle.read()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise FileFormatError(f"cannot be read ({exc})", path) from None
    try:
        data = boundedjson.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"is not UTF-8 text (offset {exc.start})", path) from None
    except boundedjson.JSONError as exc:
        raise FileFormatError(exc.message, path) from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise FileFormatError("is not a kineto trace (no traceEvents list)", path)
    return data


def trace_rank(data: dict) -> int:
    info = data.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else 0


def read(folder: Path) -> dict[int, Parts]:
    """One Parts per rank (distributedInfo.rank, else 0); of several traces of one rank (schedule cycles), the last
    written, said in a warning."""
    by_rank: dict[int, list[tuple[Path, dict]]] = defaultdict(list)
    skipped: list[str] = []
    for path in trace_files(folder):
        try:
            data = load_trace(path)
        except FileFormatError as exc:
            skipped.append(f"skipped {path.name}: {exc.message}")
            continue
        by_rank[trace_rank(data)].append((path, data))
    if not by_rank:
        raise FileFormatError("holds no readable torch.profiler trace (" + "; ".join(skipped) + ")", folder)
    result = {}
    for rank, traces in by_rank.items():
        traces.sort(key=lambda item: _written_ns(item[0]))
        path, data = traces[-1]
        try:
            parts = read_trace(data)
        except FileFormatError as exc:
            raise FileFormatError(exc.message, path) from None
        parts.sources.append(str(path))
        parts.warnings += skipped
        if len(traces) > 1:
            parts.warnings.append(f"rank {rank}: {len(traces)} torch.profiler traces; read the last written, "
                                  f"{path.name}")
        result[rank] = parts
    return result


def _written_ns(path: Path) -> int:
    """tensorboard_trace_handler names a trace `{worker}.{time_ns}.pt.trace.json`: the time it was written."""
    match = re.search(r"\.(\d+)\.pt\.trace\.json", path.name)
    return int(match.group(1)) if match else 0


@dataclass
class Event:
    """One complete (`ph: X`) event of the trace, with what the nesting tells of it."""

    name: str
    cat: str
    tid: object
    ts: float
    dur: float
    args: dict
    parent: "Event | None" = None
    op_parent: "Event | None" = None  # the nearest enclosing op event
    nested_ops_us: float = 0.0
    family_root: "Event | None" = None
    scope: str | None = None          # module scope, for backward ops the forward op's
    flags: dict = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def is_op(self) -> bool:
        return self.cat in OP_CATEGORIES


@dataclass
class DeviceEvent:
    """One kernel, memcpy or memset on a GPU: its stream, and the host launch and step it belongs to."""

    name: str
    cat: str
    device: object   # the trace's pid of the GPU
    stream: object   # its tid
    ts: float
    dur: float
    correlation: object
    launch: Event | None = None
    step: int | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Trace:
    """A trace's events read and placed: host events (nested, each op's step, pass and scope), the ProfilerStep
    spans, the device events linked to their launches."""

    events: list[Event]
    steps: list[Event]
    device: list[DeviceEvent]
    malformed: int  # complete events left out: a ts or dur that is no finite non-negative number


def analyse(data: dict) -> Trace:
    events, flows, device, launches, malformed = _events(data["traceEvents"])
    events.sort(key=lambda event: (event.ts, -event.dur))  # an enclosing event before the events inside it
    if not any(event.is_op for event in events):
        raise FileFormatError("holds no cpu_op event (was the profiler's CPU activity on?)")
    _nest(events)
    has_modules = any(event.name.startswith(MODULE_SPAN) for event in events)
    _place(events, flows, has_modules)
    steps = [event for event in events if STEP_SPAN.match(event.name)]
    _link(steps, device, launches)
    return Trace(events, steps, device, malformed)


def read_trace(data: dict) -> Parts:
    """A kineto trace's tables (module docstring)."""
    import pandas as pd
    parts = Parts(meta={"layout": "kineto", "framework": "torch", "device": "CPU"})
    trace = analyse(data)
    events, steps, device = trace.events, trace.steps, trace.device
    if trace.malformed:
        parts.warnings.append(f"left out {trace.malformed} events whose ts or dur is not a finite non-negative "
                              f"number")
    if device:
        parts.meta["device"] = "GPU"  # and so op times by the op-time rule
        chip = _device_name(data)
        if chip:
            parts.meta["chip"] = chip
        unlinked = [event for event in device if event.launch is None]
        if unlinked:
            parts.warnings.append(f"{len(unlinked)} of {len(device)} device events have no host launch in the trace "
                                  f"(no matching correlation): placed in the step their own start falls in, in no "
                                  f"op's time")
    if not steps:
        parts.warnings.append("no ProfilerStep#N span (the profiler's step() was never called): the trace is read "
                              "as one step")
    rows = _op_rows(events, device)
    parts.tables["steps"] = _steps(events, steps, device)
    if device and steps:  # the timeline cuts a step where the steps table measured it (io/timeline.py)
        parts.tables["step_times"] = pd.DataFrame(
            [(number, round(begin * NS_PER_US), round(end * NS_PER_US))
             for number, begin, end in step_windows(steps, device)], columns=["step", "begin_ns", "end_ns"])
    if not len(rows):
        parts.warnings.append("no op ran inside a profiled step")
        return parts
    parts.tables["op_type_steps"] = (rows.groupby(["step", "type"], as_index=False)
                                     .agg(total_ms=("total_ms", "sum"), count=("count", "sum")))
    parts.tables["op_types"] = (rows.groupby("type", as_index=False)
                                .agg(total_ms=("total_ms", "sum"), count=("count", "sum")))
    parts.tables["ops"] = _ops(rows)
    return parts


def _events(raw: list) -> tuple[list[Event], dict, list[DeviceEvent], dict, int]:
    """(the X events of ops, spans and launches, {fwdbwd flow id: (start event key, end event key)}, the device
    events, {correlation: its launch}, how many X events were left out for a ts or dur that is no finite
    non-negative number). A device event or launch without `args.correlation` takes the id of the launch flow that
    ends or starts on it (the flow's end binds to the event at its pid, tid and ts)."""
    events, device, starts, ends, flow_ids, malformed = [], [], {}, {}, {}, 0
    unlinked: list[tuple[object, tuple]] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        phase, cat = item.get("ph"), item.get("cat")
        pid, tid, ts = _scalar(item.get("pid")), _scalar(item.get("tid")), item.get("ts")
        if phase in ("s", "f") and cat == "fwdbwd":
            (starts if phase == "s" else ends)[_scalar(item.get("id"))] = (tid, _scalar(ts))
            continue
        if phase in ("s", "f") and cat in LAUNCH_FLOWS:
            flow_ids[(phase, pid, tid, _scalar(ts))] = _scalar(item.get("id"))
            continue
        dur, name = item.get("dur"), item.get("name")
        if phase != "X" or not isinstance(name, str):
            continue
        if not _finite(ts) or not _finite(dur) or dur < 0:
            malformed += 1
            continue
        args = item.get("args") if isinstance(item.get("args"), dict) else {}
        correlation = _scalar(args.get("correlation"))
        if cat in GPU_CATEGORIES:
            device.append(DeviceEvent(name, cat, pid, tid, float(ts), float(dur), correlation))
            if correlation is None:
                unlinked.append((device[-1], ("f", pid, tid, ts)))
        elif cat in OP_CATEGORIES + SPAN_CATEGORIES + LAUNCH_CATEGORIES:
            if cat in LAUNCH_CATEGORIES:
                args = {**args, "correlation": correlation}
            events.append(Event(name, cat, tid, float(ts), float(dur), args))
            if cat in LAUNCH_CATEGORIES and correlation is None:
                unlinked.append((events[-1], ("s", pid, tid, ts)))
    for event, key in unlinked:
        if isinstance(event, DeviceEvent):
            event.correlation = flow_ids.get(key)
        elif key in flow_ids:
            event.args = {**event.args, "correlation": flow_ids[key]}
    launches = {event.args["correlation"]: event for event in events
                if event.cat in LAUNCH_CATEGORIES and event.args.get("correlation") is not None}
    flows = {key: (starts[key], ends[key]) for key in starts.keys() & ends.keys()}
    return events, flows, device, launches, malformed


def _scalar(value):
    """A trace's id, pid, tid or timestamp as a key: a number or a string; anything else (a list, an object, a
    boolean a hostile writer put there) as absent."""
    return value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _nest(events: list[Event]) -> None:
    """Each event's enclosing event on its thread, its nearest enclosing op, and each op's nested op time."""
    by_thread: dict[object, list[Event]] = defaultdict(list)
    for event in events:
        by_thread[event.tid].append(event)
    for thread in by_thread.values():
        stack: list[Event] = []
        for event in thread:
            while stack and event.ts >= stack[-1].end - NEST_SLACK_US:
                stack.pop()
            while stack and event.end > stack[-1].end + NEST_SLACK_US:
                stack.pop()  # overlaps its would-be parent without nesting: not its child
            event.parent = stack[-1] if stack else None
            event.op_parent = next((outer for outer in reversed(stack) if outer.is_op), None)
            if event.is_op and event.op_parent is not None:
                event.op_parent.nested_ops_us += event.dur
            stack.append(event)


def _place(events: list[Event], flows: dict, has_modules: bool) -> None:
    """Each op's family op, step, pass and module scope (module docstring)."""
    by_start = {(event.tid, event.ts): event for event in events if event.is_op}
    for event in events:  # in start order: an event's parent is placed before it
        context = dict(event.parent.flags) if event.parent is not None else {"modules": ()}
        step = STEP_SPAN.match(event.name)
        if step:
            context["step"] = int(step.group(1))
        elif DATA_SPAN.search(event.name):
            context["data"] = True
        elif OPTIMIZER_SPAN.match(event.name):
            # a Cell of its own, as MindSpore's `optimizer-Adam` scope: the optimizer's class names it
            context["optimizer"] = True
            context["modules"] = (f"optimizer-{OPTIMIZER_SPAN.match(event.name)['cls']}",)
        elif event.name.startswith(MODULE_SPAN):
            context["modules"] = context["modules"] + (event.name[len(MODULE_SPAN):],)
        elif event.is_op and AUTOGRAD_WRAPPER.match(event.name):
            context["backward"] = True
        event.flags = context
    steps = [(event.ts, event.end, event.flags["step"]) for event in events if STEP_SPAN.match(event.name)]
    for event in events:
        if "step" not in event.flags and event.is_op:  # another thread's op (autograd, a GPU stream's launcher)
            event.flags["step"] = next((number for start, end, number in steps if start <= event.ts < end), None)
            if event.flags["step"] is None:
                del event.flags["step"]
    for event in (event for event in events if event.is_op):
        outer = event.op_parent.family_root if event.op_parent is not None else None
        if outer is not None and outer.name.startswith(ATEN):
            event.family_root = outer
        elif event.name.startswith(ATEN) or not AUTOGRAD_WRAPPER.match(event.name):
            event.family_root = event
        else:
            event.family_root = outer or event
        event.scope = _scope(event.flags["modules"])
    for start, end in flows.values():
        forward, backward = by_start.get(start), by_start.get(end)
        if forward is None or backward is None:
            continue
        top = backward
        while top.op_parent is not None:
            top = top.op_parent
        top.flags["forward_scope"] = forward.scope
    for event in events:
        if event.is_op and event.flags.get("backward"):
            top = event
            while top.op_parent is not None:
                top = top.op_parent
            event.scope = top.flags.get("forward_scope", event.scope)
    for event in events:
        flags = event.flags
        if flags.get("backward"):
            flags["pass"] = "backward"
        elif flags.get("optimizer"):
            flags["pass"] = "optimizer"
        elif has_modules and not flags["modules"]:
            flags["pass"] = "other"
        else:
            flags["pass"] = "forward"


def _link(steps: list[Event], device: list[DeviceEvent], launches: dict) -> None:
    """Each device event's launch and step: the step whose host span holds its launch (a kernel runs after it, often
    in the next step's span); with no launch, the step its own start falls in; step 0 in a trace without steps."""
    spans = sorted((span.ts, span.end, span.flags["step"]) for span in steps)
    starts = [start for start, _, _ in spans]
    for event in device:
        event.launch = launches.get(event.correlation) if event.correlation is not None else None
        if not spans:
            event.step = 0
            continue
        at = event.launch.ts if event.launch is not None else event.ts
        index = bisect.bisect_right(starts, at) - 1
        event.step = spans[index][2] if index >= 0 and at < spans[index][1] else None


def _row_root(event: Event) -> Event:
    """The op whose row an op's time goes to: an autograd wrapper its own, any other op its family's."""
    return event if AUTOGRAD_WRAPPER.match(event.name) else event.family_root


def _device_name(data: dict) -> str | None:
    properties = data.get("deviceProperties")
    first = properties[0] if isinstance(properties, list) and properties else None
    name = first.get("name") if isinstance(first, dict) else None
    return name if isinstance(name, str) and name else None


def _scope(modules: tuple[str, ...]) -> str:
    """Module spans as a Cell scope, `ResNet50/layer1-Sequential/0-Bottleneck/conv1-Conv2d` (core/scopes.py reads
    `name-Class` components): each named span's last path part and class, a root or unnamed span as written."""
    parts = []
    for module in modules:
        named = NAMED_MODULE.match(module)
        parts.append(f"{named['path'].rsplit('.', 1)[-1]}-{named['cls']}" if named else module.replace("/", "."))
    return "/".join(parts)


def family_name(event: Event) -> str:
    return AUTOGRAD_ENGINE if AUTOGRAD_WRAPPER.match(event.name) else event.name


def _op_rows(events: list[Event], device: list[DeviceEvent]) -> pd.DataFrame:
    """One row per family op execution inside a step and outside data loading: by the op-time rule (module
    docstring) on a GPU trace the device time of the events its ops launched, on a CPU trace its self time summed
    over the ops under it (ms); with the step, pass, scope and shapes; the autograd engine's wrappers a row each."""
    import pandas as pd
    totals: dict[int, float] = defaultdict(float)
    roots: dict[int, Event] = {}
    one_step = not any(STEP_SPAN.match(event.name) for event in events)
    for event in events:
        if not event.is_op or event.flags.get("data") or ("step" not in event.flags and not one_step):
            continue
        root = _row_root(event)
        roots[id(root)] = root
        totals[id(root)] += event.dur - event.nested_ops_us
    device_us: dict[int, float] = defaultdict(float)
    for event in device:
        if event.launch is not None and event.launch.op_parent is not None:
            device_us[id(_row_root(event.launch.op_parent))] += event.dur
    if device:  # the op-time rule: a GPU step's ms are the device's; host work overlaps them
        totals = {key: device_us[key] for key in roots}
    rows = []
    for key, root in roots.items():
        dims, types = root.args.get("Input Dims"), root.args.get("Input type")
        rows.append({"step": root.flags.get("step", 0), "type": family_name(root), "pass": root.flags["pass"],
                     "name": (root.scope + "/" if root.scope else "") + family_name(root),
                     "total_ms": totals[key] / US_PER_MS, "count": 1,
                     "input_shapes": _shapes(dims), "input_dtypes": _dtypes(types)})
    return pd.DataFrame(rows, columns=["step", "type", "pass", "name", "total_ms", "count", "input_shapes",
                                       "input_dtypes"])


def _shapes(dims) -> str | None:
    """`Input Dims` [[8, 3, 32, 32], [64, 3, 7, 7], []] -> "8,3,32,32;64,3,7,7;" (ops' input_shapes form)."""
    if not isinstance(dims, list):
        return None
    return ";".join(",".join(str(n) for n in dim) if isinstance(dim, list) else "" for dim in dims)


def _dtypes(types) -> str | None:
    return ";".join(str(kind) for kind in types) if isinstance(types, list) else None


def _ops(rows: pd.DataFrame) -> pd.DataFrame:
    grouped = rows.groupby(["name", "pass"], as_index=False, sort=False)
    ops = grouped.agg(type=("type", "first"), total_ms=("total_ms", "sum"), count=("count", "sum"),
                      max_ms=("total_ms", "max"), min_ms=("total_ms", "min"),
                      input_shapes=("input_shapes", "first"), input_dtypes=("input_dtypes", "first"))
    ops["avg_ms"] = ops["total_ms"] / ops["count"]
    return ops


def _steps(events: list[Event], steps: list[Event], device: list[DeviceEvent]) -> pd.DataFrame:
    """Per step: total (the span), interval (data wait), tail (after the last backward op), busy (op time on the
    step's threads, their union) on a CPU trace; on a GPU trace the same over the step's window (step_windows)."""
    import pandas as pd
    ops = [event for event in events if event.is_op and event.op_parent is None and not event.flags.get("data")]
    data = [event for event in events if DATA_SPAN.search(event.name)
            and not (event.parent is not None and event.parent.flags.get("data"))]
    if not steps:
        begin = min(event.ts for event in events)
        steps = [Event("ProfilerStep#0", "user_annotation", None, begin, max(e.end for e in events) - begin, {})]
    if device:
        return _device_steps(ops, data, steps, device)
    rows = []
    for span in steps:
        number = int(STEP_SPAN.match(span.name).group(1))
        inside = [event for event in ops if span.ts <= event.ts < span.end]
        waits = sum(min(event.end, span.end) - event.ts for event in data if span.ts <= event.ts < span.end)
        backward_ends = [event.end for event in inside if event.flags["pass"] == "backward"]
        tail = span.end - max(backward_ends) if backward_ends else float("nan")
        total = span.dur
        rows.append({"step": number, "total_ms": total / US_PER_MS, "interval_ms": waits / US_PER_MS,
                     "tail_ms": tail / US_PER_MS, "fwd_bwd_ms": (total - waits - tail) / US_PER_MS,
                     "busy_ms": covered_us((event.ts, min(event.end, span.end)) for event in inside) / US_PER_MS})
    return pd.DataFrame(rows)


def step_windows(steps: list[Event], device: list[DeviceEvent]) -> list[tuple[int, float, float]]:
    """A GPU trace's steps as [(step, begin, end)] in µs, one window after the other: a step ends where the later
    of its host span and the device events it launched ends (never before the step before it), and begins where
    the step before it ended (the first: at its host span's start). Every µs from the first step's start to the
    last step's end lies in one window, and a step's kernels in its own (docs/formats.md §5)."""
    device_end: dict[int | None, float] = defaultdict(lambda: float("-inf"))
    for event in device:
        device_end[event.step] = max(device_end[event.step], event.end)
    windows, reach = [], None
    for span in sorted(steps, key=lambda span: span.ts):
        number = int(STEP_SPAN.match(span.name).group(1))
        begin = span.ts if reach is None else reach
        reach = max(span.end, device_end[number], begin)
        windows.append((number, begin, reach))
    return windows


def _device_steps(ops: list[Event], data: list[Event], steps: list[Event],
                  device: list[DeviceEvent]) -> pd.DataFrame:
    """A GPU trace's steps over their windows (step_windows), in ms: busy = the compute device events' union over
    every stream, comm = the NCCL kernels' union, comm_exposed = the part of comm no compute event overlaps, free =
    the window's time no device event covers (GPU idle), interval = the part of the free time the host spent in
    the DataLoader's `__next__` (the GPU waiting for data), tail = the device events' union after the end of the
    step's last backward work (its backward ops' kernels and host time), comm_tail = the NCCL kernels' union there,
    fwd_bwd = the rest. Busy + comm_exposed + free = total; the ledger's optimizer, tail less comm_tail, is the
    device's compute after backward."""
    import pandas as pd
    backward_kernels: dict[int | None, list[DeviceEvent]] = defaultdict(list)
    for event in device:
        op = event.launch.op_parent if event.launch is not None else None
        if op is not None and op.flags.get("pass") == "backward":
            backward_kernels[event.step].append(event)
    compute = [event for event in device if not COMM_KERNEL.match(event.name)]
    comm = [event for event in device if COMM_KERNEL.match(event.name)]
    rows = []
    for number, begin, end in step_windows(steps, device):
        computing, communicating = _clipped(compute, begin, end), _clipped(comm, begin, end)
        busy, comm_us = covered_us(computing), covered_us(communicating)
        covered = covered_us(computing + communicating)
        waits = covered_us(computing + communicating + _clipped(data, begin, end)) - covered
        backward_ends = [event.end for event in backward_kernels[number]] + [
            event.end for event in ops if event.flags.get("step") == number and event.flags["pass"] == "backward"]
        after = max(backward_ends, default=end)
        # the device's work after backward, not the stretch: the GPU idle in it is free time, the host's
        tail = covered_us(_clipped(device, after, end)) if backward_ends else float("nan")
        comm_tail = covered_us(_clipped(comm, after, end)) if backward_ends else float("nan")
        total = end - begin
        rows.append({"step": number, "total_ms": total / US_PER_MS, "interval_ms": waits / US_PER_MS,
                     "tail_ms": tail / US_PER_MS, "fwd_bwd_ms": (total - waits - tail) / US_PER_MS,
                     "busy_ms": busy / US_PER_MS, "free_ms": (total - covered) / US_PER_MS,
                     "comm_ms": comm_us / US_PER_MS, "comm_exposed_ms": (covered - busy) / US_PER_MS,
                     "comm_tail_ms": comm_tail / US_PER_MS})
    return pd.DataFrame(rows)


def _clipped(items: list, begin: float, end: float) -> list[tuple[float, float]]:
    """The (start, end) of the events or device events that meet [begin, end), cut to it."""
    return [(max(item.ts, begin), min(item.end, end)) for item in items if item.ts < end and item.end > begin]


def covered_us(intervals) -> float:
    """The time the (start, end) intervals cover, each instant once however many of them hold it."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        start = max(start, reach)
        if end > start:
            covered += end - start
            reach = end
    return covered


def device_activity(data: dict) -> pd.DataFrame:
    """One row per device event of a kineto trace (kernel, memcpy, memset): its step (by its launch), name,
    category, device, stream, start and duration (µs on the trace's clock), and the family, pass and scope of the op
    that launched it (empty where no op encloses the launch): the kernels behind each family's device time."""
    import pandas as pd
    trace = analyse(data)
    rows = []
    for event in trace.device:
        op = event.launch.op_parent if event.launch is not None else None
        root = _row_root(op) if op is not None else None
        rows.append({"step": event.step, "name": event.name, "category": event.cat, "device": event.device,
                     "stream": event.stream, "ts_us": event.ts, "dur_us": event.dur,
                     "launch": event.launch.name if event.launch is not None else None,
                     "family": family_name(root) if root is not None else None,
                     "pass": root.flags["pass"] if root is not None else None,
                     "scope": root.scope if root is not None else None})
    return pd.DataFrame(rows, columns=["step", "name", "category", "device", "stream", "ts_us", "dur_us", "launch",
                                       "family", "pass", "scope"])


def _timeline_events(path: Path, each, stats, progress, workers):
    """The trace's events for the timeline (base.TraceFile.events): its traceEvents written out as the JSON array
    trace_json reads block by block; progress in bytes of the (compressed) trace file."""
    from ..trace_json import map_blocks  # the timeline's reader: loading a Run never needs it

    events = load_trace(path)["traceEvents"]
    with tempfile.TemporaryDirectory(prefix="perfkit_kineto_") as scratch:
        array = Path(scratch) / "events.json"
        array.write_text(json.dumps(events), encoding="utf-8")
        scale = path.stat().st_size / max(1, array.stat().st_size)
        done = None if progress is None else (lambda read: progress(int(read * scale)))
        yield from map_blocks(array, each, stats, done, workers)


def traces(folder: Path) -> list[TraceFile]:
    """Each rank's last written trace (read's choice)."""
    chosen: dict[int, Path] = {}
    for path in sorted(trace_files(folder), key=_written_ns):
        try:
            chosen[trace_rank(load_trace(path))] = path
        except FileFormatError:
            continue
    return [TraceFile(rank=rank, path=path, folder=folder, events=_timeline_events)
            for rank, path in sorted(chosen.items())]


READER = Reader(name="kineto", provides=frozenset({"op_types", "ops", "steps", "op_type_steps", "step_times"}),
                detect=detect, read=read, looks_for="*.pt.trace.json[.gz] (torch.profiler)", ops_cover_device=True,
                traces=traces)
