"""A replay of fixed-shape items (transitions for SAC, sequences for R2D2), uniform or prioritized.

``ItemReplay(capacity, spec)`` stores items in a ring of NumPy arrays ``{name: [capacity,
*shape]}``; the oldest item is overwritten when full. Sampling is uniform when
``priority_exponent`` is 0, else proportional to ``priority ** priority_exponent`` through
the project's Numba sum tree (``muzero.replay.sum_tree``), with importance weights
``(N * P(i)) ** -importance_sampling_exponent`` normalised by the batch's largest (Schaul et
al. 2016, as SEED's R2D2). ``update_priorities`` refreshes sampled items' priorities after
a learner step; indices whose slot was overwritten since they were sampled are ignored.

The replay ratio is kept by ``muzero.replay.rate_limiter.SampleToInsertRatio`` counting
items: ``samples_per_insert`` items sampled per item inserted (0 = no ratio). ``add``
blocks while the learner is behind (the step-streaming service's sink then back-pressures
the actors); ``sample`` returns None while the learner is ahead or fewer than
``min_size`` items are stored. ``close`` wakes every waiter.

Thread safety: one lock guards everything; ``add`` comes from the service's batch thread,
``sample``/``update_priorities`` from the learner's thread.

``save(directory)`` / ``restore(directory)`` write and read the whole ring, the priorities,
the counters and the generator's state as ``replay.npz`` + ``replay.json`` (a run resumes
with the data it had).

Imports NumPy, Numba (the sum tree) and the standard library; never TensorFlow.
"""
from __future__ import annotations

import json
import os
import threading
from typing import Optional

import numpy as np

from muzero.replay.rate_limiter import SampleToInsertRatio
from muzero.replay.sum_tree import SumTree

ARRAYS = "replay.npz"
STATE = "replay.json"


class ItemReplay:
    """Ring buffer of items with optional proportional priorities and a replay ratio.

    Args:
      capacity: items kept.
      spec: ``{name: (shape of one item, numpy dtype)}``.
      priority_exponent: alpha; 0 samples uniformly (priorities are then ignored).
      importance_sampling_exponent: beta of the importance weights (prioritized only).
      samples_per_insert: items sampled per item inserted; 0 = no ratio.
      min_size: items stored before the first sample.
      tolerance: how many sampled items either side may run ahead of the ratio
        (default: 4 * the batch size given to ``check_batch_size``, else 1024).
      seed: seeds sampling.
    """

    def __init__(self, capacity: int, spec: dict, *, priority_exponent: float = 0.0,
                 importance_sampling_exponent: float = 0.0, samples_per_insert: float = 0.0,
                 min_size: int = 1, tolerance: Optional[float] = None, seed: int = 0):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"ItemReplay capacity={capacity!r} must be an integer >= 1")
        if not 1 <= min_size <= capacity:
            raise ValueError(f"ItemReplay min_size={min_size} must be in [1, capacity={capacity}]")
        if priority_exponent < 0 or importance_sampling_exponent < 0 or samples_per_insert < 0:
            raise ValueError("ItemReplay exponents and samples_per_insert must be >= 0")
        self.capacity = int(capacity)
        self.spec = {k: (tuple(int(d) for d in shape), np.dtype(dtype)) for k, (shape, dtype) in spec.items()}
        self.priority_exponent = float(priority_exponent)
        self.importance_sampling_exponent = float(importance_sampling_exponent)
        self.prioritized = self.priority_exponent > 0
        self.min_size = int(min_size)
        self._arrays = {k: np.zeros((self.capacity, *shape), dtype) for k, (shape, dtype) in self.spec.items()}
        self._tree = SumTree(self.capacity) if self.prioritized else None
        self._generation = np.zeros(self.capacity, np.int64)   # bumps when a slot is overwritten
        self._size = 0
        self._next = 0
        self._max_priority = 1.0
        self._limiter = SampleToInsertRatio(samples_per_insert, min_size,
                                            1024.0 if tolerance is None else float(tolerance))
        self._tolerance_given = tolerance is not None
        self.rng = np.random.default_rng([seed, 11])
        self._cond = threading.Condition()
        self._closed = False
        self._limiting = True   # False once the run stops: inserts then ignore the ratio
        self.inserted = 0      # items ever inserted (also counted by the limiter)

    def check_batch_size(self, batch_size: int) -> None:
        """Sets the default tolerance from the batch size and checks that neither side of the
        ratio can block the other forever."""
        if not self._tolerance_given:
            self._limiter.tolerance = float(max(4 * batch_size, 1))
        self._limiter.check_batch_size(batch_size)

    def __len__(self) -> int:
        return self._size

    # -- writing -----------------------------------------------------------------------------------

    def add(self, items: dict, priorities: Optional[np.ndarray] = None, timeout: Optional[float] = None) -> bool:
        """Inserts n items (``{name: [n, *shape]}``) with priorities [n] (> 0; None: the largest
        priority seen so far). Blocks while the replay ratio says the learner is behind;
        returns False (nothing inserted) when closed or after ``timeout`` seconds."""
        n = self._check_items(items)
        if priorities is not None:
            priorities = np.asarray(priorities, np.float64).reshape(-1)
            if priorities.shape != (n,) or not np.all(np.isfinite(priorities)) or priorities.min(initial=1) <= 0:
                raise ValueError(f"priorities must be [{n}] finite and > 0")
        with self._cond:
            if not self._cond.wait_for(
                    lambda: self._closed or not self._limiting or self._limiter.can_insert(), timeout):
                return False
            if self._closed:
                return False
            slots = (self._next + np.arange(n)) % self.capacity
            for k, v in items.items():
                self._arrays[k][slots] = v
            self._generation[slots] += 1
            if self.prioritized:
                if priorities is None:
                    priorities = np.full(n, self._max_priority)
                self._max_priority = max(self._max_priority, float(priorities.max()))
                self._tree.set(slots, priorities ** self.priority_exponent)
            self._next = int((self._next + n) % self.capacity)
            self._size = min(self._size + n, self.capacity)
            self._limiter.record_insert(n)
            self.inserted += n
            self._cond.notify_all()
        return True

    def _check_items(self, items: dict) -> int:
        if sorted(items) != sorted(self.spec):
            raise ValueError(f"items have fields {sorted(items)}; the replay stores {sorted(self.spec)}")
        n = None
        for k, v in items.items():
            shape, _ = self.spec[k]
            v = np.asarray(v)
            if v.shape[1:] != shape or (n is not None and len(v) != n):
                raise ValueError(f"items[{k!r}] has shape {list(v.shape)}; expected [n, {', '.join(map(str, shape))}]")
            n = len(v)
        if not n or n > self.capacity:
            raise ValueError(f"add takes 1 to {self.capacity} items at once, got {n}")
        return n

    # -- reading -----------------------------------------------------------------------------------

    def sample(self, batch_size: int, timeout: float = 0.0) -> Optional[tuple]:
        """(indices [B] int64, items {name: [B, ...]} (copies), weights [B] float32), or None
        when the ratio or ``min_size`` does not allow a batch within ``timeout`` seconds."""
        with self._cond:
            if not self._cond.wait_for(
                    lambda: self._closed or self._limiter.can_sample(batch_size, self._size), timeout):
                return None
            if self._closed:
                return None
            if self.prioritized:
                slots = self._tree.sample(self.rng.random(batch_size))
                probabilities = self._tree.leaves()[slots] / self._tree.total
                weights = (self._size * probabilities) ** -self.importance_sampling_exponent
                weights = (weights / weights.max()).astype(np.float32)
            else:
                slots = self.rng.integers(0, self._size, batch_size)
                weights = np.ones(batch_size, np.float32)
            items = {k: v[slots] for k, v in self._arrays.items()}
            indices = slots.astype(np.int64) + self.capacity * self._generation[slots]
            self._limiter.record_sample(batch_size)
            self._cond.notify_all()
        return indices, items, weights

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> int:
        """New priorities (> 0, finite) for sampled ``indices``; returns how many were applied
        (items overwritten since they were sampled keep their new priority)."""
        if not self.prioritized:
            return 0
        indices = np.asarray(indices, np.int64).reshape(-1)
        priorities = np.asarray(priorities, np.float64).reshape(-1)
        if priorities.shape != indices.shape or not np.all(np.isfinite(priorities)) or priorities.min(initial=1) <= 0:
            raise ValueError(f"priorities must be [{len(indices)}] finite and > 0")
        slots, generation = indices % self.capacity, indices // self.capacity
        with self._cond:
            live = self._generation[slots] == generation
            if live.any():
                self._tree.set(slots[live], priorities[live] ** self.priority_exponent)
                self._max_priority = max(self._max_priority, float(priorities[live].max()))
            return int(live.sum())

    def sampling_probabilities(self) -> np.ndarray:
        """[len] the probability of each stored slot in the next draw (tests, diagnostics)."""
        with self._cond:
            if not self.prioritized:
                return np.full(self._size, 1.0 / max(self._size, 1))
            return self._tree.leaves()[:self._size] / self._tree.total

    def stop_limiting(self) -> None:
        """Inserts no longer wait for the replay ratio (the run is stopping); waiting ones go in."""
        with self._cond:
            self._limiting = False
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def stats(self) -> dict:
        with self._cond:
            return {"replay/items": self._size, "replay/inserted": self._limiter.inserted,
                    "replay/sampled": self._limiter.sampled}

    # -- checkpoints -------------------------------------------------------------------------------

    def save(self, directory: str) -> None:
        """Writes the stored items, priorities, counters and generator state into ``directory``."""
        with self._cond:
            n = self._size
            arrays = {f"item/{k}": v[:n] for k, v in self._arrays.items()}
            if self.prioritized:
                arrays["priority_weights"] = self._tree.leaves()[:n].copy()
            arrays["generation"] = self._generation[:n]
            state = {"size": n, "next": self._next, "capacity": self.capacity,
                     "max_priority": self._max_priority, "limiter": self._limiter.state(),
                     "inserted": self.inserted, "rng": self.rng.bit_generator.state,
                     "fields": sorted(self.spec)}
            tmp = os.path.join(directory, ARRAYS + ".tmp.npz")
            np.savez(tmp, **arrays)
        os.replace(tmp, os.path.join(directory, ARRAYS))
        with open(os.path.join(directory, STATE), "w") as f:
            json.dump(state, f)

    def restore(self, directory: str) -> bool:
        """Reads what ``save`` wrote; False (replay left empty) when ``directory`` holds none.
        Raises ValueError when the saved items do not match this replay's spec or capacity."""
        path = os.path.join(directory, STATE)
        if not os.path.isfile(path):
            return False
        with open(path) as f:
            state = json.load(f)
        if state["fields"] != sorted(self.spec) or state["capacity"] != self.capacity:
            raise ValueError(f"{directory}: the saved replay holds {state['fields']} x {state['capacity']}; "
                             f"this run's holds {sorted(self.spec)} x {self.capacity}")
        with np.load(os.path.join(directory, ARRAYS)) as data, self._cond:
            n = int(state["size"])
            for k, v in self._arrays.items():
                saved = data[f"item/{k}"]
                if saved.shape[1:] != v.shape[1:]:
                    raise ValueError(f"{directory}: saved replay field {k!r} has item shape "
                                     f"{list(saved.shape[1:])}; this run's is {list(v.shape[1:])}")
                v[:n] = saved
            self._generation[:n] = data["generation"]
            if self.prioritized and "priority_weights" in data:
                self._tree.set(np.arange(n), data["priority_weights"])
            self._size, self._next = n, int(state["next"])
            self._max_priority = float(state["max_priority"])
            self._limiter.load_state(state["limiter"])
            self.inserted = int(state["inserted"])
            self.rng.bit_generator.state = state["rng"]
        return True
