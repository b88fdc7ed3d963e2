"""Prioritized MuZero replay: segments stored once, sum-tree sampling, sample-time targets.

Public names: ``Replay`` (insert / sample / update_priorities / snapshot / restore),
``ReplayClosedError``, ``SnapshotError``. See docs/REPLAY.md.

Imports NumPy, Numba, ``envs.base``, ``muzero.config`` and ``muzero.observation``;
never TensorFlow.
"""
from muzero.replay.replay import Replay, ReplayClosedError, ValuesFn
from muzero.replay.snapshot import SnapshotError

__all__ = ["Replay", "ReplayClosedError", "SnapshotError", "ValuesFn"]
