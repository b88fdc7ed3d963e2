"""The trajectory-replay kit: frames stored once, sum-tree priorities, a samples-per-insert
limiter and crash-safe snapshots.

``store.TrajectoryStore`` (segments in ring buffers, each frame once), ``sum_tree.SumTree``,
``rate_limiter.SampleToInsertRatio`` and ``snapshot`` (write / read a checksummed snapshot
directory). MuZero's replay (``muzero.algorithms.muzero.replay.Replay``) builds its
sample-time targets on top of them. See docs/REPLAY.md.

Imports NumPy, Numba and ``envs.base``; never TensorFlow.
"""
from muzero.replay.snapshot import SnapshotError

__all__ = ["SnapshotError"]
