"""Sum tree over replay positions for proportional prioritized sampling (Numba).

The tree is one flat float64 array ``tree [2 * P]`` where ``P`` is the number of
leaves rounded up to a power of two. Node 1 is the root, node ``i`` has children
``2i`` and ``2i + 1``, and leaf ``j`` (a replay slot) lives at node ``P + j``.
Node 0 is unused. Every internal node is recomputed as the exact sum of its two
children (never updated by deltas), so the tree is a pure function of its leaves
and cannot drift.

A leaf holds the sampling weight of one position: ``priority ** alpha`` for a
sampleable position and 0 for an empty or unsampleable one. Sampling descends
from the root and only ever enters a child whose sum is positive, so a zero leaf
is never returned, even when floating-point rounding puts ``u`` at the edge.

Imports only NumPy and Numba; never TensorFlow.
"""
from __future__ import annotations

import numba
import numpy as np

_CACHE = True


def num_leaves_for(capacity: int) -> int:
    """Smallest power of two >= capacity (at least 1)."""
    p = 1
    while p < capacity:
        p *= 2
    return p


@numba.njit(cache=_CACHE)
def set_leaves(tree, slots, weights):
    """Sets leaf weights and recomputes their ancestors.

    Args:
      tree: [2P] float64, modified in place.
      slots: [M] int64 leaf indices in [0, P).
      weights: [M] float64, >= 0. A slot repeated in ``slots`` keeps its last weight.
    """
    p = tree.shape[0] // 2
    for m in range(slots.shape[0]):
        node = p + slots[m]
        tree[node] = weights[m]
        node //= 2
        while node >= 1:
            tree[node] = tree[2 * node] + tree[2 * node + 1]
            node //= 2


@numba.njit(cache=_CACHE)
def find_leaves(tree, targets):
    """For each target mass ``u`` in [0, total), the leaf whose prefix interval holds it.

    Args:
      tree: [2P] float64 with a positive root.
      targets: [B] float64.

    Returns:
      [B] int64 leaf indices, each with a positive weight.
    """
    p = tree.shape[0] // 2
    out = np.empty(targets.shape[0], dtype=np.int64)
    for b in range(targets.shape[0]):
        u = targets[b]
        node = 1
        while node < p:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            if (u < left and left > 0.0) or right <= 0.0:
                node = 2 * node
            else:
                u -= left
                node = 2 * node + 1
        out[b] = node - p
    return out


class SumTree:
    """Leaf weights over ``capacity`` slots with O(log P) update and sampling."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"SumTree capacity={capacity} must be >= 1")
        self.capacity = int(capacity)
        self.num_leaves = num_leaves_for(self.capacity)
        self.tree = np.zeros(2 * self.num_leaves, dtype=np.float64)  # [2P]

    @property
    def total(self) -> float:
        return float(self.tree[1])

    @property
    def nbytes(self) -> int:
        return int(self.tree.nbytes)

    def leaves(self) -> np.ndarray:
        """[capacity] float64 view of the leaf weights."""
        return self.tree[self.num_leaves:self.num_leaves + self.capacity]

    def set(self, slots: np.ndarray, weights: np.ndarray) -> None:
        """Sets weights ([M] >= 0) at slots ([M] in [0, capacity))."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        weights = np.ascontiguousarray(weights, dtype=np.float64)
        if slots.shape != weights.shape:
            raise ValueError(f"slots {slots.shape} and weights {weights.shape} differ in shape")
        if slots.size and (slots.min() < 0 or slots.max() >= self.capacity):
            raise ValueError(f"slots must lie in [0, {self.capacity}), got [{slots.min()}, {slots.max()}]")
        if weights.size and not (np.all(np.isfinite(weights)) and weights.min() >= 0.0):
            raise ValueError("sum-tree weights must be finite and >= 0")
        set_leaves(self.tree, slots, weights)

    def sample(self, uniforms: np.ndarray) -> np.ndarray:
        """Leaves for uniforms in [0, 1): [B] float -> [B] int64 slots, P(slot) = w / total."""
        total = self.tree[1]
        if not total > 0.0:
            raise ValueError("cannot sample from a sum tree whose total weight is 0")
        targets = np.minimum(np.asarray(uniforms, dtype=np.float64) * total,
                             np.nextafter(total, 0.0))
        return find_leaves(self.tree, targets)

    def rebuild(self) -> None:
        """Recomputes every internal node from the leaves (after loading leaves in bulk)."""
        p = self.num_leaves
        level_start = p
        while level_start > 1:
            children = self.tree[level_start:2 * level_start]
            self.tree[level_start // 2:level_start] = children[0::2] + children[1::2]
            level_start //= 2
