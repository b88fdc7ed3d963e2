"""Trajectory storage for the replay: segments in a ring of env steps, chained by episode.

Layout (``C = capacity_steps``, ``A = num_actions``). Every stored env step owns one
*slot*. Steps get consecutive *global indices* (0, 1, 2, ... over the whole run) in
insertion order and step ``g`` lives in slot ``g % C``; the live steps are the
global range ``[tail, head)``. A segment occupies a consecutive run of global
indices, so eviction of whole oldest segments is a FIFO over that range. The global
index is what ``sample`` returns as ``index`` and what ``update_priorities`` takes;
an index whose step was evicted since is recognised (it is below ``tail``) and
ignored.

Per-step arrays (slot-indexed)::

    observations  [C + 1, *obs_shape]  env dtype (uint8 frames); row C is all zeros
    actions       [C] int32            a_t
    rewards       [C] float32          reward after a_t, mover's point of view
    root_values   [C] float32          search value at o_t, to_play[t]'s point of view
    policies      [C, A] float32       visit distribution at o_t
    to_play       [C] int8
    legal_masks   [C, A] bool          only when the env has legal masks
    priorities    [C] float32          raw priority (before the exponent alpha)
    sampleable    [C] bool             False while the frame history is incomplete
    slot_segment  [C] int32            row of the segment table holding the slot
    target_version [C] int64           only with reanalyse: weights version of the slot's
                                       policy target and root value (-1: the actor's)

Segment table (row = segment id % C; at most C live segments since each has >= 1
step): ``seg_episode, seg_start, seg_length, seg_first_slot, seg_prev, seg_next``
(int64; prev/next are segment ids, -1 for none) and ``seg_end`` (int8: 0 open,
1 terminated, 2 truncated). Segments of one episode are linked through prev/next so
stacking and n-step targets cross segment borders. A link to a segment id below
``seg_tail`` points at an evicted segment and counts as absent.

When the oldest segment of an episode is evicted while later ones remain, the
first ``history`` positions of what remains lose frames they need for their
stacked input; they become unsampleable (leaf weight 0). ``history`` is
``stack_frames`` for image envs (frames t-S+1..t and the actions a_{t-S}..a_{t-1}
that led to them) and 0 otherwise.

Size: one class over one layout (above): insert, evict, gather and snapshot all index the
same slot arrays.

Imports NumPy, Numba (through ``sum_tree``) and ``envs.base``; never TensorFlow.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from envs.base import EnvDescriptor
from muzero.replay.sum_tree import SumTree

END_OPEN, END_TERMINATED, END_TRUNCATED = 0, 1, 2

_REQUIRED = ("episode_id", "start", "observations", "actions", "rewards", "root_values",
             "policies", "to_play", "terminated", "truncated")
_OPTIONAL = ("legal_masks", "priorities")
_SEG_FIELDS = ("seg_episode", "seg_start", "seg_length", "seg_first_slot", "seg_prev", "seg_next")
# Initial value of the arrays that do not start as zeros (what a row holds until first written).
_INITIAL = {"legal_masks": True, "target_version": -1, **dict.fromkeys(_SEG_FIELDS, -1)}


def _scalar(segment: dict, name: str, kind: str):
    value = np.asarray(segment[name])
    if value.shape != ():
        raise ValueError(f"segment field '{name}' must be a scalar, got shape {value.shape}")
    if kind == "int" and value.dtype.kind not in "iu":
        raise ValueError(f"segment field '{name}' must be an integer, got dtype {value.dtype}")
    if kind == "bool" and value.dtype != np.bool_:
        raise ValueError(f"segment field '{name}' must be a bool, got dtype {value.dtype}")
    return value.item()


def _array(segment: dict, name: str, shape: tuple, kinds: str) -> np.ndarray:
    value = segment[name]
    if not isinstance(value, np.ndarray):
        raise ValueError(f"segment field '{name}' must be a numpy array, got {type(value).__name__}")
    if value.shape != shape:
        raise ValueError(f"segment field '{name}' has shape {value.shape}, expected {shape}")
    if value.dtype.kind not in kinds:
        raise ValueError(f"segment field '{name}' has dtype {value.dtype}, expected kind in '{kinds}'")
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        raise ValueError(f"segment field '{name}' holds non-finite values")
    return value


# Largest magnitude accepted for pushed rewards, values and priorities, and for float
# observations: far beyond any return this package trains on, far below float32 overflow
# (squared errors and value transforms of 3e38 overflow to inf and poison a training step).
MAX_ABS_SCALAR = 1e6
MAX_ABS_OBSERVATION = 1e9


def _check_finite(name: str, values: np.ndarray, limit: float) -> None:
    """Raises ValueError unless every value is finite and |value| <= limit."""
    if values.size == 0:
        return
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(f"segment field {name!r} holds a non-finite value ({values[bad].flat[0]}); "
                         "every value must be finite")
    peak = float(np.max(np.abs(values)))
    if peak > limit:
        raise ValueError(f"segment field {name!r} holds {peak:g}, beyond the accepted magnitude {limit:g}")


def validate_segment(segment: dict, descriptor: EnvDescriptor, capacity: int) -> dict:
    """Checks a pushed segment and returns its fields, converted to storage dtypes.

    Raises ValueError naming the first bad field. Values are checked too, not only shapes:
    every float field must be finite and within ``MAX_ABS_SCALAR`` (float observations
    within ``MAX_ABS_OBSERVATION``), so one poisoned push cannot break a training step.
    """
    if not isinstance(segment, dict):
        raise ValueError(f"a segment must be a dict of numpy arrays, got {type(segment).__name__}")
    missing = [k for k in _REQUIRED if k not in segment]
    if missing:
        raise ValueError(f"segment is missing field(s) {missing}")
    unknown = sorted(set(segment) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise ValueError(f"segment has unknown field(s) {unknown}; known: {sorted(_REQUIRED + _OPTIONAL)}")
    episode_id = _scalar(segment, "episode_id", "int")
    start = _scalar(segment, "start", "int")
    if not -2**63 <= episode_id < 2**63:
        raise ValueError(f"segment field 'episode_id'={episode_id} does not fit in int64")
    if not 0 <= start < 2**62:
        raise ValueError(f"segment field 'start'={start} must be in [0, 2**62)")
    terminated = _scalar(segment, "terminated", "bool")
    truncated = _scalar(segment, "truncated", "bool")
    if terminated and truncated:
        raise ValueError("segment fields 'terminated' and 'truncated' are both True; at most one may be")
    obs = segment["observations"]
    if not isinstance(obs, np.ndarray) or obs.ndim < 1:
        raise ValueError("segment field 'observations' must be a numpy array [T, *obs_shape]")
    t = obs.shape[0]
    if not 1 <= t <= capacity:
        raise ValueError(f"segment field 'observations' has T={t} steps; T must be in [1, {capacity}]")
    num_actions = descriptor.num_actions
    obs_shape = (t,) + tuple(descriptor.observation_shape)
    if obs.shape != obs_shape or obs.dtype != np.dtype(descriptor.observation_dtype):
        raise ValueError(f"segment field 'observations' is {obs.shape} {obs.dtype}, expected "
                         f"{obs_shape} {descriptor.observation_dtype}")
    if obs.dtype.kind == "f":
        _check_finite("observations", obs, MAX_ABS_OBSERVATION)
    actions = _array(segment, "actions", (t,), "iu")
    if actions.min() < 0 or actions.max() >= num_actions:
        raise ValueError(f"segment field 'actions' must lie in [0, {num_actions}), got "
                         f"[{actions.min()}, {actions.max()}]")
    rewards = _array(segment, "rewards", (t,), "f")
    root_values = _array(segment, "root_values", (t,), "f")
    policies = _array(segment, "policies", (t, num_actions), "f")
    _check_finite("rewards", rewards, MAX_ABS_SCALAR)
    _check_finite("root_values", root_values, MAX_ABS_SCALAR)
    _check_finite("policies", policies, 1.0 + 1e-3)
    if policies.min() < 0 or np.max(np.abs(policies.sum(axis=1) - 1.0)) > 1e-3:
        raise ValueError("segment field 'policies' rows must be non-negative and sum to 1 (tolerance 1e-3)")
    to_play = _array(segment, "to_play", (t,), "iu")
    max_player = 1 if descriptor.two_player else 0
    if to_play.min() < 0 or to_play.max() > max_player:
        raise ValueError(f"segment field 'to_play' must lie in [0, {max_player}], got "
                         f"[{to_play.min()}, {to_play.max()}]")
    out = dict(episode_id=int(episode_id), start=int(start), terminated=bool(terminated),
               truncated=bool(truncated), observations=obs, actions=actions.astype(np.int32),
               rewards=rewards.astype(np.float32), root_values=root_values.astype(np.float32),
               policies=policies.astype(np.float32), to_play=to_play.astype(np.int8),
               legal_masks=None, priorities=None)
    if segment.get("legal_masks") is not None:
        masks = _array(segment, "legal_masks", (t, num_actions), "b")
        if not np.all(masks.any(axis=1)):
            raise ValueError("segment field 'legal_masks' has a step with no legal action")
        out["legal_masks"] = masks
    if segment.get("priorities") is not None:
        prio = _array(segment, "priorities", (t,), "f")
        _check_finite("priorities", prio, MAX_ABS_SCALAR)
        if prio.min() < 0:
            raise ValueError(f"segment field 'priorities' must be >= 0, got min {prio.min()}")
        out["priorities"] = prio.astype(np.float32)
    return out


class TrajectoryStore:
    """Segments, chaining, FIFO eviction, priorities and byte accounting (not thread-safe).

    Args:
      descriptor: the env's static facts.
      capacity: C, the number of env steps held.
      history: past steps a position needs stored to be sampleable (see module doc).
      priority_exponent: alpha; leaf weight = max(priority, min_priority) ** alpha.
      min_priority: lower clip of priorities.
      reanalyse: keep ``target_version`` and a second sum tree, ``refreshed_tree``, whose
        leaves are the main tree's for positions with a reanalysed target (version >= 0)
        and 0 elsewhere (docs/REANALYSE.md).
      recorded_below: if set, positions of episodes whose id is <= this are recorded ones (a
        dataset's, which carry negative ids; ``is_recorded``).
      recorded_share: keep a third sum tree, ``recorded_tree``, whose leaves are the main
        tree's for recorded positions and 0 elsewhere, so a sampler can draw a share from them
        (needs ``recorded_below``).
      relink_steps: how many of the last stored steps before a link get the maximum
        priority again when the next segment of their episode arrives; the targets' n
        (``td_steps``), -1 for every stored step of the chain (Monte-Carlo targets), 0 for
        none. See ``_reprioritise_before``.
    """

    def __init__(self, descriptor: EnvDescriptor, capacity: int, history: int,
                 priority_exponent: float, min_priority: float, reanalyse: bool = False,
                 relink_steps: int = 0, recorded_below: Optional[int] = None, recorded_share: bool = False):
        c, a = int(capacity), int(descriptor.num_actions)
        self.descriptor = descriptor
        self.capacity = c
        self.history = int(history)
        self.alpha = float(priority_exponent)
        self.min_priority = float(min_priority)
        self.relink_steps = int(relink_steps)
        self.observations = np.zeros((c + 1,) + tuple(descriptor.observation_shape),
                                     dtype=np.dtype(descriptor.observation_dtype))
        self.actions = np.zeros(c, np.int32)
        self.rewards = np.zeros(c, np.float32)
        self.root_values = np.zeros(c, np.float32)
        self.policies = np.zeros((c, a), np.float32)
        self.to_play = np.zeros(c, np.int8)
        self.legal_masks = np.ones((c, a), np.bool_) if descriptor.has_legal_mask else None
        self.priorities = np.zeros(c, np.float32)
        self.sampleable = np.zeros(c, np.bool_)
        self.slot_segment = np.zeros(c, np.int32)
        for name in _SEG_FIELDS:
            setattr(self, name, np.full(c, -1, np.int64))
        self.seg_end = np.zeros(c, np.int8)
        self.tree = SumTree(c)
        self.target_version = np.full(c, -1, np.int64) if reanalyse else None
        self.refreshed_tree = SumTree(c) if reanalyse else None
        self.recorded_below = None if recorded_below is None else int(recorded_below)
        if recorded_share and recorded_below is None:
            raise ValueError("recorded_share needs recorded_below: which episode ids are recorded ones")
        self.recorded_tree = SumTree(c) if recorded_share else None
        self.head = 0          # global index of the next step to insert
        self.tail = 0          # global index of the oldest stored step
        self.seg_head = 0      # id of the next segment
        self.seg_tail = 0      # id of the oldest stored segment
        self.max_priority = 1.0
        self.num_sampleable = 0
        self.inserted_steps = 0
        # episode_id -> [id of its newest stored segment, first stored step of its chain]
        self.episodes: dict[int, list] = {}

    # ------------------------------------------------------------------ sizes
    @property
    def num_steps(self) -> int:
        return self.head - self.tail

    @property
    def num_segments(self) -> int:
        return self.seg_head - self.seg_tail

    def bytes_per_step(self) -> int:
        """Bytes of one stored step across the per-step arrays, including its sum-tree leaf."""
        per = sum(arr[0].nbytes for arr in self._step_arrays())
        trees = len(self._trees())
        return int(per + trees * self.tree.tree.itemsize)

    def bytes_per_segment(self) -> int:
        return int(sum(getattr(self, n).itemsize for n in _SEG_FIELDS) + self.seg_end.itemsize)

    @property
    def bytes_used(self) -> int:
        """Bytes of the array rows that hold live steps and live segment records."""
        return self.num_steps * self.bytes_per_step() + self.num_segments * self.bytes_per_segment()

    @property
    def bytes_allocated(self) -> int:
        """Bytes of every preallocated array (live or not), sum tree included."""
        seg = sum(getattr(self, n).nbytes for n in _SEG_FIELDS) + self.seg_end.nbytes
        trees = sum(tree.nbytes for tree in self._trees())
        return int(sum(arr.nbytes for arr in self._step_arrays()) + seg + trees)

    def _trees(self) -> list:
        return [t for t in (self.tree, self.refreshed_tree, self.recorded_tree) if t is not None]

    def _step_arrays(self):
        arrays = [self.observations, self.actions, self.rewards, self.root_values, self.policies,
                  self.to_play, self.priorities, self.sampleable, self.slot_segment]
        if self.legal_masks is not None:
            arrays.append(self.legal_masks)
        if self.target_version is not None:
            arrays.append(self.target_version)
        return arrays

    def _set_leaves(self, slots: np.ndarray, weights: np.ndarray) -> None:
        """Sets leaf weights in the sum tree, in the refreshed tree where the slot's target
        was reanalysed and in the recorded tree where the slot is a recorded episode's (0
        elsewhere)."""
        self.tree.set(slots, weights)
        if self.refreshed_tree is not None:
            refreshed = self.target_version[np.asarray(slots, np.int64)] >= 0
            self.refreshed_tree.set(slots, np.where(refreshed, weights, 0.0))
        if self.recorded_tree is not None:
            self.recorded_tree.set(slots, np.where(self.is_recorded(slots), weights, 0.0))

    def is_recorded(self, slots: np.ndarray) -> np.ndarray:
        """[N] bool: whether each slot holds a step of a recorded episode (``recorded_below``)."""
        if self.recorded_below is None:
            return np.zeros(np.shape(slots), bool)
        return self.seg_episode[self.slot_segment[np.asarray(slots, np.int64)]] <= self.recorded_below

    # ------------------------------------------------------------------ insert
    def _stored_end(self, episode_id: int):
        """(next expected start, how the stored episode ended or None) for a stored episode, else None."""
        entry = self.episodes.get(episode_id)
        if entry is None:
            return None
        row = entry[0] % self.capacity
        end = int(self.seg_end[row])
        how = None if end == END_OPEN else ("terminated" if end == END_TERMINATED else "truncated")
        return int(self.seg_start[row] + self.seg_length[row]), how

    def check_chain(self, segments: list) -> None:
        """Raises ValueError if any of these validated segments, inserted in order, would overlap
        its stored episode or arrive after that episode ended. Changes nothing.

        A segment that starts *after* the stored end (a gap: the segments between were lost,
        e.g. across a learner restart) is accepted and starts a new chain.
        """
        pending: dict = {}
        for seg in segments:
            episode_id, start = seg["episode_id"], seg["start"]
            state = pending.get(episode_id) or self._stored_end(episode_id)
            if state is not None:
                expected, how = state
                if how is not None:
                    raise ValueError(f"segment for episode_id={episode_id} with start={start} arrived after "
                                     f"the episode {how} at step {expected}")
                if start < expected:
                    raise ValueError(f"segment field 'start'={start} for episode_id={episode_id} overlaps "
                                     f"the stored episode, which continues at start={expected}")
            ended = "terminated" if seg["terminated"] else "truncated" if seg["truncated"] else None
            pending[episode_id] = (start + seg["observations"].shape[0], ended)

    def insert(self, seg: dict) -> None:
        """Stores a validated segment (output of :func:`validate_segment`)."""
        c, t = self.capacity, seg["observations"].shape[0]
        episode_id, start = seg["episode_id"], seg["start"]
        self.check_chain([seg])
        while self.num_steps + t > c:
            self._evict_oldest()
        # Eviction may have removed the predecessor; a gap starts a new chain.
        state = self._stored_end(episode_id)
        entry = self.episodes.get(episode_id) if state is not None and state[0] == start else None
        prev_id = entry[0] if entry is not None else -1
        chain_first = entry[1] if entry is not None else start

        seg_id, row = self.seg_head, self.seg_head % c
        slots = (self.head + np.arange(t, dtype=np.int64)) % c  # [T]
        self.observations[slots] = seg["observations"]
        self.actions[slots] = seg["actions"]
        self.rewards[slots] = seg["rewards"]
        self.root_values[slots] = seg["root_values"]
        self.policies[slots] = seg["policies"]
        self.to_play[slots] = seg["to_play"]
        if self.legal_masks is not None:
            self.legal_masks[slots] = True if seg["legal_masks"] is None else seg["legal_masks"]
        if seg["priorities"] is None:
            prio = np.full(t, self.max_priority, np.float32)
        else:
            prio = np.maximum(seg["priorities"], np.float32(self.min_priority))
            self.max_priority = max(self.max_priority, float(prio.max()))
        self.priorities[slots] = prio
        if self.target_version is not None:
            self.target_version[slots] = -1
        steps = start + np.arange(t, dtype=np.int64)
        ok = (chain_first == 0) | (steps >= chain_first + self.history)  # [T]
        self.sampleable[slots] = ok
        self.num_sampleable += int(ok.sum())
        self.slot_segment[slots] = row

        self.seg_episode[row] = episode_id
        self.seg_start[row] = start
        self.seg_length[row] = t
        self.seg_first_slot[row] = self.head % c
        self.seg_prev[row] = prev_id
        self.seg_next[row] = -1
        self.seg_end[row] = (END_TERMINATED if seg["terminated"] else
                             END_TRUNCATED if seg["truncated"] else END_OPEN)
        self._set_leaves(slots, np.where(ok, self._weights(prio), 0.0))   # after the episode id: recorded_tree
        if prev_id >= 0:
            self.seg_next[prev_id % c] = seg_id
            self._reprioritise_before(prev_id)
        self.episodes[episode_id] = [seg_id, chain_first]
        self.head += t
        self.seg_head += 1
        self.inserted_steps += t

    def _reprioritise_before(self, seg_id: int) -> None:
        """Gives the last ``relink_steps`` stored steps up to the end of segment ``seg_id``
        (walking back through earlier segments of the chain) the maximum priority, as new
        steps get: the next segment of their episode just arrived.

        While an episode is still being played, a position fewer than n steps before its
        stored end has a value target cut short there: it bootstraps from the last stored
        root value instead of reaching n steps ahead, and at the last stored step the target
        is that step's own value, so its error and its priority are about 0. Priorities are
        only rewritten when a position is sampled, so such a position kept ``min_priority``
        (sampling weight ~0.016 against ~0.3-1 with alpha 0.6) after its full target became
        available, until drawn again: in a 30-minute Breakout run one in seven last steps of
        segments whose episode went on was still at that floor at the end.
        """
        c = self.capacity
        want = self.num_steps if self.relink_steps < 0 else self.relink_steps
        parts = []
        sid = int(seg_id)
        while want > 0 and sid >= self.seg_tail:
            r = sid % c
            length = int(self.seg_length[r])
            n = min(want, length)
            parts.append((self.seg_first_slot[r] + length - n + np.arange(n, dtype=np.int64)) % c)
            want -= n
            sid = int(self.seg_prev[r])
        if not parts:
            return
        slots = np.concatenate(parts)
        self._write_priorities(slots, np.full(slots.size, self.max_priority, np.float32))

    def _write_priorities(self, slots: np.ndarray, prio: np.ndarray) -> None:
        """Sets raw priorities [N] (already clipped) of live slots [N] and their leaves."""
        self.priorities[slots] = prio
        self.max_priority = max(self.max_priority, float(prio.max()))
        self._set_leaves(slots, np.where(self.sampleable[slots], self._weights(prio), 0.0))

    def _weights(self, priorities: np.ndarray) -> np.ndarray:
        return np.power(priorities.astype(np.float64), self.alpha)

    def _evict_oldest(self) -> None:
        c = self.capacity
        seg_id, row = self.seg_tail, self.seg_tail % c
        length = int(self.seg_length[row])
        slots = (self.seg_first_slot[row] + np.arange(length, dtype=np.int64)) % c
        self.num_sampleable -= int(self.sampleable[slots].sum())
        self.sampleable[slots] = False
        self._set_leaves(slots, np.zeros(length))
        episode_id = int(self.seg_episode[row])
        next_id = int(self.seg_next[row])
        self.tail += length
        self.seg_tail += 1
        if next_id < 0:
            entry = self.episodes.get(episode_id)
            if entry is not None and entry[0] == seg_id:
                del self.episodes[episode_id]
            return
        # The episode lives on in later segments whose first positions lose their history.
        chain_first = int(self.seg_start[next_id % c])
        self.episodes[episode_id][1] = chain_first
        limit = chain_first + self.history
        sid = next_id
        while sid >= 0 and self.seg_start[sid % c] < limit:
            r = sid % c
            count = int(min(self.seg_length[r], limit - self.seg_start[r]))
            lost = (self.seg_first_slot[r] + np.arange(count, dtype=np.int64)) % c
            self.num_sampleable -= int(self.sampleable[lost].sum())
            self.sampleable[lost] = False
            self._set_leaves(lost, np.zeros(count))
            sid = int(self.seg_next[r])

    def whole_episodes(self) -> list:
        """[(episode_id, slots [T] int64 in step order, end)] of the stored episodes held from
        their first step on (start 0), each up to its end or to a gap in its chain (segments
        lost, e.g. across a learner restart: what follows the gap is left out, and the part
        before it ends open), in the order their first segments arrived; ``end`` is
        END_TERMINATED, END_TRUNCATED or END_OPEN (still being played, or cut by a gap)."""
        c, out = self.capacity, []
        for seg_id in range(self.seg_tail, self.seg_head):
            row = seg_id % c
            if self.seg_start[row] != 0 or self.seg_prev[row] >= self.seg_tail:
                continue          # not an episode's first step, or its predecessor is stored
            parts, link = [], seg_id
            while True:
                r = link % c
                parts.append(self.seg_first_slot[r] + np.arange(self.seg_length[r], dtype=np.int64))
                nxt = int(self.seg_next[r])
                if nxt <= link or nxt >= self.seg_head:   # none, evicted, or a damaged table
                    break
                link = nxt
            out.append((int(self.seg_episode[row]), np.concatenate(parts) % c, int(self.seg_end[r])))
        return out

    # ------------------------------------------------------------------ priorities
    def global_index(self, slots: np.ndarray) -> np.ndarray:
        """[B] slots of live steps -> [B] int64 global indices."""
        c = self.capacity
        return self.tail + (np.asarray(slots, np.int64) - self.tail % c) % c

    def update_priorities(self, index: np.ndarray, priorities: np.ndarray) -> int:
        """Sets raw priorities of live global indices; returns how many were live."""
        index = np.asarray(index)
        priorities = np.asarray(priorities)
        if index.ndim != 1 or index.dtype.kind not in "iu":
            raise ValueError(f"index must be a [B] integer array, got {index.shape} {index.dtype}")
        if priorities.shape != index.shape:
            raise ValueError(f"priorities shape {priorities.shape} must equal index shape {index.shape}")
        if priorities.size and not (np.all(np.isfinite(priorities)) and priorities.min() >= 0):
            raise ValueError("priorities must be finite and >= 0")
        live = (index >= self.tail) & (index < self.head)
        index = index[live].astype(np.int64)
        if index.size == 0:
            return 0
        slots = index % self.capacity
        self._write_priorities(slots, np.maximum(priorities[live].astype(np.float32),
                                                 np.float32(self.min_priority)))
        return int(index.size)

    # ------------------------------------------------------------------ reanalyse
    def write_reanalysed(self, index: np.ndarray, policies: np.ndarray, root_values: np.ndarray,
                         version: int) -> int:
        """Replaces the policy targets [M, A] and root values [M] of live global indices
        [M] with reanalysed ones made with weights ``version``; evicted indices are
        skipped. Returns how many were written."""
        if self.target_version is None:
            raise ValueError("this replay keeps no reanalysed targets (targets.reanalyse_fraction is 0)")
        index = np.asarray(index)
        if index.ndim != 1 or index.dtype.kind not in "iu":
            raise ValueError(f"index must be a [M] integer array, got {index.shape} {index.dtype}")
        a = self.policies.shape[1]
        policies = np.asarray(policies, np.float32)
        root_values = np.asarray(root_values, np.float32)
        if policies.shape != (index.size, a) or root_values.shape != index.shape:
            raise ValueError(f"policies {policies.shape} / root_values {root_values.shape} must be "
                             f"[{index.size}, {a}] / [{index.size}]")
        _check_finite("root_values", root_values, MAX_ABS_SCALAR)
        _check_finite("policies", policies, 1.0 + 1e-3)
        if policies.size and (policies.min() < 0 or np.max(np.abs(policies.sum(axis=1) - 1.0)) > 1e-3):
            raise ValueError("reanalysed policies must be non-negative rows that sum to 1 (tolerance 1e-3)")
        if isinstance(version, bool) or not 0 <= int(version) < 2**62:
            raise ValueError(f"version={version!r} must be an integer in [0, 2**62)")
        live = (index >= self.tail) & (index < self.head)
        slots = index[live].astype(np.int64) % self.capacity
        if slots.size == 0:
            return 0
        self.policies[slots] = policies[live]
        self.root_values[slots] = root_values[live]
        self.target_version[slots] = int(version)
        self.refreshed_tree.set(slots, self.tree.leaves()[slots])
        return int(slots.size)

    # ------------------------------------------------------------------ state
    _COUNTERS = ("head", "tail", "seg_head", "seg_tail", "max_priority", "num_sampleable",
                 "inserted_steps")

    def array_fields(self) -> list:
        names = ["observations", "actions", "rewards", "root_values", "policies", "to_play",
                 "priorities", "sampleable", "slot_segment", "seg_end", *_SEG_FIELDS]
        if self.legal_masks is not None:
            names.append("legal_masks")
        if self.target_version is not None:
            names.append("target_version")
        return names

    def state(self) -> tuple[dict, dict]:
        """(arrays by name, JSON-able counters): everything needed to rebuild this store.

        Until the ring first wraps (``head < capacity``) only rows ``[0, head)`` of every
        array have ever been written (segment ids stay below ``head`` too: each segment
        holds a step), so only those rows are returned; the rest hold their initial
        values, which ``load_state`` puts back. An early snapshot of a large replay is
        therefore as small as its contents. ``counters["rows"]`` says how many rows the
        arrays have (``capacity`` for the whole arrays, frames' padding row included).
        The sum tree is not part of the state: it is a pure function of the raw
        priorities, the sampleable flags and alpha, and is rebuilt on load.
        """
        rows = min(self.head, self.capacity)
        arrays = {name: getattr(self, name) if rows == self.capacity else getattr(self, name)[:rows]
                  for name in self.array_fields()}
        counters = {name: getattr(self, name) for name in self._COUNTERS}
        counters["episodes"] = [[k, v[0], v[1]] for k, v in self.episodes.items()]
        counters["capacity"], counters["rows"] = self.capacity, rows
        return arrays, counters

    def load_state(self, arrays: dict, counters: dict) -> None:
        """Loads ``state()``'s output. Counters without ``capacity``/``rows`` (snapshots
        written before arrays were trimmed) mean whole arrays."""
        capacity = int(counters.get("capacity", self.capacity))
        if capacity != self.capacity:
            raise ValueError(f"the snapshot's store has capacity {capacity}; this one has {self.capacity}")
        rows = int(counters.get("rows", capacity))
        # Only rows this store has written (all of them, padding row included, once its ring
        # wrapped) can differ from their initial values, so the rows past the snapshot's are
        # reset up to there and no further. Writing the rest would commit a fresh store's
        # whole ring (lazily zeroed pages) at load, gigabytes for Atari's replay.
        wrapped = self.head >= self.capacity
        for name in self.array_fields():
            if name == "target_version" and name not in arrays:
                # A snapshot written without reanalyse: its stored targets are the actors'.
                self.target_version[...] = -1
                continue
            target, source = getattr(self, name), arrays[name]
            shape = target.shape if rows == capacity else (rows,) + target.shape[1:]
            if source.shape != shape or source.dtype != target.dtype:
                raise ValueError(f"snapshot array '{name}' is {source.shape} {source.dtype}, "
                                 f"expected {shape} {target.dtype}")
            target[:len(source)] = source
            end = len(target) if wrapped else max(len(source), self.head)
            target[len(source):end] = _INITIAL.get(name, 0)
        for name in self._COUNTERS:
            setattr(self, name, type(getattr(self, name))(counters[name]))
        self.episodes = {int(k): [int(s), int(f)] for k, s, f in counters["episodes"]}
        self.tree.tree[:] = 0.0
        self.tree.leaves()[:] = np.where(self.sampleable, self._weights(self.priorities), 0.0)
        self.tree.rebuild()
        if self.refreshed_tree is not None:
            self.refreshed_tree.tree[:] = 0.0
            self.refreshed_tree.leaves()[:] = np.where(self.target_version >= 0, self.tree.leaves(), 0.0)
            self.refreshed_tree.rebuild()
        if self.recorded_tree is not None:
            self.recorded_tree.tree[:] = 0.0
            self.recorded_tree.leaves()[:] = np.where(self.is_recorded(np.arange(self.capacity)), self.tree.leaves(), 0.0)
            self.recorded_tree.rebuild()
