"""A plain Model.train script, as a user writes it (no perfkit in it). `--exit N` exits with N after training,
`--crash` raises in the middle of training, `--os-exit-at N` ends the process with os._exit(0) at step N (no
atexit, no profiler analysis), `--epochs N` trains longer, `--data-parallel` trains data parallel under msrun, `--step-timer`
times the steps with perfkit.StepTimer and prints how many it timed, `--bad-data` gives Model.train a
dataset whose samples MindSpore cannot batch (its own error, raised inside Model.train before the first step),
`--recovered-error` prints an exception through sys.excepthook and trains on, as an extension module's PyErr_Print
does for an error it recovers from (MindSpore's "Numpy init failed" on NumPy 2)."""

import argparse
import os
import sys

import mindspore as ms
from common import model, tiny_dataset, tiny_network
from mindspore.train import Callback

parser = argparse.ArgumentParser()
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--crash", action="store_true")
parser.add_argument("--os-exit-at", type=int)
parser.add_argument("--data-parallel", action="store_true")
parser.add_argument("--step-timer", action="store_true")
parser.add_argument("--bad-data", action="store_true")
parser.add_argument("--recovered-error", action="store_true")
args = parser.parse_args()


class CrashAtStep3(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == 3:
            raise RuntimeError("the user's bug at step 3")


class OsExitAtStep(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == args.os_exit_at:
            os._exit(0)


ms.set_context(mode=ms.GRAPH_MODE)
if args.recovered_error:
    try:
        raise ImportError("a module that was compiled using NumPy 1.x cannot be run in NumPy 2")
    except ImportError:
        sys.excepthook(*sys.exc_info())
shards, shard_id = 1, 0
if args.data_parallel:
    from mindspore.communication import get_group_size, get_rank, init
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    shards, shard_id = get_group_size(), get_rank()
trainer = model(tiny_network())
callbacks = [CrashAtStep3()] if args.crash else []
if args.os_exit_at:
    callbacks.append(OsExitAtStep())
if args.step_timer:
    import perfkit
    timer = perfkit.StepTimer()
    callbacks.append(timer)
data = tiny_dataset(shards, shard_id)
if args.bad_data:  # samples of different lengths: batch() fails in MindData's pipeline
    import mindspore.dataset as ds
    import numpy as np
    data = ds.GeneratorDataset([(np.zeros(n, np.float32), np.array(0, np.int32)) for n in (16, 8)],
                               ["x", "y"], shuffle=False).batch(2)
trainer.train(args.epochs, data, callbacks=callbacks or None, dataset_sink_mode=False)
print("trained")
if args.step_timer:
    print(f"timed {len(timer.steps)} steps")
sys.exit(args.exit)
