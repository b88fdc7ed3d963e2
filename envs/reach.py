"""``reach``: a small continuous goal-reaching task in the Gymnasium-Robotics mould, in NumPy.

A point moves inside the box [-1, 1]^d (``dims``, default 3). Each step the action
a in [-1, 1]^d moves it by ``step_size * a`` (default 0.1), clipped to the box. Every
episode draws a start point and a goal uniformly from [-0.8, 0.8]^d and lasts
``max_episode_steps`` (default 50) steps, then is truncated; it never terminates.

The observation is the goal dict of Gymnasium-Robotics, flattened in the order
``observation`` (the point, d), ``achieved_goal`` (the point, d), ``desired_goal`` (the
goal, d); ``EnvDescriptor.goal_layout`` says where each part sits. The reward is
``compute_reward(achieved, desired) = -(||achieved - desired|| > threshold)`` (default
threshold 0.05, FetchReach's): 0 at the goal, -1 elsewhere, the sparse reward FetchReach uses, and an
episode succeeds when its final position is within ``threshold`` of the goal.

It stands in for ``gym:FetchReach-v4`` where MuJoCo is not installed: the same sparse,
goal-conditioned structure in three dimensions with the same 5 cm tolerance, at NumPy
speed. A random policy almost never ends within the tolerance, so without hindsight
relabelling the rewards carry almost no signal. (With ``dims=2, threshold=0.1`` the task
is easy enough for plain SAC.)
"""
from __future__ import annotations

import numpy as np

from envs.base import BatchStep, Env, EnvBatch, EnvDescriptor, EpisodeStats, StepResult

DEFAULTS = {"dims": 3, "threshold": 0.05, "step_size": 0.1, "max_episode_steps": 50}
_START_RANGE = 0.8


def _options(options: dict) -> dict:
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"env 'reach' takes the options {sorted(DEFAULTS)}; got {unknown}")
    out = dict(DEFAULTS, **options)
    if isinstance(out["dims"], bool) or not isinstance(out["dims"], int) or not 1 <= out["dims"] <= 16:
        raise ValueError(f"reach option dims={out['dims']!r} must be an integer in [1, 16]")
    for name in ("threshold", "step_size"):
        v = out[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 2:
            raise ValueError(f"reach option {name}={v!r} must be a number in (0, 2]")
    steps = out["max_episode_steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 100_000:
        raise ValueError(f"reach option max_episode_steps={steps!r} must be an integer in [1, 100000]")
    return out


def describe(**options) -> EnvDescriptor:
    o = _options(options)
    d = o["dims"]
    return EnvDescriptor(
        name="reach", observation_shape=(3 * d,), observation_dtype="float32", num_actions=0,
        kind="vector", reward_range=(-1.0, 0.0), value_range=(-float(o["max_episode_steps"]), 0.0),
        max_episode_steps=o["max_episode_steps"], action_kind="continuous", action_shape=(d,),
        action_low=(-1.0,) * d, action_high=(1.0,) * d,
        goal_layout=(("observation", 0, d), ("achieved_goal", d, 2 * d), ("desired_goal", 2 * d, 3 * d)))


def compute_reward(achieved_goal: np.ndarray, desired_goal: np.ndarray, threshold: float) -> np.ndarray:
    """[N, d], [N, d] -> [N] float32: 0 within ``threshold`` (Euclidean), -1 elsewhere."""
    distance = np.linalg.norm(np.asarray(achieved_goal, np.float64) - np.asarray(desired_goal, np.float64),
                              axis=-1)
    return -(distance > threshold).astype(np.float32)


class ReachBatch(EnvBatch):
    """E reach tasks stepped together (vectorised), reset in the same step."""

    def __init__(self, num_envs: int, seed: int = 0, **options):
        self.options = _options(options)
        self.descriptor = describe(**options)
        self.num_envs = num_envs
        self._rng = np.random.default_rng(seed)
        d = self.options["dims"]
        self.position = np.zeros((num_envs, d))
        self.goal = np.zeros((num_envs, d))
        self._steps = np.zeros(num_envs, np.int64)
        self._stats = EpisodeStats(num_envs)

    def _draw(self, rows: np.ndarray) -> None:
        d = self.options["dims"]
        self.position[rows] = self._rng.uniform(-_START_RANGE, _START_RANGE, (len(rows), d))
        self.goal[rows] = self._rng.uniform(-_START_RANGE, _START_RANGE, (len(rows), d))

    def _observation(self) -> np.ndarray:
        return np.concatenate([self.position, self.position, self.goal], axis=1).astype(np.float32)

    def compute_reward(self, achieved_goal, desired_goal) -> np.ndarray:
        return compute_reward(achieved_goal, desired_goal, self.options["threshold"])

    def _batch_step(self, reward, terminated, truncated, ep_return, ep_length, final=None) -> BatchStep:
        e = self.num_envs
        obs = self._observation()
        return BatchStep(obs, reward, terminated, truncated, np.ones((e, 0), bool), np.zeros(e, np.int8),
                         ep_return, ep_length, final_observation=obs if final is None else final)

    def reset(self) -> BatchStep:
        e = self.num_envs
        self._draw(np.arange(e))
        self._steps[:] = 0
        self._stats = EpisodeStats(e)
        zeros = np.zeros(e, bool)
        return self._batch_step(np.zeros(e, np.float32), zeros, zeros.copy(), *self._stats.no_episode())

    def step(self, actions) -> BatchStep:
        actions = self._check_actions(actions)
        o = self.options
        self.position = np.clip(self.position + o["step_size"] * actions, -1.0, 1.0)
        self._steps += 1
        reward = self.compute_reward(self.position, self.goal)
        terminated = np.zeros(self.num_envs, bool)
        truncated = self._steps >= o["max_episode_steps"]
        ep_return, ep_length = self._stats.update(reward, truncated)
        final = None
        if truncated.any():
            final = self._observation()
            rows = np.flatnonzero(truncated)
            self._draw(rows)
            self._steps[rows] = 0
        return self._batch_step(reward, terminated, truncated, ep_return, ep_length, final)


class Reach(Env):
    """One reach task (a batch of one behind the single-env interface)."""

    def __init__(self, seed: int = 0, **options):
        self._batch = ReachBatch(1, seed=seed, **options)
        self.descriptor = self._batch.descriptor

    def reset(self) -> np.ndarray:
        return self._batch.reset().observation[0]

    def step(self, action) -> StepResult:
        step = self._batch.step(np.asarray(action, np.float32).reshape(1, -1))
        done = bool(step.truncated[0])
        obs = step.final_observation[0] if done else step.observation[0]
        return StepResult(obs.copy(), float(step.reward[0]), False, done, {})

    @property
    def clipped_actions(self) -> int:
        return self._batch.clipped_actions

    def compute_reward(self, achieved_goal, desired_goal) -> np.ndarray:
        return self._batch.compute_reward(achieved_goal, desired_goal)
