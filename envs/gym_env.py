"""Any Gymnasium env with a discrete or box action space, and an adapter for old-API envs.

``gym:<ID>`` makes ``gymnasium.make(ID)``. Actions: ``Discrete(n)``, or a one-dimensional
``Box`` with finite bounds (continuous actions, float32; actions outside the bounds are
clipped and counted in ``clipped_actions``). Observations may be vectors (any Box,
flattened to float32), images (uint8 Box of shape (H, W) or (H, W, C); a missing channel
axis is added), or Gymnasium-Robotics goal dicts (``observation``, ``achieved_goal``,
``desired_goal``), flattened into one vector in that order and described by the
descriptor's ``goal_layout``; their ``compute_reward`` serves hindsight relabelling. Old-API envs (``reset() -> obs``,
``step() -> (obs, reward, done, info)``, as the unmaintained ``gym`` package
had) are accepted through :class:`OldApiAdapter`; the ``gym`` package itself is
never imported. In the old API ``done`` merges termination and truncation; the
adapter splits them again with ``info["TimeLimit.truncated"]``.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from envs import cartpole
from envs.base import Env, EnvDescriptor, StepResult, check_continuous_actions


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


GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def _action_fields(action_space) -> dict:
    """EnvDescriptor fields of a Gymnasium action space (Discrete or a bounded 1-D Box)."""
    from gymnasium import spaces
    old_discrete = (not isinstance(action_space, spaces.Space) and hasattr(action_space, "n")
                    and tuple(getattr(action_space, "shape", ()) or ()) == ())   # an old-API gym space
    if isinstance(action_space, spaces.Discrete) or old_discrete:
        return {"num_actions": int(action_space.n)}
    if isinstance(action_space, spaces.Box):
        shape = tuple(action_space.shape)
        low = np.asarray(action_space.low, np.float64).reshape(-1)
        high = np.asarray(action_space.high, np.float64).reshape(-1)
        if len(shape) != 1:
            raise ValueError(f"Box action spaces must be one-dimensional; this env has {action_space}")
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError(f"Box action spaces need finite bounds (a policy's actions are scaled into "
                             f"them); this env has {action_space}")
        return {"num_actions": 0, "action_kind": "continuous", "action_shape": shape,
                "action_low": tuple(low.tolist()), "action_high": tuple(high.tolist())}
    raise ValueError(f"only Discrete and Box action spaces are supported; this env has {action_space}")


def _goal_parts(obs_space) -> Optional[tuple]:
    """For a Gymnasium-Robotics goal Dict space: ((key, size), ...) in GOAL_KEYS order; else None."""
    from gymnasium import spaces
    if not isinstance(obs_space, spaces.Dict):
        return None
    if sorted(obs_space.spaces) != sorted(GOAL_KEYS):
        raise ValueError(f"Dict observation spaces are supported for goal envs only (keys "
                         f"{list(GOAL_KEYS)}); this env has keys {sorted(obs_space.spaces)}")
    return tuple((k, int(np.prod(obs_space.spaces[k].shape))) for k in GOAL_KEYS)


def _spaces_of(env) -> tuple:
    obs_space = env.observation_space
    if _goal_parts(obs_space) is not None:
        return (sum(n for _, n in _goal_parts(obs_space)),), np.dtype(np.float32)
    shape = tuple(getattr(obs_space, "shape", ()) or ())
    if not shape:
        raise ValueError(f"observation space {obs_space} has no shape; use a Box observation space")
    return shape, np.dtype(getattr(obs_space, "dtype", np.float32))


def describe_gym_env(env, name: str) -> EnvDescriptor:
    actions = _action_fields(env.action_space)
    shape, dtype = _spaces_of(env)
    goal = _goal_parts(env.observation_space)
    layout = None
    if goal is not None:
        stops = np.cumsum([n for _, n in goal])
        layout = tuple((k, int(stop - n), int(stop)) for (k, n), stop in zip(goal, stops))
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
        kind="image" if is_image else "vector",
        reward_range=reward_range, max_episode_steps=max_steps,
        frame_layout="HWC" if is_image else None, goal_layout=layout, **actions)


class GymEnv(Env):
    """A Gymnasium (or adapted old-API) env behind the :class:`Env` interface."""

    def __init__(self, env: Any, name: str, seed: int = 0):
        if not isinstance(env, OldApiAdapter) and _looks_old_api(env):
            env = OldApiAdapter(env)
        self._env = env
        self.descriptor = describe_gym_env(env, name)
        self._seed = seed
        self._seeded = False
        self.clipped_actions = 0

    def _convert(self, obs) -> np.ndarray:
        if self.descriptor.goal_layout is not None:
            return np.concatenate([np.asarray(obs[k], np.float32).reshape(-1) for k in GOAL_KEYS])
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

    def step(self, action) -> StepResult:
        d = self.descriptor
        if d.is_continuous:
            actions, clipped = check_continuous_actions(d, np.asarray(action).reshape(1, -1), 1)
            self.clipped_actions += clipped
            action = actions[0]
        else:
            if not 0 <= int(action) < d.num_actions:
                raise ValueError(f"action {action!r} out of range [0, {d.num_actions - 1}]")
            action = int(action)
        obs, reward, terminated, truncated, info = self._env.step(action)
        return StepResult(self._convert(obs), float(reward), bool(terminated),
                          bool(truncated) and not bool(terminated), info)

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
        if self.descriptor.goal_layout is None:
            return super().compute_reward(achieved_goal, desired_goal)
        rewards = self._env.unwrapped.compute_reward(np.asarray(achieved_goal), np.asarray(desired_goal), {})
        return np.asarray(rewards, np.float32).reshape(len(achieved_goal))

    def render(self) -> Optional[np.ndarray]:
        """Gymnasium's render of the current state: an RGB frame [H, W, 3] when the env was made
        with ``render_mode="rgb_array"``, else None."""
        if getattr(self._env, "render_mode", None) != "rgb_array":
            return None
        return self._env.render()

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


def _register_robotics(gymnasium) -> bool:
    """Registers Gymnasium-Robotics' ids (FetchReach, ...) when the optional `robotics` extra
    is installed; False when it is not."""
    try:
        import gymnasium_robotics
    except ImportError:
        return False
    gymnasium.register_envs(gymnasium_robotics)
    return True


# Gymnasium classes with a mirror (envs.register's ``mirror``): the env is unchanged when its
# observation is negated and each action ``a`` becomes ``mirror[a]``. Keyed by the class an
# id makes (its registry entry point), so CartPole-v0, CartPole-v1 and ids registered on the
# same class with another step limit all count. Gymnasium's CartPole observes (x, x_dot,
# theta, theta_dot) with dynamics odd in the state and the force, limits and start states
# symmetric about the centre: push left (0) and push right (1) swap, as for the built-in
# cartpole (envs/cartpole.py, whose physics are Gymnasium's).
GYM_MIRRORS = {"gymnasium.envs.classic_control.cartpole:CartPoleEnv": cartpole.MIRROR}


def gym_mirror(env_id: str) -> Optional[tuple]:
    """The action permutation of ``env_id``'s mirror (:data:`GYM_MIRRORS`), or None when its
    class has none or Gymnasium does not know the id."""
    import gymnasium
    try:
        entry_point = gymnasium.spec(env_id).entry_point
    except gymnasium.error.Error:
        return None
    return GYM_MIRRORS.get(entry_point) if isinstance(entry_point, str) else None


def make_gym(env_id: str, seed: int = 0, _registered: bool = False, **kwargs) -> GymEnv:
    import gymnasium
    try:
        import ale_py
        gymnasium.register_envs(ale_py)
    except ImportError:  # pragma: no cover
        pass
    try:
        env = gymnasium.make(env_id, **kwargs)
    except gymnasium.error.NameNotFound as exc:
        # Not registered yet: Gymnasium-Robotics registers its ids only once imported.
        if _registered or not _register_robotics(gymnasium):
            raise ValueError(f"gym:{env_id}: Gymnasium cannot make it ({exc}). Check the id with "
                             "gymnasium.pprint_registry(); Gymnasium-Robotics ids (FetchReach-v4, ...) need "
                             "pip install -e '.[robotics]'") from exc
        return make_gym(env_id, seed=seed, _registered=True, **kwargs)
    except gymnasium.error.Error as exc:
        raise ValueError(f"gym:{env_id}: Gymnasium cannot make it ({exc}). "
                         f"Check the id with gymnasium.pprint_registry().") from exc
    return GymEnv(env, name=f"gym:{env_id}", seed=seed)
