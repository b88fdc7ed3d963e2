"""Samples-per-insert rate limiter: keeps the replay ratio at a set value.

Counts env steps inserted (``inserted``) and positions sampled (``sampled``) over the
whole run (both survive snapshots). With ``spi = samples_per_insert > 0``,
``m = min_steps_to_sample`` and ``tol = samples_per_insert_tolerance``:

    sampling B positions is allowed   iff  stored steps >= m  and
                                            sampled + B <= spi * (inserted - m) + tol
    inserting is allowed              iff  spi * (inserted - m) - sampled <= tol

So the learner may run at most ``tol`` samples ahead of the ratio, and actors at most
``tol`` samples' worth of steps ahead of it. When inserts are blocked,
``sampled < spi * (inserted - m) - tol``, so a batch of ``B <= 2 * tol`` can always be
sampled; when sampling is blocked, inserts are allowed. Hence neither side can wait
on the other forever as long as ``B <= 2 * tol`` (checked). With ``spi = 0`` there is
no ratio: inserts never wait and sampling only waits for ``m`` stored steps.

This class is pure bookkeeping; the replay calls it under its own lock and waits on
its own condition variable. Imports nothing outside the standard library.
"""
from __future__ import annotations


class SampleToInsertRatio:
    """Decides whether an insert or a sample may proceed now."""

    def __init__(self, samples_per_insert: float, min_steps_to_sample: int, tolerance: float):
        self.samples_per_insert = float(samples_per_insert)
        self.min_steps_to_sample = int(min_steps_to_sample)
        self.tolerance = float(tolerance)
        self.inserted = 0
        self.sampled = 0

    def check_batch_size(self, batch_size: int) -> None:
        if self.samples_per_insert > 0 and batch_size > 2 * self.tolerance:
            raise ValueError(
                f"batch_size={batch_size} exceeds 2 * samples_per_insert_tolerance = "
                f"{2 * self.tolerance:g}; with samples_per_insert={self.samples_per_insert:g} the "
                f"limiter could block both sides. Use a batch in [1, {int(2 * self.tolerance)}] or "
                f"raise the tolerance")

    def _surplus(self) -> float:
        """Samples the ratio allows now minus samples drawn."""
        return self.samples_per_insert * (self.inserted - self.min_steps_to_sample) - self.sampled

    def can_insert(self) -> bool:
        return self.samples_per_insert == 0 or self._surplus() <= self.tolerance

    def can_sample(self, batch_size: int, stored_steps: int) -> bool:
        if stored_steps < self.min_steps_to_sample:
            return False
        return self.samples_per_insert == 0 or batch_size <= self._surplus() + self.tolerance

    def record_insert(self, num_steps: int) -> None:
        self.inserted += int(num_steps)

    def record_sample(self, batch_size: int) -> None:
        self.sampled += int(batch_size)

    def state(self) -> dict:
        return {"inserted": self.inserted, "sampled": self.sampled}

    def load_state(self, state: dict) -> None:
        self.inserted = int(state["inserted"])
        self.sampled = int(state["sampled"])
