"""Algorithms by name: each is one folder whose ``builder.py`` makes its parts (``muzero.core``).

    algorithms.get("vtrace") -> Builder      (imports that algorithm's modules on first use)
    algorithms.names()       -> ["muzero", "ppo", "r2d2", "sac", "vtrace"]

Adding an algorithm: write ``muzero/algorithms/<name>/{config,networks,learning,builder}.py``
(see docs/ARCHITECTURE.md, "Adding an algorithm") and list its builder here.
Importing this package imports no TensorFlow.
"""
from __future__ import annotations

import importlib

# name -> "module:attribute" of the Builder instance
_BUILDERS = {
    "muzero": "muzero.algorithms.muzero.builder:BUILDER",
    "ppo": "muzero.algorithms.ppo.builder:BUILDER",
    "r2d2": "muzero.algorithms.r2d2.builder:BUILDER",
    "sac": "muzero.algorithms.sac.builder:BUILDER",
    "vtrace": "muzero.algorithms.vtrace.builder:BUILDER",
}


class UnknownAlgorithmError(ValueError):
    """No algorithm of that name."""


def names() -> list:
    return sorted(_BUILDERS)


def accepting(descriptor) -> list:
    """Names of the algorithms whose builder accepts an env with this descriptor."""
    return [n for n in names() if get(n).refusal(descriptor) is None]


def get(name: str):
    """The Builder of algorithm ``name``; UnknownAlgorithmError lists the known ones."""
    if name not in _BUILDERS:
        raise UnknownAlgorithmError(f"--algo={name!r} is not a known algorithm; known: {', '.join(names())}")
    module, attribute = _BUILDERS[name].split(":")
    return getattr(importlib.import_module(module), attribute)
