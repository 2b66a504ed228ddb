"""A private copy of :mod:`fuzzkit.targets.scute.slots` for the strategy and the size measures.

Why: the mutants patch attributes of ``fuzzkit.targets.scute.slots`` (a DoRA norm over the wrong axis,
alpha applied twice, an IA3 placement swapped...).  The strategy converts adapters to slot form
too -- :mod:`.fit` scales a drawn case into the contract's range by looking at its slot
parameters -- and a case drawn under a mutant must still be a legal case of the *real*
contract (it is saved as a regression that must pass on the real implementation), nor may the
strategy crash where the mutated conversion crashes (the implementation must, so that the crash
is found).  So the strategy reads a second, unpatched instance of the same module, loaded from
the same file under another name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from fuzzkit.targets.scute import slots as _slots

_NAME = "fuzzkit.targets.scute._slots_pristine"


def slots() -> ModuleType:
    """The unpatched slot conversion (built once from the source of :mod:`.slots`).

    Compiled under its own file name, so ``--coverage`` (which measures ``slots.py`` for the
    implementations) does not count what the strategy runs."""
    module = sys.modules.get(_NAME)
    if module is None:
        path = Path(_slots.__file__)
        module = ModuleType(_NAME, _slots.__doc__)
        module.__file__ = f"{path} (pristine copy)"
        sys.modules[_NAME] = module
        exec(compile(path.read_text(), module.__file__, "exec"), module.__dict__)
    return module


__all__ = ["slots"]
