"""A module that is also its main function: `perfkit.timeline(run, step=N)`, `perfkit.ledger(run)`.

The public function shares its module's name, and importing the module sets the package attribute to the
module; making the module callable keeps both `perfkit.ledger(run)` and `perfkit.ledger.bound` working.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable


def make_callable(module_name: str, function: Callable[..., Any]) -> None:
    """Calling module `module_name` calls `function`."""
    class CallableModule(types.ModuleType):
        __doc__ = sys.modules[module_name].__doc__

        def __call__(self, *args, **kwargs):
            return function(*args, **kwargs)

    sys.modules[module_name].__class__ = CallableModule
