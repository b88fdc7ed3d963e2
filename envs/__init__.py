"""Environments by name: ``cartpole``, ``tictactoe``, ``atari``, ``reach``, ``gym:<ID>`` and
``minatar:<Game>`` (Asterix, Breakout, Freeway, Seaquest, SpaceInvaders; the optional
``minatar`` extra, see ``envs/minatar.py``).

    envs.make(name, seed=0, **options)          -> Env (one environment)
    envs.make_batch(name, num_envs, seed=0, **options) -> EnvBatch (E in lockstep, auto-reset)
    envs.describe(name, **options)              -> EnvDescriptor
    envs.board_symmetries(name)                 -> [P, H*W] cell permutations or None
    envs.mirror_actions(name)                   -> [A] action permutation or None

Adding an env: write an :class:`envs.base.Env` (and, if it can be vectorised, an
:class:`envs.base.EnvBatch`), then call :func:`register` with a factory and a
describer. See README.md, "Adding an environment".

This package imports nothing from ``muzero``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from envs.base import BatchStep, Env, EnvBatch, EnvDescriptor, LoopEnvBatch, StepResult

__all__ = ["make", "make_batch", "describe", "register", "known_names", "board_symmetries",
           "mirror_actions", "Env",
           "EnvBatch", "EnvDescriptor", "BatchStep", "StepResult", "LoopEnvBatch", "UnknownEnvError"]


class UnknownEnvError(ValueError):
    """The name is not registered."""


@dataclasses.dataclass(frozen=True)
class _Entry:
    make: Callable[..., Env]                      # (seed, **options) -> Env
    describe: Callable[..., EnvDescriptor]        # (**options) -> EnvDescriptor
    make_batch: Optional[Callable[..., EnvBatch]]  # (num_envs, seed, **options) -> EnvBatch
    symmetries: Optional[np.ndarray] = None       # [P, H*W] int64 cell permutations
    mirror: Optional[np.ndarray] = None           # [A] int64 action permutation (see register)


_REGISTRY: dict[str, _Entry] = {}


def register(name: str, make_fn, describe_fn, make_batch_fn=None, symmetries=None, mirror=None) -> None:
    """Adds an env under ``name``. ``make_batch_fn`` is optional (a loop batch is used otherwise).

    ``symmetries``: for board games whose actions are the cells of an H x W board
    (observations ``(H, W, C)``, A = H * W), permutations ``[P, H*W]`` under which the
    game is unchanged; board ``b`` maps to ``b[perm]`` (see :func:`board_symmetries`).

    ``mirror``: for vector envs that are unchanged when every observation is negated and
    every action ``a`` is replaced by ``mirror[a]`` (an ``[A]`` permutation that is its own
    inverse): CartPole, whose physics, limits and start states are symmetric about the
    centre, with left and right pushes swapped (see :func:`mirror_actions`). Not with board
    ``symmetries``.
    """
    if name in _REGISTRY:
        raise ValueError(f"env {name!r} is already registered")
    if name.startswith("gym:"):
        raise ValueError("names starting with 'gym:' are reserved for Gymnasium ids")
    if name.startswith("minatar:"):
        raise ValueError("names starting with 'minatar:' are reserved for MinAtar games")
    if symmetries is not None:
        symmetries = np.asarray(symmetries, np.int64)
        cells = list(range(symmetries.shape[-1]))
        if symmetries.ndim != 2 or any(sorted(p) != cells for p in symmetries.tolist()):
            raise ValueError(f"symmetries of {name!r} must be permutations [P, cells]")
    if mirror is not None:
        if symmetries is not None:
            raise ValueError(f"env {name!r}: give board symmetries or a mirror, not both")
        mirror = _checked_mirror(name, mirror)
    _REGISTRY[name] = _Entry(make_fn, describe_fn, make_batch_fn, symmetries, mirror)


def _checked_mirror(name: str, mirror) -> np.ndarray:
    """``mirror`` as an [A] int64 array; ValueError unless it is an action permutation that is
    its own inverse."""
    mirror = np.asarray(mirror, np.int64)
    if mirror.ndim != 1 or sorted(mirror.tolist()) != list(range(mirror.size)) \
            or not np.array_equal(mirror[mirror], np.arange(mirror.size)):
        raise ValueError(f"the mirror of {name!r} must be an action permutation [A] that is its own inverse")
    return mirror


def known_names() -> list[str]:
    from envs.minatar import GAMES
    return sorted(_REGISTRY) + ["gym:<ID>"] + [f"minatar:{game}" for game in GAMES]


def _no_options(name: str, options: dict) -> None:
    if options:
        raise ValueError(f"env {name!r} takes no options; got {sorted(options)}")


def _entry(name: str) -> _Entry:
    if not isinstance(name, str):
        raise UnknownEnvError(f"env name must be a string, got {name!r}")
    if name.startswith("gym:"):
        env_id = name[4:]
        if not env_id:
            raise UnknownEnvError("gym: needs a Gymnasium id, e.g. gym:CartPole-v1 or gym:ALE/Pong-v5")
        from envs import gym_env

        def make_fn(seed=0, **options):
            return gym_env.make_gym(env_id, seed=seed, **options)

        def describe_fn(**options):
            env = gym_env.make_gym(env_id, seed=0, **options)
            try:
                return env.descriptor
            finally:
                env.close()

        mirror = gym_env.gym_mirror(env_id)
        return _Entry(make_fn, describe_fn, None, mirror=None if mirror is None else _checked_mirror(name, mirror))
    if name.startswith("minatar:"):
        from envs import minatar
        game = name[len("minatar:"):]
        try:
            minatar.game_module(game)
        except ValueError as e:   # an unknown game: the message lists the games
            raise UnknownEnvError(f"{name!r}: {e}") from None

        def make_minatar(seed=0, **options):
            return minatar.MinAtarEnv(game, seed=seed, **options)

        def describe_minatar(**options):
            return minatar.describe(game, **options)

        return _Entry(make_minatar, describe_minatar, None)
    if name not in _REGISTRY:
        raise UnknownEnvError(f"unknown env {name!r}; known envs: {', '.join(known_names())}")
    return _REGISTRY[name]


def make(name: str, seed: int = 0, **options) -> Env:
    """One environment, seeded."""
    return _entry(name).make(seed=seed, **options)


def describe(name: str, **options) -> EnvDescriptor:
    """Static facts (shapes, actions, players, ranges) without stepping anything."""
    return _entry(name).describe(**options)


def board_symmetries(name: str) -> Optional[np.ndarray]:
    """Cell permutations ``[P, H*W]`` (identity included) that leave the game unchanged, or
    None when the env registered none (every non-board env). Used to augment training data."""
    return _entry(name).symmetries


def mirror_actions(name: str) -> Optional[np.ndarray]:
    """The ``[A]`` action permutation under which the env is unchanged when its observations
    are negated (see :func:`register`), or None when it registered none. ``gym:<ID>``: the
    mirror of the Gymnasium class the id makes (``envs.gym_env.GYM_MIRRORS``: CartPole's).
    Used to augment training data."""
    return _entry(name).mirror


def make_batch(name: str, num_envs: int, seed: int = 0, **options) -> EnvBatch:
    """``num_envs`` environments in lockstep; env i is seeded with ``seed + i`` where seeds apply."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs={num_envs!r} must be an integer >= 1")
    entry = _entry(name)
    if entry.make_batch is not None:
        return entry.make_batch(num_envs, seed=seed, **options)
    return LoopEnvBatch([entry.make(seed=seed + i, **options) for i in range(num_envs)])


def _register_builtins() -> None:
    from envs import atari, cartpole, reach, tictactoe

    def register_fixed(name, env_cls, descriptor, batch_cls, symmetries=None):
        """An env without options: a class, its descriptor and its vectorised batch."""
        def make_fn(seed=0, **options):
            _no_options(name, options)
            return env_cls(seed=seed)

        def describe_fn(**options):
            _no_options(name, options)
            return descriptor

        def batch_fn(num_envs, seed=0, **options):
            _no_options(name, options)
            return batch_cls(num_envs, seed=seed)

        register(name, make_fn, describe_fn, batch_fn, symmetries)

    def atari_make(seed=0, **options):
        options.pop("vectorized", None)
        return atari.AtariEnv(seed=seed, **options)

    def atari_describe(**options):
        options.pop("vectorized", None)
        return atari.describe(**options)

    def cartpole_options(options):
        unknown = sorted(set(options) - {"observe_velocity"})
        if unknown:
            raise ValueError(f"env 'cartpole' takes the option observe_velocity only; got {unknown}")
        return options

    register("cartpole",
             lambda seed=0, **options: cartpole.CartPole(seed=seed, **cartpole_options(options)),
             lambda **options: cartpole.describe(**cartpole_options(options)),
             lambda num_envs, seed=0, **options: cartpole.CartPoleBatch(num_envs, seed=seed,
                                                                       **cartpole_options(options)),
             mirror=cartpole.MIRROR)
    register_fixed("tictactoe", tictactoe.TicTacToe, tictactoe.DESCRIPTOR, tictactoe.TicTacToeBatch,
                   tictactoe.SYMMETRIES)
    register("atari", atari_make, atari_describe, atari.make_batch)
    register("reach", lambda seed=0, **options: reach.Reach(seed=seed, **options), reach.describe,
             lambda num_envs, seed=0, **options: reach.ReachBatch(num_envs, seed=seed, **options))


_register_builtins()
