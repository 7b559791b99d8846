"""Unit conversions, defined once: every reader converts the files' units to the model's (ms, MB) with these.

The profiler files use ns (msprof databases, step files, GPU per-step traces), µs (trace JSON, CSVs, GetNext on
Ascend, memory records), 10-ns ticks (step_trace_raw and GPU per-marker step traces) and bytes or KB (memory);
docs/formats.md lists which file uses which. "MB" is 1024 * 1024 bytes, as MindSpore and msprof count it.

Integers where the value is an integer: `int_ns / NS_PER_US` stays exact in Python and in Arrow's integer
division (a float divisor would first round a 1.7e18 ns timestamp to a double).
"""

NS_PER_US = 1000
US_PER_MS = 1000.0
NS_PER_MS = NS_PER_US * US_PER_MS
MS_PER_S = 1000.0
# step_trace_raw and the GPU per-marker step trace count 10 ns ticks
TICKS_PER_US = 100.0
TICKS_PER_MS = TICKS_PER_US * US_PER_MS
KB_PER_MB = 1024
BYTES_PER_MB = 1024 * KB_PER_MB
FLOP_PER_GFLOP = 1e9
FLOP_PER_TFLOP = 1e12
GFLOP_PER_TFLOP = FLOP_PER_TFLOP / FLOP_PER_GFLOP
HZ_PER_MHZ = 1e6
