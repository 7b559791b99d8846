"""Run a PyTorch training script under torch.profiler, for `perfkit profile --reference -- python ref_train.py`.

perfkit/profiler/reference.py runs `python [options] reference_main.py ref_train.py [args…]`: this file, standalone
(it imports neither perfkit nor anything but the standard library and torch, so it runs in whichever Python holds
torch), runs the user's script unchanged as `__main__` with:
- torch.profiler on the CPU (and CUDA where the script's process sees a GPU) with the schedule
  wait/warmup/active from PERFKIT_REFERENCE_SCHEDULE, its trace written by tensorboard_trace_handler;
- a step ended (`prof.step()`) as each optimizer's step() returns (its __init__ wraps the instance's step);
- each nn.Module's forward inside a `nn.Module: <path> (<Class>)` span (global forward hooks; torch's own
  with_modules records none in eager mode), the path as named_modules() names it under the first module called;
- the first torch.amp.GradScaler made (its __init__ wrapped): its device, whether enabled, its initial scale and
  growth settings (loss scaling; torch.cuda.amp.GradScaler is one too);
- at exit, the sidecar perfkit_run.json (docs/migration.md): versions, threads, CPU capability, batch and image size
  taken from the first tensor the first module was called with, the loss scaler.
"""

import json
import os
import platform
import runpy
import sys
import time

OUTPUT = os.environ.get("PERFKIT_REFERENCE_OUTPUT", "./profiler_reference")
SCHEDULE = tuple(int(n) for n in os.environ.get("PERFKIT_REFERENCE_SCHEDULE", "1,1,3").split(","))
MANIFEST = "perfkit_run.json"
MODULE_SPAN = "nn.Module: "
# Environment variables that change which kernels torch's CPU backend runs: recorded, as a setting of the run.
SETTING_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def main() -> None:
    script, args = sys.argv[1], sys.argv[2:]
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    os.makedirs(OUTPUT, exist_ok=True)
    wait, warmup, active = SCHEDULE
    facts = {"batch_size": None, "image_size": None, "input_shape": None, "steps_ended": 0, "loss_scale": None}
    names: dict[int, str] = {}
    spans: list = []

    def enter(module, inputs):
        key = id(module)
        if key not in names:  # the first call of a module no earlier root holds: a root, named with its children
            names[key] = type(module).__name__
            for path, child in module.named_modules():
                if path:
                    names.setdefault(id(child), f"{path} ({type(child).__name__})")
            first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
            if facts["input_shape"] is None and first is not None and first.dim() >= 1:
                facts["input_shape"] = list(first.shape)
                facts["batch_size"] = int(first.shape[0])
                facts["image_size"] = int(first.shape[-1]) if first.dim() == 4 else None
        span = record_function(MODULE_SPAN + names[key])
        span.__enter__()
        spans.append(span)

    def leave(module, inputs, output):
        if spans:
            spans.pop().__exit__(None, None, None)

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    profiler = profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                       on_trace_ready=tensorboard_trace_handler(OUTPUT, use_gzip=True), record_shapes=True)

    original_init = torch.optim.Optimizer.__init__

    def init_then_step_profiler(optimizer, *args, **kwargs):
        """Each optimizer's step() ends a profiler step once it has returned: a global step post-hook runs inside
        the `Optimizer.step#` span, which would then straddle two ProfilerStep spans."""
        original_init(optimizer, *args, **kwargs)
        stepped = optimizer.step

        def step_then_end(*step_args, **step_kwargs):
            result = stepped(*step_args, **step_kwargs)
            facts["steps_ended"] += 1
            profiler.step()
            return result
        optimizer.step = step_then_end

    original_scaler_init = torch.amp.GradScaler.__init__

    def init_and_record(scaler, *args, **kwargs):
        original_scaler_init(scaler, *args, **kwargs)
        if facts["loss_scale"] is None:
            facts["loss_scale"] = {
                "scaler": type(scaler).__name__, "device": str(getattr(scaler, "_device", "")) or None,
                "enabled": bool(scaler.is_enabled()), "scale": float(scaler.get_scale()),
                "growth_factor": float(scaler.get_growth_factor()),
                "backoff_factor": float(scaler.get_backoff_factor()),
                "growth_interval": int(scaler.get_growth_interval())}

    torch.amp.GradScaler.__init__ = init_and_record
    torch.nn.modules.module.register_module_forward_pre_hook(enter)
    torch.nn.modules.module.register_module_forward_hook(leave)
    torch.optim.Optimizer.__init__ = init_then_step_profiler
    started = time.time()
    status, error = "ok", None
    sys.argv = [script] + args
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with profiler:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            status, error = "failed", f"exit {exc.code}"
            raise
    except BaseException as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _write_manifest(torch, facts, activities, status, error, started, (wait, warmup, active))


def _write_manifest(torch, facts: dict, activities: list, status: str, error, started: float, steps) -> None:
    device = "GPU" if len(activities) > 1 else "CPU"
    config = {
        "framework": "torch",
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "mode": "eager",
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "batch_size": facts["batch_size"],
        "image_size": facts["image_size"],
        "input_shape": facts["input_shape"],
        "schedule": dict(zip(("wait", "warmup", "active"), steps)),
        "steps_ended": facts["steps_ended"],
        "loss_scale": facts["loss_scale"] or {"scaler": None},
    }
    manifest = {
        "framework": "torch", "device": device, "rank": 0, "status": status, "error": error, "config": config,
        "env": {key: os.environ[key] for key in SETTING_ENV if key in os.environ},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "notes": [] if facts["steps_ended"] else [
            "the script never called an optimizer's step(): no step was ended, the profiler recorded none"],
    }
    with open(os.path.join(OUTPUT, MANIFEST), "w", encoding="utf-8") as out:
        json.dump(manifest, out, indent=1)


if __name__ == "__main__":
    main()
