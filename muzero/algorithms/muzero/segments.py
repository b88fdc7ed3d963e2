"""Builds replay segments from E envs stepped in lockstep.

Each env fills its own row of preallocated arrays; a row is emitted as a segment
(a dict of NumPy arrays, the format ``muzero.replay.Replay.insert`` takes) when it
holds ``segment_length`` steps or its episode ends. Step t of a segment holds the
observation seen before acting (o_t), the action a_t, the reward after it
(r_{t+1}, the mover's view in two-player games), the search root value and visit
distribution at o_t, ``to_play`` at o_t and the legal mask at o_t.

Episode ids are random 62-bit integers from the operating system's entropy, not from
the actor's seeded generator, so segments of a restarted actor (same seed, a new run)
never chain onto episodes of its previous run.

Imports no TensorFlow.
"""
from __future__ import annotations

import secrets

import numpy as np


class SegmentBuilder:
    """Per-env step buffers ``[E, T, ...]`` written with whole-batch NumPy stores."""

    def __init__(self, num_envs: int, observation_shape: tuple, observation_dtype, num_actions: int,
                 segment_length: int, with_legal_masks: bool):
        e, t, a = num_envs, segment_length, num_actions
        self.num_envs, self.segment_length = e, t
        self._rng = np.random.default_rng(secrets.randbits(128))
        self.observations = np.zeros((e, t) + tuple(observation_shape), dtype=observation_dtype)
        self.actions = np.zeros((e, t), np.int32)
        self.rewards = np.zeros((e, t), np.float32)
        self.root_values = np.zeros((e, t), np.float32)
        self.policies = np.zeros((e, t, a), np.float32)
        self.to_play = np.zeros((e, t), np.int8)
        self.legal_masks = np.ones((e, t, a), bool) if with_legal_masks else None
        self.pos = np.zeros(e, np.int64)          # steps held per env
        self.start = np.zeros(e, np.int64)        # episode index of each row's first step
        self.episode_id = self._new_ids(e)

    def _new_ids(self, n: int) -> np.ndarray:
        return self._rng.integers(1, 2 ** 62, size=n, dtype=np.int64)

    def add(self, observation, action, reward, root_value, policy, to_play, legal_mask,
            terminated, truncated) -> list:
        """Records one step of every env; returns the segments completed by it.

        Args (all batched over E): observation [E, *obs] (seen before acting), action [E],
        reward [E] (after the action), root_value [E], policy [E, A], to_play [E],
        legal_mask [E, A] or None, terminated [E] bool, truncated [E] bool.
        """
        rows, p = np.arange(self.num_envs), self.pos
        self.observations[rows, p] = observation
        self.actions[rows, p] = action
        self.rewards[rows, p] = reward
        self.root_values[rows, p] = root_value
        self.policies[rows, p] = policy
        self.to_play[rows, p] = to_play
        if self.legal_masks is not None and legal_mask is not None:
            self.legal_masks[rows, p] = legal_mask
        self.pos += 1
        done = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        emit = done | (self.pos == self.segment_length)
        segments = [self._segment(i, bool(terminated[i]), bool(truncated[i]) and not bool(terminated[i]))
                    for i in np.flatnonzero(emit)]
        self.start[emit & ~done] += self.pos[emit & ~done]
        self.start[done] = 0
        self.episode_id[done] = self._new_ids(int(done.sum()))
        self.pos[emit] = 0
        return segments

    def flush(self) -> list:
        """Emits every non-empty row as an unfinished segment (actor shutdown)."""
        rows = np.flatnonzero(self.pos > 0)
        segments = [self._segment(i, False, False) for i in rows]
        self.start[rows] += self.pos[rows]
        self.pos[rows] = 0
        return segments

    def _segment(self, i: int, terminated: bool, truncated: bool) -> dict:
        n = int(self.pos[i])
        seg = {
            "episode_id": np.int64(self.episode_id[i]),
            "start": np.int64(self.start[i]),
            "observations": self.observations[i, :n].copy(),
            "actions": self.actions[i, :n].copy(),
            "rewards": self.rewards[i, :n].copy(),
            "root_values": self.root_values[i, :n].copy(),
            "policies": self.policies[i, :n].copy(),
            "to_play": self.to_play[i, :n].copy(),
            "terminated": np.bool_(terminated),
            "truncated": np.bool_(truncated),
        }
        if self.legal_masks is not None:
            seg["legal_masks"] = self.legal_masks[i, :n].copy()
        return seg
