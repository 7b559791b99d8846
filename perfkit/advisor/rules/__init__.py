"""perfkit's own rules, one module per concern. Importing this package registers them all in registry.RULES, in
the order of the modules imported below (the order `advise` lists the rules it could not check or that found
nothing).

A new rule is one function with `@rule` in the module of its concern; a new concern is one module added to the
import line here.
"""

from ..registry import RULES
from . import communication, compute, data, memory, mode, steps

__all__ = ["RULES", "data", "compute", "communication", "memory", "steps", "mode"]
