"""Put first on PYTHONPATH by `perfkit profile -- python train.py`: Python imports this at start-up, before
the user's script, which lets perfkit profile the script without a change to it (perfkit/profiler/attach.py,
attach()), and `perfkit tune` apply a setting to it (perfkit/profiler/tune_hook.py, install()). Any other
sitecustomize on the path is imported after, as it would have been without us.
"""

import importlib
import os
import sys

if os.environ.get("PERFKIT_SCRIPT_RUN"):
    from perfkit.profiler.attach import attach

    attach()

if os.environ.get("PERFKIT_TUNE"):  # perfkit tune's experiment: its changes, applied once MindSpore is imported
    from perfkit.profiler.tune_hook import install

    install()

_here = os.path.dirname(os.path.abspath(__file__))
_ours = sys.modules.pop(__name__)
_saved_path = list(sys.path)
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != _here]
try:
    importlib.import_module("sitecustomize")
except ImportError:
    sys.modules[__name__] = _ours
finally:
    sys.path[:] = _saved_path
