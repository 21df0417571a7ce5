"""The distribution modes, one module each (trainer.modes.base says what a mode is).

Every module of this package is imported on the first lookup, and the modes it
registers become choices of the `distribution` hyperparameter: adding a mode is adding
a module.
"""
from __future__ import annotations

import importlib
import pkgutil

from trainer.modes.base import REGISTERED, Mode

_discovered = False


def _discover() -> None:
    global _discovered
    if not _discovered:
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
        _discovered = True


def all_modes() -> list[Mode]:
    """Every registered mode, by name."""
    _discover()
    return [REGISTERED[name] for name in sorted(REGISTERED)]


def names() -> tuple[str, ...]:
    _discover()
    return tuple(sorted(REGISTERED))


def get(name: str) -> Mode:
    _discover()
    return REGISTERED[name]


def runtime_for(plan, process, hyperparameters):
    return get(plan.mode).runtime(plan, process, hyperparameters)
