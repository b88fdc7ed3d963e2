"""Hindsight experience replay (Andrychowicz et al. 2017) for goal-conditioned envs.

A goal env's flat observation holds ``observation``, ``achieved_goal`` and ``desired_goal``
(``envs.EnvDescriptor.goal_layout``). ``relabel(episode)`` takes one finished episode's
transitions and returns them followed by ``relabels`` copies of each with a substituted
goal g':

* strategy ``future``: g' is the goal achieved at a step drawn uniformly from the
  transition's own next state to the end of the episode;
* strategy ``final``: g' is the goal achieved at the episode's last state.

In a copy, the desired-goal part of both the observation and the next observation
becomes g', and the reward becomes ``compute_reward(achieved goal of the next
observation, g')`` — the env's own reward function, vectorised. Everything else (action,
discount) is kept.

Episodes are assembled per env by ``EpisodeAssembler`` from streamed transitions: the
transitions of an env accumulate until one ends an episode (terminated or truncated),
then the whole episode is relabelled and handed on. Transitions of an episode still
running when the learner stops are not stored.

Imports NumPy only.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

STRATEGIES = ("future", "final")


class HindsightRelabeller:
    """Relabels whole episodes of transitions.

    Args:
      goal_slices: ``{"observation"|"achieved_goal"|"desired_goal": slice}`` into the flat
        observation (``EnvDescriptor.goal_slices()``).
      compute_reward: ``(achieved [N, g], desired [N, g]) -> [N]`` rewards.
      relabels: copies per transition, k >= 1.
      strategy: ``future`` or ``final``.
      rng: a NumPy generator (draws the future steps).
    """

    def __init__(self, goal_slices: dict, compute_reward: Callable, relabels: int, strategy: str,
                 rng: np.random.Generator):
        if sorted(goal_slices) != ["achieved_goal", "desired_goal", "observation"]:
            raise ValueError(f"goal_slices must name observation, achieved_goal and desired_goal; got "
                             f"{sorted(goal_slices)}")
        if strategy not in STRATEGIES:
            raise ValueError(f"HER strategy {strategy!r} must be one of {list(STRATEGIES)}")
        if relabels < 1:
            raise ValueError(f"HER relabels={relabels} must be >= 1")
        self.achieved = goal_slices["achieved_goal"]
        self.desired = goal_slices["desired_goal"]
        self.compute_reward = compute_reward
        self.relabels = int(relabels)
        self.strategy = strategy
        self.rng = rng

    def goal_steps(self, length: int) -> np.ndarray:
        """[length, k] int: for each transition t, the steps whose next-state achieved goals
        become its substitute goals (``future``: uniform in [t, length - 1]; ``final``:
        length - 1)."""
        t = np.arange(length)[:, None]
        if self.strategy == "final":
            return np.full((length, self.relabels), length - 1)
        return t + np.floor(self.rng.random((length, self.relabels)) * (length - t)).astype(np.int64)

    def relabel(self, episode: dict) -> dict:
        """``{observation [L, o], next_observation [L, o], action, reward [L], discount [L], ...}``
        -> the same fields with L * (1 + k) rows: the L originals, then copy j of every
        transition for j = 1..k (rows L * j + t)."""
        obs, nxt = episode["observation"], episode["next_observation"]
        length = len(obs)
        steps = self.goal_steps(length)                          # [L, k]
        goals = nxt[:, self.achieved][steps.T.reshape(-1)]        # [k * L, g], copy-major
        out = {key: np.concatenate([value] + [value] * self.relabels) for key, value in episode.items()}
        new_obs, new_next = out["observation"][length:], out["next_observation"][length:]
        new_obs[:, self.desired] = goals
        new_next[:, self.desired] = goals
        rewards = self.compute_reward(new_next[:, self.achieved], goals)
        out["reward"][length:] = np.asarray(rewards, out["reward"].dtype).reshape(-1)
        return out


class EpisodeAssembler:
    """Collects streamed transitions per env until an episode ends.

    ``add(env_id, transitions, ends, run_id)``: transitions ``{field: [n, ...]}`` of one env
    in order, ends [n] bool (the transition ended an episode), ``run_id`` the actor run they
    came from. Returns the finished episodes (dicts of arrays, oldest first). When an env's
    run id changes (its actor restarted, or its env id went to another actor), the episode
    the previous run had begun is dropped: the new run's steps never continue it."""

    def __init__(self, max_length: int = 100_000):
        self._parts: dict = {}
        self._run: dict = {}
        self.max_length = int(max_length)
        self.dropped = 0     # transitions never stored: episodes longer than max_length, or left unfinished

    def add(self, env_id: int, transitions: dict, ends: np.ndarray, run_id: int = 0) -> list:
        ends = np.asarray(ends, bool)
        if self._run.get(env_id, run_id) != run_id and env_id in self._parts:
            self.dropped += sum(len(p["reward"]) for p in self._parts.pop(env_id))
        self._run[env_id] = run_id
        finished, start = [], 0
        for stop in np.flatnonzero(ends) + 1:       # a loop over episode ends, not transitions
            piece = {k: v[start:stop] for k, v in transitions.items()}
            parts = self._parts.pop(env_id, []) + [piece]
            finished.append({k: np.concatenate([p[k] for p in parts]) for k in piece})
            start = stop
        if start < len(ends):
            parts = self._parts.setdefault(env_id, [])
            parts.append({k: v[start:] for k, v in transitions.items()})
            if sum(len(p["reward"]) for p in parts) > self.max_length:
                self.dropped += sum(len(p["reward"]) for p in parts)
                del self._parts[env_id]
        return finished

    def pending(self) -> int:
        """Transitions waiting for their episode to end."""
        return sum(len(p["reward"]) for parts in self._parts.values() for p in parts)
