"""CartPole-v1: Gymnasium's env for single use, and a NumPy batch with the same physics.

The batch integrates Gymnasium's CartPole-v1 equations (Euler, tau 0.02, force 10,
pole half-length 0.5, masses 1.0 and 0.1) for E carts at once, with the same
termination (|x| > 2.4 or |theta| > 12 degrees) and a 500-step truncation. Tests
check it step for step against ``gymnasium.make("CartPole-v1")``.

Option ``observe_velocity`` (default True): with False the observation is only the cart
position and the pole angle ``(x, theta)``, the standard "stateless CartPole" memory task:
the velocities must be inferred from successive observations, so a feed-forward policy
cannot balance the pole for long and a recurrent one can.
"""
from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np

from envs.base import BatchStep, Env, EnvBatch, EnvDescriptor, EpisodeStats, StepResult

MAX_EPISODE_STEPS = 500

DESCRIPTOR = EnvDescriptor(
    name="cartpole",
    observation_shape=(4,),
    observation_dtype="float32",
    num_actions=2,
    kind="vector",
    reward_range=(1.0, 1.0),
    value_range=(0.0, float(MAX_EPISODE_STEPS)),
    known_bounds=None,
    max_episode_steps=MAX_EPISODE_STEPS,
)

STATELESS_DESCRIPTOR = dataclasses.replace(DESCRIPTOR, observation_shape=(2,))

# The cart mirrored about the centre of the track: the equations are odd in the state and
# the force, the limits |x| <= 2.4 and |theta| <= 12 degrees and the start states (uniform
# in +-0.05) are symmetric, so the negated state with push left (0) and push right (1)
# swapped is an equally likely CartPole, with the same rewards (envs.mirror_actions).
MIRROR = (1, 0)
_POSITIONS = [0, 2]            # x and theta in (x, x_dot, theta, theta_dot)


def describe(observe_velocity: bool = True) -> EnvDescriptor:
    _check_option(observe_velocity)
    return DESCRIPTOR if observe_velocity else STATELESS_DESCRIPTOR


def _check_option(observe_velocity) -> None:
    if not isinstance(observe_velocity, bool):
        raise ValueError(f"cartpole option observe_velocity={observe_velocity!r} must be true or false")


# Gymnasium CartPole-v1 constants.
GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_CART + MASS_POLE
HALF_LENGTH = 0.5
POLEMASS_LENGTH = MASS_POLE * HALF_LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_LIMIT = 12 * 2 * np.pi / 360
X_LIMIT = 2.4


class CartPole(Env):
    """Gymnasium ``CartPole-v1`` (500-step time limit reported as truncation)."""

    def __init__(self, seed: int = 0, observe_velocity: bool = True):
        self.descriptor = describe(observe_velocity)
        self._observe_velocity = observe_velocity
        self._env = gymnasium.make("CartPole-v1")
        self._seed = seed
        self._seeded = False

    def _observe(self, obs) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        return obs if self._observe_velocity else obs[_POSITIONS]

    def reset(self) -> np.ndarray:
        if not self._seeded:
            obs, _ = self._env.reset(seed=self._seed)
            self._seeded = True
        else:
            obs, _ = self._env.reset()
        return self._observe(obs)

    def step(self, action: int) -> StepResult:
        if not 0 <= int(action) < 2:
            raise ValueError(f"CartPole action {action!r} out of range: must be 0 or 1")
        obs, reward, terminated, truncated, info = self._env.step(int(action))
        return StepResult(self._observe(obs), float(reward), bool(terminated),
                          bool(truncated) and not terminated, info)

    @property
    def state(self) -> np.ndarray:
        return np.array(self._env.unwrapped.state, dtype=np.float64)

    def close(self) -> None:
        self._env.close()


class CartPoleBatch(EnvBatch):
    """E CartPole-v1 carts integrated together in NumPy, reset in the same step."""

    def __init__(self, num_envs: int, seed: int = 0, max_episode_steps: int = MAX_EPISODE_STEPS,
                 observe_velocity: bool = True):
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps={max_episode_steps} must be >= 1")
        self.descriptor = describe(observe_velocity)
        self._columns = slice(None) if observe_velocity else _POSITIONS
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self._rng = np.random.default_rng(seed)
        self.state = np.zeros((num_envs, 4), dtype=np.float64)   # [E, (x, x_dot, theta, theta_dot)]
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._stats = EpisodeStats(num_envs)

    def _new_states(self, n: int) -> np.ndarray:
        return self._rng.uniform(-0.05, 0.05, size=(n, 4))

    def _batch_step(self, reward, terminated, truncated, ep_return, ep_length, final=None) -> BatchStep:
        """final: [E, 4] float32 pre-reset observations when an env is done, else None
        (then ``final_observation`` is the observation array itself)."""
        e = self.num_envs
        obs = self.state[:, self._columns].astype(np.float32)
        if final is not None:
            final = final[:, self._columns]
        return BatchStep(obs, reward, terminated, truncated,
                         np.ones((e, 2), bool), np.zeros(e, np.int8), ep_return, ep_length,
                         final_observation=obs if final is None else final)

    def reset(self) -> BatchStep:
        e = self.num_envs
        self.state[:] = self._new_states(e)
        self._steps[:] = 0
        self._stats = EpisodeStats(e)
        zeros = np.zeros(e, bool)
        return self._batch_step(np.zeros(e, np.float32), zeros, zeros.copy(), *self._stats.no_episode())

    def step(self, actions) -> BatchStep:
        actions = self._check_actions(actions)
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(actions == 1, FORCE_MAG, -FORCE_MAG)
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot ** 2 * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (
            HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos ** 2 / TOTAL_MASS))
        x_acc = temp - POLEMASS_LENGTH * theta_acc * cos / TOTAL_MASS
        self.state = np.stack([x + TAU * x_dot, x_dot + TAU * x_acc,
                               theta + TAU * theta_dot, theta_dot + TAU * theta_acc], axis=1)
        self._steps += 1
        x, theta = self.state[:, 0], self.state[:, 2]
        terminated = (np.abs(x) > X_LIMIT) | (np.abs(theta) > THETA_LIMIT)
        truncated = (self._steps >= self.max_episode_steps) & ~terminated
        reward = np.ones(self.num_envs, np.float32)
        done = terminated | truncated
        ep_return, ep_length = self._stats.update(reward, done)
        final = None
        if np.any(done):
            final = self.state.astype(np.float32)       # the states the episodes ended in
            self.state[done] = self._new_states(int(done.sum()))
            self._steps[done] = 0
        return self._batch_step(reward, terminated, truncated, ep_return, ep_length, final)
