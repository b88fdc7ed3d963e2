"""Any Gymnasium env with a discrete action space, and an adapter for old-API envs.

``gym:<ID>`` makes ``gymnasium.make(ID)``. Observations may be vectors (any Box,
flattened to float32) or images (uint8 Box of shape (H, W) or (H, W, C); a
missing channel axis is added). Old-API envs (``reset() -> obs``,
``step() -> (obs, reward, done, info)``, as the unmaintained ``gym`` package
had) are accepted through :class:`OldApiAdapter`; the ``gym`` package itself is
never imported. In the old API ``done`` merges termination and truncation; the
adapter splits them again with ``info["TimeLimit.truncated"]``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from envs.base import Env, EnvDescriptor, StepResult


class OldApiAdapter:
    """Wraps an old-API env so it answers the Gymnasium 5-tuple API."""

    def __init__(self, env: Any):
        self.env = env
        self.action_space = env.action_space
        self.observation_space = env.observation_space
        self.spec = getattr(env, "spec", None)

    def reset(self, seed=None, options=None):
        if seed is not None and hasattr(self.env, "seed"):
            self.env.seed(seed)
        out = self.env.reset()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
            return out
        return out, {}

    def step(self, action):
        out = self.env.step(action)
        if len(out) == 5:
            return out
        if len(out) != 4:
            raise ValueError(f"step() returned a {len(out)}-tuple; expected 4 (old API) or 5 (Gymnasium)")
        obs, reward, done, info = out
        truncated = bool(done and info.get("TimeLimit.truncated", False))
        return obs, reward, bool(done) and not truncated, truncated, info

    def close(self):
        if hasattr(self.env, "close"):
            self.env.close()


def _spaces_of(env) -> tuple:
    from gymnasium import spaces
    action_space, obs_space = env.action_space, env.observation_space
    if not isinstance(action_space, spaces.Discrete) and not hasattr(action_space, "n"):
        raise ValueError(f"only discrete action spaces are supported; this env has {action_space}")
    shape = tuple(getattr(obs_space, "shape", ()) or ())
    if not shape:
        raise ValueError(f"observation space {obs_space} has no shape; use a Box observation space")
    return int(action_space.n), shape, np.dtype(getattr(obs_space, "dtype", np.float32))


def describe_gym_env(env, name: str) -> EnvDescriptor:
    num_actions, shape, dtype = _spaces_of(env)
    is_image = dtype == np.uint8 and len(shape) in (2, 3)
    if is_image:
        obs_shape = shape if len(shape) == 3 else shape + (1,)
        if obs_shape[-1] not in (1, 3, 4):
            raise ValueError(f"image observations need 1, 3 or 4 channels last; got shape {shape}")
    else:
        obs_shape = (int(np.prod(shape)),)
    spec = getattr(env, "spec", None)
    max_steps = getattr(spec, "max_episode_steps", None) if spec is not None else None
    rr = getattr(env, "reward_range", None)
    reward_range = tuple(float(v) for v in rr) if rr is not None and all(np.isfinite(rr)) else None
    return EnvDescriptor(
        name=name, observation_shape=obs_shape,
        observation_dtype="uint8" if is_image else "float32",
        num_actions=num_actions, kind="image" if is_image else "vector",
        reward_range=reward_range, max_episode_steps=max_steps,
        frame_layout="HWC" if is_image else None)


class GymEnv(Env):
    """A Gymnasium (or adapted old-API) env behind the :class:`Env` interface."""

    def __init__(self, env: Any, name: str, seed: int = 0):
        if not isinstance(env, OldApiAdapter) and _looks_old_api(env):
            env = OldApiAdapter(env)
        self._env = env
        self.descriptor = describe_gym_env(env, name)
        self._seed = seed
        self._seeded = False

    def _convert(self, obs) -> np.ndarray:
        obs = np.asarray(obs)
        if self.descriptor.is_image:
            return obs.reshape(self.descriptor.observation_shape).astype(np.uint8, copy=False)
        return obs.astype(np.float32).reshape(-1)

    def reset(self) -> np.ndarray:
        if self._seeded:
            obs, _ = self._env.reset()
        else:
            obs, _ = self._env.reset(seed=self._seed)
            self._seeded = True
        return self._convert(obs)

    def step(self, action: int) -> StepResult:
        if not 0 <= int(action) < self.descriptor.num_actions:
            raise ValueError(f"action {action!r} out of range [0, {self.descriptor.num_actions - 1}]")
        obs, reward, terminated, truncated, info = self._env.step(int(action))
        return StepResult(self._convert(obs), float(reward), bool(terminated),
                          bool(truncated) and not bool(terminated), info)

    def close(self) -> None:
        self._env.close()


def _looks_old_api(env) -> bool:
    """Old-API envs are not Gymnasium ``Env`` instances and their reset returns a bare obs."""
    try:
        import gymnasium
        if isinstance(env, gymnasium.Env):
            return False
    except ImportError:  # pragma: no cover - gymnasium is a hard dependency
        pass
    return True


def make_gym(env_id: str, seed: int = 0, **kwargs) -> GymEnv:
    import gymnasium
    try:
        import ale_py
        gymnasium.register_envs(ale_py)
    except ImportError:  # pragma: no cover
        pass
    try:
        env = gymnasium.make(env_id, **kwargs)
    except gymnasium.error.Error as exc:
        raise ValueError(f"gym:{env_id}: Gymnasium cannot make it ({exc}). "
                         f"Check the id with gymnasium.pprint_registry().") from exc
    return GymEnv(env, name=f"gym:{env_id}", seed=seed)
