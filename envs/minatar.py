"""MinAtar games (Young & Tian 2019) through the ``minatar`` package: ``minatar:<Game>``.

Games: ``Asterix``, ``Breakout``, ``Freeway``, ``Seaquest``, ``SpaceInvaders`` (MinAtar's module
names ``asterix``, ``breakout``, ``freeway``, ``seaquest``, ``space_invaders`` are accepted too).
The package is the optional extra ``minatar`` (``pip install -e '.[minatar]'``); see
docs/MINATAR.md for the games, the choices below and the published baselines.

Observations: MinAtar's state is a 10 x 10 x C grid of booleans, one plane per kind of
object (C = 4 Asterix, 4 Breakout, 7 Freeway, 10 Seaquest, 6 SpaceInvaders). It is returned
as a uint8 ``(10, 10, C)`` frame holding 0 and 255 (``255 * state``), with ``kind="image"``:
the network divides image inputs by 255, so it sees the 0/1 planes, and the image path
gives frame stacking with action planes (``muzero.observation``) and stores each frame once
in the replay, as for Atari. (0/1 uint8 frames would reach the network as 0 and 1/255.)

Actions: the game's minimal action set, ``A = len(minimal_action_set())`` (Asterix 5,
Breakout 3, Freeway 3, Seaquest 6, SpaceInvaders 4); agent action ``i`` plays MinAtar action
``minimal_action_set()[i]``.

Options:
  sticky_actions       probability that MinAtar's own wrapper plays the previous action instead
                       of the chosen one (default 0.1, MinAtar's default; 0 disables). As in
                       MinAtar the previous action carries over a reset.
  difficulty_ramping   MinAtar's difficulty ramp (faster, more frequent enemies over time in
                       Asterix, Seaquest and SpaceInvaders; default True, MinAtar's default).
  max_episode_steps    agent steps after which an episode is *truncated* (default 10,000).
                       MinAtar itself has no step limit (Freeway ends itself after 2,500
                       steps); the cap only cuts near-endless play, e.g. Breakout with a paddle
                       that never misses, so that evaluation episodes always end.

Seeding: one ``numpy.random.RandomState(seed)`` drives the game and the sticky actions
(MinAtar's ``Environment.seed``); the same seed and actions give the same trajectory.
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

from envs.base import Env, EnvDescriptor, StepResult

# CamelCase name (as in the registry) -> MinAtar module name.
GAMES = {"Asterix": "asterix", "Breakout": "breakout", "Freeway": "freeway", "Seaquest": "seaquest",
         "SpaceInvaders": "space_invaders"}

DEFAULTS = dict(sticky_actions=0.1, difficulty_ramping=True, max_episode_steps=10_000)

# One step's reward bounds where the game's rules fix them: Breakout breaks at most one
# brick a step, Freeway scores one crossing, Asterix holds one entity per row so the player
# collects at most one treasure. Seaquest pays up to 10 at once for surfacing with six
# divers (plus hits), SpaceInvaders can in rare cases hit two aliens in one step: no bound
# is declared for them.
REWARD_RANGES = {"asterix": (0.0, 1.0), "breakout": (0.0, 1.0), "freeway": (0.0, 1.0)}

INSTALL_HINT = "pip install -e '.[minatar]'"


def game_module(game: str) -> str:
    """``Breakout`` / ``SpaceInvaders`` / ``space_invaders`` -> MinAtar's module name."""
    key = str(game).replace("_", "").lower()
    for camel, module in GAMES.items():
        if key == camel.lower():
            return module
    raise ValueError(f"unknown MinAtar game {game!r}; games: {', '.join(GAMES)}")


def camel_name(game: str) -> str:
    module = game_module(game)
    return next(camel for camel, m in GAMES.items() if m == module)


def _minatar():
    try:
        return importlib.import_module("minatar")
    except ImportError:
        raise ImportError(f"MinAtar envs need the minatar package: {INSTALL_HINT}") from None


def check_options(options: dict) -> dict:
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown minatar option(s) {unknown}; known: {sorted(DEFAULTS)}")
    opts = {**DEFAULTS, **options}
    if not 0.0 <= float(opts["sticky_actions"]) <= 1.0:
        raise ValueError(f"sticky_actions={opts['sticky_actions']} must be in [0, 1]")
    if isinstance(opts["max_episode_steps"], bool) or int(opts["max_episode_steps"]) != opts["max_episode_steps"] \
            or opts["max_episode_steps"] < 1:
        raise ValueError(f"max_episode_steps={opts['max_episode_steps']!r} must be an integer >= 1")
    if not isinstance(opts["difficulty_ramping"], bool):
        raise ValueError(f"difficulty_ramping={opts['difficulty_ramping']!r} must be true or false")
    opts["sticky_actions"] = float(opts["sticky_actions"])
    opts["max_episode_steps"] = int(opts["max_episode_steps"])
    return opts


@functools.lru_cache(maxsize=None)
def _game_facts(module: str) -> tuple:
    """(state_shape, minimal_action_set) of a game, read from the package."""
    game = _minatar().Environment(module, sticky_action_prob=0.0).env
    return tuple(int(d) for d in game.state_shape()), tuple(int(a) for a in game.minimal_action_set())


def describe(game: str, **options) -> EnvDescriptor:
    module = game_module(game)
    opts = check_options(options)
    shape, actions = _game_facts(module)
    return EnvDescriptor(
        name=f"minatar:{camel_name(game)}", observation_shape=shape, observation_dtype="uint8",
        num_actions=len(actions), kind="image", reward_range=REWARD_RANGES.get(module),
        max_episode_steps=opts["max_episode_steps"], frame_layout="HWC")


class MinAtarEnv(Env):
    """One MinAtar game behind :class:`envs.base.Env` (see the module docstring)."""

    def __init__(self, game: str, seed: int = 0, **options):
        self.module = game_module(game)
        self.options = check_options(options)
        self.descriptor = describe(game, **options)
        self._env = _minatar().Environment(self.module, sticky_action_prob=self.options["sticky_actions"],
                                           difficulty_ramping=self.options["difficulty_ramping"])
        # One RandomState for the game and the sticky actions (MinAtar's seed() shares it).
        self._env.seed(int(seed) % 2 ** 32)
        self._actions = list(_game_facts(self.module)[1])
        self._steps = 0
        self._done = True

    def _frame(self) -> np.ndarray:
        return self._env.state().view(np.uint8) * np.uint8(255)

    def reset(self) -> np.ndarray:
        self._env.reset()
        self._steps = 0
        self._done = False
        return self._frame()

    def step(self, action: int) -> StepResult:
        if not 0 <= int(action) < len(self._actions):
            raise ValueError(f"action {action!r} out of range [0, {len(self._actions) - 1}]")
        if self._done:
            raise RuntimeError(f"{self.descriptor.name}: step() after the episode ended; call reset()")
        reward, terminal = self._env.act(self._actions[int(action)])
        self._steps += 1
        terminated = bool(terminal)
        truncated = not terminated and self._steps >= self.options["max_episode_steps"]
        self._done = terminated or truncated
        info = {"episode_steps": self._steps, "difficulty_ramp": self._env.env.difficulty_ramp()}
        return StepResult(self._frame(), float(reward), terminated, truncated, info)
