"""The learner's prioritized MuZero replay: insert segments, sample training batches.

``Replay`` wraps the trajectory store (``store``), the sum tree (``sum_tree``), the
sample-time target builder (``targets``), the samples-per-insert limiter
(``rate_limiter``) and snapshots (``snapshot``) behind one lock, so gRPC handler
threads can insert while the trainer thread samples. See docs/REPLAY.md.

Imports NumPy, Numba, ``envs.base``, ``muzero.config`` and ``muzero.observation``;
never TensorFlow.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, Optional

import numpy as np

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
from muzero.config import to_dict
from muzero.observation import assemble_image_input, network_input_shape
from muzero.replay import snapshot as snapshot_io
from muzero.replay.rate_limiter import SampleToInsertRatio
from muzero.replay.snapshot import SnapshotError
from muzero.replay.store import END_TERMINATED, TrajectoryStore, validate_segment
from muzero.algorithms.muzero.targets import (build_targets, finish_values, gather_inputs, gather_next_inputs,
                                   unroll_policy_slots)

# values_fn(observation [M, *network_input_shape], index [M] int64) -> values [M] float,
# each from the point of view of the player to move at that position.
ValuesFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class ReplayClosedError(RuntimeError):
    """The replay was closed while a caller waited on it (shutdown)."""


def _descriptor_to_json(descriptor: EnvDescriptor) -> dict:
    return {f.name: (list(v) if isinstance(v, tuple) else v)
            for f in dataclasses.fields(descriptor) for v in [getattr(descriptor, f.name)]}


def _descriptor_from_json(data: dict) -> EnvDescriptor:
    return EnvDescriptor(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()})


class Replay:
    """Prioritized replay of env-step positions with sample-time targets.

    Args:
      descriptor: the env's static facts (observation shape/dtype, actions, kind).
      replay_config: capacity, priority exponents, warm-up and replay ratio.
      target_config: K, n-step and frames stacked for image envs.
      discount: of the n-step value targets (the run's ``search.discount``).
      seed: seeds the sampling generator (positions and padded actions).
      next_observations: batches also carry ``next_observation`` (the consistency loss).
    """

    def __init__(self, descriptor: EnvDescriptor, replay_config: ReplayConfig,
                 target_config: TargetConfig, seed: int, next_observations: bool = False, *,
                 discount: float):
        self.next_observations = bool(next_observations)
        self.descriptor = descriptor
        self.replay_config = replay_config
        self.target_config = target_config
        if not 0.0 < discount <= 1.0:
            raise ValueError(f"Replay discount={discount!r} is invalid: must be in (0, 1]")
        self.discount = float(discount)
        self.seed = int(seed)
        self.is_image = descriptor.is_image
        self.stack_frames = target_config.frames_for(self.is_image)
        self.input_shape = network_input_shape(tuple(descriptor.observation_shape), self.is_image,
                                               self.stack_frames)
        self._store = TrajectoryStore(descriptor, replay_config.capacity_steps,
                                      history=self.stack_frames if self.is_image else 0,
                                      priority_exponent=replay_config.priority_exponent,
                                      min_priority=replay_config.min_priority,
                                      reanalyse=target_config.reanalyse_fraction > 0,
                                      relink_steps=target_config.td_steps,
                                      recorded_below=DATASET_EPISODE_ID_BASE,
                                      recorded_share=replay_config.dataset_fraction > 0)
        # Reanalyse (docs/REANALYSE.md): rows of training batches meant for refreshed
        # positions, and positions the worker refreshed (not saved in snapshots).
        self.reanalyse_fraction = float(target_config.reanalyse_fraction)
        self.dataset_fraction = float(replay_config.dataset_fraction)
        self._reanalyse_wanted = 0
        self._reanalyse_written = 0
        self._limiter = SampleToInsertRatio(replay_config.samples_per_insert,
                                            replay_config.min_steps_to_sample,
                                            replay_config.samples_per_insert_tolerance)
        self._rng = np.random.default_rng(self.seed)
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._limiting = True   # False once the run stops: inserts then ignore the ratio

    # ------------------------------------------------------------------ waiting
    def _wait_for(self, predicate, timeout: Optional[float], what: str) -> None:
        """Waits (lock held) until predicate() holds; raises on close or timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                raise ReplayClosedError(f"replay closed while waiting to {what}")
            if predicate():
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"replay: could not {what} within {timeout} s "
                                   f"(rate limiter: {self._limiter.state()}, "
                                   f"stored steps {self._store.num_steps})")
            self._cond.wait(remaining)

    def stop_limiting(self) -> None:
        """Inserts no longer wait for the rate limiter (the run is stopping: what actors push
        until they stop is stored and checkpointed); waiting inserts go in."""
        with self._cond:
            self._limiting = False
            self._cond.notify_all()

    def close(self) -> None:
        """Wakes every waiting insert/sample with ReplayClosedError; later ones raise too."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ insert
    def insert(self, segment: dict, timeout: Optional[float] = None) -> None:
        """Stores one segment (see docs/REPLAY.md for the fields).

        Waits while the rate limiter holds inserts back (only with
        samples_per_insert > 0), at most ``timeout`` seconds (None: until allowed or
        closed). Raises ValueError naming the field of a malformed segment,
        TimeoutError, or ReplayClosedError.
        """
        self.insert_many([segment], timeout)

    def insert_many(self, segments: list, timeout: Optional[float] = None, limited: bool = True) -> int:
        """Stores several segments all or nothing; returns the env steps stored.

        Every segment is validated and the episode chains are checked before anything is
        stored, so a ValueError (naming the bad field) leaves the replay unchanged. The
        rate limiter is consulted once for the whole group: it may overshoot its target by
        one push, never split one. TimeoutError / ReplayClosedError also store nothing.
        ``limited=False`` (recorded episodes) neither waits for the limiter nor counts as
        inserted for it: the replay ratio is a ratio to what the actors push.
        """
        segs = [validate_segment(seg, self.descriptor, self._store.capacity) for seg in segments]
        if not segs:
            return 0
        steps = sum(seg["observations"].shape[0] for seg in segs)
        with self._cond:
            if limited:
                self._wait_for(lambda: not self._limiting or self._limiter.can_insert(), timeout, "insert segments")
            self._store.check_chain(segs)
            for seg in segs:
                self._store.insert(seg)
            if limited:
                self._limiter.record_insert(steps)
            self._cond.notify_all()
        return steps

    # ------------------------------------------------------------------ sample
    def _check_batch_size(self, batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1")
        self._limiter.check_batch_size(int(batch_size))

    def _td_steps(self, index: np.ndarray):
        """The n of each sampled position's value target ([B] from global indices ``index``):
        ``td_steps`` shortened by one per ``td_shrink_every_steps`` env steps stored after the
        position, to at least 1 (``TargetConfig.td_shrink_every_steps``); a plain int when off.
        Call with the lock held."""
        tc = self.target_config
        if tc.td_shrink_every_steps <= 0:
            return tc.td_steps
        age = self._store.head - 1 - np.asarray(index, np.int64)     # steps stored after each
        return np.maximum(1, tc.td_steps - age // tc.td_shrink_every_steps)

    def _sample_allowed(self, batch_size: int) -> bool:
        return (self._store.tree.total > 0.0
                and self._limiter.can_sample(batch_size, self._store.num_steps))

    def can_sample(self, batch_size: int = 1) -> bool:
        """True when a batch of this size may be sampled now (never blocks)."""
        self._check_batch_size(batch_size)
        with self._cond:
            return not self._closed and self._sample_allowed(batch_size)

    def wait_until_can_sample(self, batch_size: int, timeout: Optional[float]) -> bool:
        """Waits up to ``timeout`` s; True when sampling is allowed, False on timeout or close."""
        self._check_batch_size(batch_size)
        with self._cond:
            try:
                self._wait_for(lambda: self._sample_allowed(batch_size), timeout, "sample")
            except (TimeoutError, ReplayClosedError):
                return False
            return True

    def sample(self, batch_size: int, values_fn: Optional[ValuesFn] = None,
               timeout: Optional[float] = None) -> dict:
        """Samples positions in proportion to priority ** alpha and builds their targets.

        Waits for warm-up and the rate limiter, at most ``timeout`` s (None: until
        allowed or closed; TimeoutError / ReplayClosedError otherwise).

        ``values_fn`` is the reanalyse hook: called once per batch, outside the lock, as
        ``values_fn(observation [M, *input_shape], index [M] int64) -> [M] values`` for
        the M distinct positions the value targets bootstrap from (a value from the
        point of view of the player to move there); those values replace the stored
        root values in the n-step targets.

        Returns a dict (B = batch_size, K = num_unroll_steps, A = num_actions):
          observation [B, *input_shape] (uint8 stack + action planes for images),
          actions [B, K] int32, target_value / target_reward [B, K+1] f32,
          target_policy [B, K+1, A] f32, value_mask / reward_mask / policy_mask
          [B, K+1] f32, importance_weight [B] f32, index [B] int64; with
          ``next_observations`` also next_observation [B, K, *input_shape] (the inputs
          at t+1..t+K, zeros past the stored end).

        With ``targets.reanalyse_fraction`` f > 0 the first ``R = floor(f B + 1/2)`` rows
        are drawn (by priority) from positions whose targets were reanalysed, the rest from
        all positions as above (all B from all positions while none is reanalysed);
        importance weights use the probability of that mixture, with ``r = R / B``:
        ``(1 - r) w_i / W + r w_i / W_r [i reanalysed]`` (``W_r``: the refreshed positions' total). The batch then also holds
        target_version [B, K+1] int64: the weights version of each policy target (-1: the
        actor's, or none past the stored end). ``replay.dataset_fraction`` d > 0 draws the
        next ``D = min(floor(d B + 1/2), B - R)`` rows (by priority) from the recorded
        episodes' positions (``dataset_segments``) while the replay holds any. That share is
        deliberate oversampling, not corrected for: every row's importance weight uses the
        probability the batch would give it without the share (the mixture above, with
        ``r = R / (B - D)``), so the weights undo only the priorities.
        """
        self._check_batch_size(batch_size)
        tc, store = self.target_config, self._store
        with self._cond:
            self._wait_for(lambda: self._sample_allowed(batch_size), timeout, "sample")
            refreshed = 0
            if self.reanalyse_fraction > 0:
                refreshed = int(self.reanalyse_fraction * batch_size + 0.5)
                self._reanalyse_wanted += refreshed
            recorded = int(self.dataset_fraction * batch_size + 0.5) if self.dataset_fraction > 0 else 0
            recorded = min(recorded, batch_size - refreshed)
            slots, probs = self._draw(batch_size, [(store.refreshed_tree, refreshed, True),
                                                   (store.recorded_tree, recorded, False)])
            index = store.global_index(slots)
            num_sampleable = store.num_sampleable
            parts = build_targets(store, slots, tc.num_unroll_steps, self._td_steps(index),
                                  self.discount, self._rng)
            if tc.recorded_action_weight > 0:
                parts["target_policy"] = self._mix_recorded_actions(parts["target_policy"], parts["policy_slot"])
            frames, frame_actions = gather_inputs(store, slots, self.stack_frames, self.is_image)
            if self.next_observations:
                next_frames, next_actions = gather_next_inputs(
                    store, slots, parts["policy_slot"], self.stack_frames, self.is_image)
            if store.target_version is not None:
                policy_slot = parts["policy_slot"]
                versions = np.where(policy_slot >= 0, store.target_version[np.maximum(policy_slot, 0)], -1)
            boot = parts["boot_slot"]  # [B, K+1]
            has_boot = boot >= 0
            if values_fn is None:
                boot_values = np.where(has_boot, store.root_values[np.maximum(boot, 0)], 0.0)
            else:
                boot_unique, boot_inverse = np.unique(boot[has_boot], return_inverse=True)
                boot_frames, boot_actions = gather_inputs(store, boot_unique, self.stack_frames,
                                                          self.is_image)
                boot_index = store.global_index(boot_unique)
            self._limiter.record_sample(batch_size)
            self._cond.notify_all()

        if values_fn is not None:
            boot_obs = self._assemble(boot_frames, boot_actions)
            fresh = np.asarray(values_fn(boot_obs, boot_index), dtype=np.float64)
            if fresh.shape != boot_unique.shape or not np.all(np.isfinite(fresh)):
                raise ValueError(f"values_fn must return {boot_unique.shape[0]} finite values "
                                 f"(shape {boot_unique.shape}), got shape {fresh.shape}")
            boot_values = np.zeros(boot.shape, np.float64)
            boot_values[has_boot] = fresh[boot_inverse.reshape(-1)]
        beta = self.replay_config.importance_sampling_exponent
        weights = np.power(num_sampleable * probs, -beta)
        weights /= weights.max()
        batch = {
            "observation": self._assemble(frames, frame_actions),
            "actions": parts["actions"],
            "target_value": finish_values(parts, boot_values),
            "target_reward": parts["target_reward"],
            "target_policy": parts["target_policy"],
            "value_mask": parts["value_mask"],
            "reward_mask": parts["reward_mask"],
            "policy_mask": parts["policy_mask"],
            "importance_weight": weights.astype(np.float32),
            "index": index.astype(np.int64),
        }
        if store.target_version is not None:
            batch["target_version"] = versions.astype(np.int64)
        if self.next_observations:
            following = self._assemble(next_frames, next_actions)           # [B*K, *input_shape]
            batch["next_observation"] = following.reshape(batch_size, tc.num_unroll_steps,
                                                          *following.shape[1:])
        return batch

    def _draw(self, batch_size: int, shares: list) -> tuple:
        """(slots [B], probabilities [B]) of a batch whose first rows come from the given sum
        trees, ``shares`` = [(tree or None, rows, corrected)] in order, the rest from all
        positions by priority; a tree that is missing or empty gives its rows to all
        positions. The probability of slot i is that of the mixture of the corrected parts
        and the rest: sum over them of rows / (their rows) x leaf_i / total (an uncorrected
        part's rows are oversampling on purpose). Call with the lock held."""
        store = self._store
        uniforms = self._rng.random(batch_size)
        parts, at = [], 0
        for tree, rows, corrected in shares:
            if tree is None or rows <= 0 or tree.total <= 0.0:
                continue
            parts.append((tree, tree.sample(uniforms[at:at + rows]), rows, corrected))
            at += rows
        parts.append((store.tree, store.tree.sample(uniforms[at:]), batch_size - at, True))
        slots = np.concatenate([drawn for _, drawn, _, _ in parts])
        mixed = sum(rows for _, _, rows, corrected in parts if corrected)
        if mixed == 0:     # every row oversampled: the probability all positions would give
            return slots, store.tree.leaves()[slots] / store.tree.total
        probs = np.zeros(batch_size, np.float64)
        for tree, _, rows, corrected in parts:
            if corrected and rows > 0:
                probs += (rows / mixed) * tree.leaves()[slots] / tree.total
        return slots, probs

    def _mix_recorded_actions(self, target_policy: np.ndarray, policy_slot: np.ndarray) -> np.ndarray:
        """Policy targets [B, K+1, A] with those of recorded positions (``dataset_segments``)
        mixed toward the recorded action: (1 - w) x target + w x one-hot(action taken there),
        w = ``targets.recorded_action_weight``. Call with the lock held."""
        store, w = self._store, self.target_config.recorded_action_weight
        slot = np.maximum(policy_slot, 0)
        recorded = (policy_slot >= 0) & store.is_recorded(slot)
        if not recorded.any():
            return target_policy
        mixed = np.array(target_policy, np.float32, copy=True)
        rows = mixed[recorded] * (1.0 - w)
        rows[np.arange(len(rows)), store.actions[slot[recorded]]] += w
        mixed[recorded] = rows
        return mixed

    def _assemble(self, frames: np.ndarray, frame_actions: Optional[np.ndarray]) -> np.ndarray:
        if not self.is_image:
            return frames
        return assemble_image_input(frames, frame_actions, self.descriptor.num_actions)

    # ------------------------------------------------------------------ reanalyse
    def reanalyse_positions(self, count: int, rng: np.random.Generator) -> Optional[dict]:
        """``count`` positions for the reanalyse worker (drawn with ``rng``, not the training
        sampler's generator), or None while nothing is sampleable: index [M] int64
        (global), observation [M, *input_shape] (the network input, as in a batch),
        legal_mask [M, A] bool (all True for envs without masks), to_play [M].

        Positions are drawn by priority. With ``targets.reanalyse_whole_unroll`` each drawn
        position brings the K after it in its episode (the policy targets a batch row there
        unrolls over), in order and without repeats, until ``count`` are collected; after
        four rounds of draws (a replay smaller than ``count``) the rest are plain draws."""
        store = self._store
        with self._cond:
            if self._closed:
                raise ReplayClosedError("replay closed")
            if store.tree.total <= 0.0:
                return None
            count = int(count)
            if self.target_config.reanalyse_whole_unroll:
                slots = self._unroll_windows(count, rng)
            else:
                slots = store.tree.sample(rng.random(count))
            index = store.global_index(slots)
            frames, frame_actions = gather_inputs(store, slots, self.stack_frames, self.is_image)
            legal = (store.legal_masks[slots] if store.legal_masks is not None
                     else np.ones((len(slots), self.descriptor.num_actions), np.bool_))
            to_play = store.to_play[slots].astype(np.int64)
        return {"index": index.astype(np.int64), "observation": self._assemble(frames, frame_actions),
                "legal_mask": legal, "to_play": to_play}

    def _unroll_windows(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """[count] slots: whole unroll windows of positions drawn by priority (see
        :meth:`reanalyse_positions`); called with the lock held."""
        store, k1 = self._store, self.target_config.num_unroll_steps + 1
        chosen = np.zeros(0, np.int64)
        for _ in range(4):
            roots = store.tree.sample(rng.random(max(1, -(-(count - chosen.size) // k1))))
            window = unroll_policy_slots(store, roots, k1 - 1).reshape(-1)
            window = np.concatenate([chosen, window[window >= 0]])
            _, first = np.unique(window, return_index=True)
            chosen = window[np.sort(first)][:count]   # first occurrences, in order
            if chosen.size == count:
                return chosen
        return np.concatenate([chosen, store.tree.sample(rng.random(count - chosen.size))])

    def write_reanalysed(self, index: np.ndarray, policies: np.ndarray, root_values: np.ndarray,
                         version: int) -> int:
        """Stores reanalysed policy targets [M, A] and root values [M] (the player to move's
        view) of positions ``index`` [M] (from :meth:`reanalyse_positions`), made with
        weights ``version``; those positions join the refreshed pool that a fraction of
        every batch is drawn from. Evicted positions are skipped; returns how many were
        written. ValueError for malformed or non-finite values."""
        with self._cond:
            written = self._store.write_reanalysed(index, policies, root_values, version)
            self._reanalyse_written += written
            return written

    def reanalyse_backlog(self) -> int:
        """Rows training has meant to draw from refreshed positions minus positions
        refreshed so far (since this replay was built or loaded): > 0 when the worker is
        behind the trainer's demand."""
        with self._cond:
            return self._reanalyse_wanted - self._reanalyse_written

    # ------------------------------------------------------------------ priorities, sizes
    def update_priorities(self, index: np.ndarray, priorities: np.ndarray) -> int:
        """Sets priorities ([B] >= 0) of sampled positions ([B] int64 from ``sample``).

        Positions evicted since they were sampled are skipped; returns how many were set.
        """
        with self._cond:
            return self._store.update_priorities(index, priorities)

    @property
    def num_steps(self) -> int:
        """Env steps stored now."""
        with self._cond:
            return self._store.num_steps

    @property
    def bytes_used(self) -> int:
        """Bytes of the storage rows holding live steps and segments (see docs/REPLAY.md)."""
        with self._cond:
            return self._store.bytes_used

    @property
    def bytes_allocated(self) -> int:
        """Bytes of all preallocated storage, live or not, sum tree included."""
        return self._store.bytes_allocated

    def stats(self) -> dict:
        """Counters for summaries: fill, inserts, samples, priorities."""
        with self._cond:
            s = self._store
            return {"num_steps": s.num_steps, "num_segments": s.num_segments,
                    "num_episodes": len(s.episodes), "num_sampleable": s.num_sampleable,
                    "inserted_steps": self._limiter.inserted, "sampled": self._limiter.sampled,
                    "bytes_used": s.bytes_used, "bytes_allocated": s.bytes_allocated,
                    "max_priority": s.max_priority, "fill": s.num_steps / s.capacity,
                    **({} if s.target_version is None else {
                        "reanalysed_live": int(np.count_nonzero(
                            s.target_version[s.sampleable] >= 0)),
                        "reanalyse_wanted": self._reanalyse_wanted,
                        "reanalyse_written": self._reanalyse_written})}

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, directory: str) -> None:
        """Writes the whole replay (data, priorities, counters, RNG) atomically to ``directory``.

        Holds the lock while writing, so inserts and samples wait until it is done.
        """
        with self._cond:
            arrays, counters = self._store.state()
            meta = {"descriptor": _descriptor_to_json(self.descriptor),
                    "replay_config": to_dict(self.replay_config),
                    "target_config": to_dict(self.target_config), "discount": self.discount,
                    "seed": self.seed, "store": counters, "limiter": self._limiter.state(),
                    "rng": self._rng.bit_generator.state}
            snapshot_io.write_snapshot(directory, arrays, meta)

    @classmethod
    def restore(cls, directory: str, replay_config: Optional[ReplayConfig] = None,
                target_config: Optional[TargetConfig] = None,
                discount: Optional[float] = None) -> "Replay":
        """A new Replay from a snapshot; raises SnapshotError if it is missing or corrupted.

        ``replay_config`` / ``target_config`` / ``discount`` override the saved ones (e.g. a
        new td_steps); the capacity must stay the same.
        """
        arrays, meta = snapshot_io.read_snapshot(directory)
        try:
            descriptor = _descriptor_from_json(meta["descriptor"])
            rc = replay_config or ReplayConfig(**{k: v for k, v in meta["replay_config"].items()})
            saved_tc = dict(meta["target_config"])
            saved_discount = meta.get("discount", saved_tc.pop("discount", None))   # older snapshots: here
            saved_tc.pop("discount", None)
            tc = target_config or TargetConfig(**saved_tc)
            replay = cls(descriptor, rc, tc, meta["seed"],
                         discount=saved_discount if discount is None else discount)
        except (KeyError, TypeError, ValueError) as e:
            raise SnapshotError(f"replay snapshot {directory!r} has unusable metadata: {e}") from e
        replay._load(arrays, meta, directory)
        return replay

    def load(self, directory: str) -> None:
        """Replaces this replay's contents with a snapshot of the same env and capacity."""
        arrays, meta = snapshot_io.read_snapshot(directory)
        saved = meta.get("descriptor")
        if saved != _descriptor_to_json(self.descriptor):
            raise SnapshotError(f"replay snapshot {directory!r} is for env {saved}, "
                                f"not {_descriptor_to_json(self.descriptor)}")
        self._load(arrays, meta, directory)

    def _load(self, arrays: dict, meta: dict, directory: str) -> None:
        saved_capacity = meta["replay_config"]["capacity_steps"]
        if saved_capacity != self._store.capacity:
            raise SnapshotError(f"replay snapshot {directory!r} has capacity_steps={saved_capacity}; "
                                f"this replay has {self._store.capacity} (they must match)")
        with self._cond:
            try:
                self._store.load_state(arrays, meta["store"])
                self._limiter.load_state(meta["limiter"])
                self._rng.bit_generator.state = meta["rng"]
            except (KeyError, TypeError, ValueError) as e:
                raise SnapshotError(f"replay snapshot {directory!r} does not fit this replay: {e}") from e
            self._cond.notify_all()


def compile_kernels() -> None:
    """Compiles (or loads from Numba's cache) the store's and the targets' kernels by
    inserting into and sampling a tiny image replay, with the argument types training
    passes (``python -m muzero.warmup`` runs it as the ``muzero_replay`` group)."""
    descriptor = EnvDescriptor("warmup", (2, 2, 1), "uint8", 2, kind="image", frame_layout="HWC")
    replay = Replay(descriptor, ReplayConfig(capacity_steps=32, min_steps_to_sample=1),
                    TargetConfig(num_unroll_steps=2, td_steps=2, stack_frames=2), seed=0, discount=0.99)
    t = 6
    replay.insert(dict(episode_id=np.int64(0), start=np.int64(0),
                       observations=np.zeros((t, 2, 2, 1), np.uint8), actions=np.zeros(t, np.int32),
                       rewards=np.zeros(t, np.float32), root_values=np.zeros(t, np.float32),
                       policies=np.full((t, 2), 0.5, np.float32), to_play=np.zeros(t, np.int8),
                       priorities=np.ones(t, np.float32), terminated=np.bool_(True),
                       truncated=np.bool_(False)))
    batch = replay.sample(2)
    replay.update_priorities(batch["index"], np.ones(2, np.float32))


# Episode ids of recorded episodes count down from here, far from the ids actors give theirs.
DATASET_EPISODE_ID_BASE = -(2**62)


def dataset_segments(episodes, num_actions: int) -> list:
    """Replay segments of recorded episodes (``muzero.dataset.Episode``): one segment per
    episode holding its first T observations (the last one, which no step is taken from,
    is dropped), actions, rewards and how it ended. A recording has no search: each step's
    policy target is the recorded action (one-hot) and its root value 0 until reanalyse
    rewrites them, and value targets bootstrap from those zeros unless
    ``targets.reanalyse_values`` takes the network's values."""
    segments = []
    for k, episode in enumerate(episodes):
        t = episode.num_steps
        actions = np.asarray(episode.actions).astype(np.int32).reshape(t)
        policies = np.zeros((t, num_actions), np.float32)
        policies[np.arange(t), actions] = 1.0
        segments.append(dict(episode_id=np.int64(DATASET_EPISODE_ID_BASE - k), start=np.int64(0),
                             observations=np.asarray(episode.observations[:t]), actions=actions,
                             rewards=np.asarray(episode.rewards, np.float32), root_values=np.zeros(t, np.float32),
                             policies=policies, to_play=np.zeros(t, np.int8),
                             terminated=np.bool_(episode.terminated), truncated=np.bool_(episode.truncated)))
    return segments


def stored_episodes(replay: Replay) -> tuple:
    """(episodes, skipped): the replay's episodes held from their first step on
    (``TrajectoryStore.whole_episodes``) as ``muzero.dataset.Episode``, in the order they
    arrived, and how many stored episodes were left out (begun before the replay's oldest
    step, recorded ones read from a dataset, or open ones of a single step).

    The replay keeps no observation after an episode's last step. A terminated episode gets
    an all-zero one there (a terminal state is worth 0, so no target reads it); an episode
    that was truncated or still being played loses its last step instead, so that the
    observation after its new last step is a real one, and counts as truncated."""
    from muzero.dataset import Episode
    store = replay._store
    with replay._cond:
        chains = store.whole_episodes()
        held = len(store.episodes)
        episodes = []
        for episode_id, slots, end in chains:
            if episode_id <= DATASET_EPISODE_ID_BASE:
                continue
            observations = store.observations[slots]
            if end == END_TERMINATED:
                final = np.zeros((1,) + observations.shape[1:], observations.dtype)
                observations = np.concatenate([observations, final])
            elif len(slots) < 2:
                continue
            else:
                slots = slots[:-1]
            episodes.append(Episode(observations=np.array(observations), actions=store.actions[slots].astype(np.int64),
                                    rewards=np.array(store.rewards[slots], np.float32),
                                    terminated=end == END_TERMINATED, truncated=end != END_TERMINATED))
    return episodes, held - len(episodes)
