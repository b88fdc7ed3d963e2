"""Atari 2600 games through ale-py, with the MuZero/DQN preprocessing.

Options (all honoured by both implementations below):
  game                  ROM name, e.g. ``Pong`` or ``MsPacman`` (default Pong); ROMs ship inside ale-py.
  frame_skip            agent steps last this many emulator frames, rewards summed (default 4);
                        the returned frame is the pixel-wise max of the last two (flicker removal).
  sticky_actions        probability that the emulator repeats the previous action (default 0.25;
                        0 makes the game deterministic given the seed).
  full_action_space     18 actions instead of the game's minimal set (default False).
  noop_max              reset plays a seeded random number in [1, noop_max] of NOOP agent steps
                        (default 30; 0 disables).
  terminal_on_life_loss a lost life ends the episode as *terminated*; the next reset continues the
                        same game (no new game until all lives are gone) (default False).
  grayscale             1 channel if True (default), 3 RGB channels if False.
  screen_size           96 (default, as in the MuZero paper) or 84 (DQN); frames are area-resampled.
  max_episode_frames    emulator frames after which the episode is *truncated* (default 108,000).
  vectorized            (batches only) step with ale-py's C++ ``AtariVectorEnv`` (threads) instead of
                        a Python loop over single envs (docs/RESULTS.md, "Environments").

Frames are returned one at a time as uint8 ``(screen_size, screen_size, C)``.
"""
from __future__ import annotations

import re

import numpy as np

from envs.base import BatchStep, Env, EnvBatch, EnvDescriptor, EpisodeStats, LoopEnvBatch, StepResult

DEFAULTS = dict(game="Pong", frame_skip=4, sticky_actions=0.25, full_action_space=False, noop_max=30,
                terminal_on_life_loss=False, grayscale=True, screen_size=96, max_episode_frames=108_000)
_RAW_H, _RAW_W = 210, 160


def _rom_id(game: str) -> str:
    """``MsPacman`` / ``ms_pacman`` / ``mspacman`` -> the ale-py ROM id."""
    from ale_py import roms
    known = roms.get_all_rom_ids()
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()
    for candidate in (snake, game.lower(), game.lower().replace("_", "")):
        if candidate in known:
            return candidate
    squashed = {k.replace("_", ""): k for k in known}
    if game.lower().replace("_", "") in squashed:
        return squashed[game.lower().replace("_", "")]
    raise ValueError(f"unknown Atari game {game!r}; known games: {', '.join(sorted(known))}")


def check_options(options: dict) -> dict:
    unknown = sorted(set(options) - set(DEFAULTS) - {"vectorized"})
    if unknown:
        raise ValueError(f"unknown atari option(s) {unknown}; known: {sorted(DEFAULTS) + ['vectorized']}")
    opts = {**DEFAULTS, **options}
    if opts["screen_size"] not in (84, 96):
        raise ValueError(f"screen_size={opts['screen_size']} must be 84 or 96")
    if not 0.0 <= opts["sticky_actions"] <= 1.0:
        raise ValueError(f"sticky_actions={opts['sticky_actions']} must be in [0, 1]")
    if not 1 <= opts["frame_skip"] <= 16:
        raise ValueError(f"frame_skip={opts['frame_skip']} must be in [1, 16]")
    if not 0 <= opts["noop_max"] <= 1000:
        raise ValueError(f"noop_max={opts['noop_max']} must be in [0, 1000]")
    if opts["max_episode_frames"] < 1:
        raise ValueError(f"max_episode_frames={opts['max_episode_frames']} must be >= 1")
    opts["rom"] = _rom_id(opts["game"])
    return opts


def _num_actions(rom: str, full_action_space: bool) -> int:
    if full_action_space:
        return 18
    ale = _new_ale(rom, seed=0, sticky=0.0)
    return len(ale.getMinimalActionSet())


def _new_ale(rom: str, seed: int, sticky: float):
    import ale_py
    from ale_py import roms
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("random_seed", int(seed) % (2 ** 31))
    ale.setFloat("repeat_action_probability", float(sticky))
    ale.loadROM(roms.get_rom_path(rom))
    return ale


def describe(**options) -> EnvDescriptor:
    opts = check_options(options)
    channels = 1 if opts["grayscale"] else 3
    size = opts["screen_size"]
    return EnvDescriptor(
        name="atari", observation_shape=(size, size, channels), observation_dtype="uint8",
        num_actions=_num_actions(opts["rom"], opts["full_action_space"]), kind="image",
        reward_range=None, value_range=None, known_bounds=None,
        max_episode_steps=-(-opts["max_episode_frames"] // opts["frame_skip"]),
        frame_layout="HWC")


def _area_matrix(out_size: int, in_size: int) -> np.ndarray:
    """[out, in] weights of area resampling: each output pixel averages the input span it covers."""
    m = np.zeros((out_size, in_size), dtype=np.float32)
    scale = in_size / out_size
    for o in range(out_size):
        lo, hi = o * scale, (o + 1) * scale
        for i in range(int(np.floor(lo)), min(int(np.ceil(hi)), in_size)):
            m[o, i] = min(hi, i + 1) - max(lo, i)
        m[o] /= m[o].sum()
    return m


class AtariEnv(Env):
    """One Atari game with frame skip, max-pooling, no-op starts, sticky actions and resizing."""

    def __init__(self, seed: int = 0, **options):
        self.options = check_options(options)
        self.descriptor = describe(**options)
        o = self.options
        self._ale = _new_ale(o["rom"], seed, o["sticky_actions"])
        self._actions = (self._ale.getLegalActionSet() if o["full_action_space"]
                         else self._ale.getMinimalActionSet())
        self._rng = np.random.default_rng(seed)
        size, channels = o["screen_size"], 1 if o["grayscale"] else 3
        self._raw = np.zeros((2, _RAW_H, _RAW_W, channels), dtype=np.uint8)
        self._rows = _area_matrix(size, _RAW_H)      # [S, 210]
        self._cols = _area_matrix(size, _RAW_W).T    # [160, S]
        self._lives = 0
        self._episode_frames = 0
        self._needs_game_reset = True

    def _grab(self, slot: int) -> None:
        if self.options["grayscale"]:
            self._ale.getScreenGrayscale(self._raw[slot, :, :, 0])
        else:
            self._ale.getScreenRGB(self._raw[slot])

    def _frame(self) -> np.ndarray:
        pooled = np.maximum(self._raw[0], self._raw[1]).astype(np.float32)      # [210, 160, C]
        resized = np.einsum("sh,hwc,wt->stc", self._rows, pooled, self._cols, optimize=True)
        return np.clip(np.rint(resized), 0, 255).astype(np.uint8)

    def _act(self, action_id) -> tuple[float, bool]:
        """One agent step of frame_skip emulator frames; returns (reward, game_over).

        The last two frames land in ``self._raw[0]`` and ``self._raw[1]`` for max-pooling;
        when the game ends early (or frame_skip is 1) both slots hold the final screen.
        """
        skip = self.options["frame_skip"]
        reward, over, i = 0.0, False, 0
        for i in range(skip):
            reward += self._ale.act(action_id)
            self._episode_frames += 1
            if i >= skip - 2:
                self._grab(i - (skip - 2))
            over = self._ale.game_over()
            if over:
                break
        if skip == 1 or i < skip - 1:
            self._grab(0)
            self._grab(1)
        return reward, over

    def reset(self) -> np.ndarray:
        if self._needs_game_reset or self._ale.game_over():
            self._ale.reset_game()
            self._episode_frames = 0
            noops = int(self._rng.integers(1, self.options["noop_max"] + 1)) if self.options["noop_max"] else 0
            for _ in range(noops):
                _, over = self._act(self._actions[0])
                if over:
                    self._ale.reset_game()
                    self._episode_frames = 0
            self._needs_game_reset = False
        self._grab(0)
        self._grab(1)
        self._lives = self._ale.lives()
        return self._frame()

    def step(self, action: int) -> StepResult:
        if not 0 <= int(action) < len(self._actions):
            raise ValueError(f"action {action!r} out of range [0, {len(self._actions) - 1}]")
        reward, game_over = self._act(self._actions[int(action)])
        lives = self._ale.lives()
        life_lost = lives < self._lives
        self._lives = lives
        terminated = game_over or (self.options["terminal_on_life_loss"] and life_lost)
        truncated = not terminated and self._episode_frames >= self.options["max_episode_frames"]
        if game_over or truncated:
            self._needs_game_reset = True
        info = {"lives": lives, "life_lost": life_lost, "episode_frames": self._episode_frames}
        return StepResult(self._frame(), float(reward), terminated, truncated, info)


class AtariVectorBatch(EnvBatch):
    """E games stepped by ale-py's C++ ``AtariVectorEnv`` (its own threads, same-step reset).

    ale-py implements the same options natively: frame skip with max-pooling of the last
    two frames, sticky actions, no-op starts, episodic life, a frame cap reported as
    truncation, grayscale or RGB and resizing. Its resize interpolation differs from
    :class:`AtariEnv`'s area resampling, so frames are close but not bit-equal.
    """

    def __init__(self, num_envs: int, seed: int = 0, num_threads: int = 0, **options):
        from ale_py.vector_env import AtariVectorEnv
        self.options = check_options(options)
        self.descriptor = describe(**options)
        self.num_envs = num_envs
        o = self.options
        self._seed = seed
        self._env = AtariVectorEnv(
            o["rom"], num_envs=num_envs, num_threads=num_threads, stack_num=1,
            img_height=o["screen_size"], img_width=o["screen_size"], grayscale=o["grayscale"],
            frameskip=o["frame_skip"], maxpool=True, noop_max=o["noop_max"],
            repeat_action_probability=o["sticky_actions"], full_action_space=o["full_action_space"],
            episodic_life=o["terminal_on_life_loss"], reward_clipping=False, use_fire_reset=False,
            max_num_frames_per_episode=o["max_episode_frames"], autoreset_mode="SameStep")
        self._stats = EpisodeStats(num_envs)

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        # [E, 1, H, W] (gray) or [E, 1, H, W, 3] (RGB) -> [E, H, W, C]
        obs = obs[:, 0]
        return obs[..., None] if obs.ndim == 3 else obs

    def _batch_step(self, obs, reward, terminated, truncated, ep_return, ep_length,
                    final_obs=None) -> BatchStep:
        """final_obs: ale-py's ``info["final_obs"]`` (pre-reset frames, meaningful where done)."""
        e, a = self.num_envs, self.descriptor.num_actions
        frames = self._frames(obs)
        final = frames
        done = terminated | truncated
        if final_obs is not None and np.any(done):
            final = frames.copy()
            final[done] = self._frames(np.asarray(final_obs))[done]
        return BatchStep(frames, reward, terminated, truncated, np.ones((e, a), bool),
                         np.zeros(e, np.int8), ep_return, ep_length, final_observation=final)

    def reset(self) -> BatchStep:
        obs, _ = self._env.reset(seed=self._seed)
        e = self.num_envs
        self._stats = EpisodeStats(e)
        zeros = np.zeros(e, bool)
        return self._batch_step(obs, np.zeros(e, np.float32), zeros, zeros.copy(), *self._stats.no_episode())

    def step(self, actions) -> BatchStep:
        actions = self._check_actions(actions)
        obs, reward, terminated, truncated, info = self._env.step(actions.astype(np.int64))
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool) & ~terminated
        reward = np.asarray(reward, np.float32)
        ep_return, ep_length = self._stats.update(reward, terminated | truncated)
        final_obs = info.get("final_obs")   # same-step autoreset: the frames episodes ended on
        if final_obs is None and np.any(terminated | truncated):
            raise RuntimeError("ale-py's AtariVectorEnv reported an episode end without "
                               "info['final_obs']; this ale-py version is not supported")
        return self._batch_step(obs, reward, terminated, truncated, ep_return, ep_length, final_obs)

    def close(self) -> None:
        # Dropping the reference frees ale-py's C++ vector env now: one still held at
        # interpreter exit (a daemon thread's frame can keep the batch alive) makes nanobind
        # print a screen of "leaked instance/type/function" lines.
        if self._env is not None:
            self._env.close()
            self._env = None


def make_batch(num_envs: int, seed: int = 0, vectorized: bool = True, **options) -> EnvBatch:
    if vectorized:
        return AtariVectorBatch(num_envs, seed=seed, **options)
    return LoopEnvBatch([AtariEnv(seed=seed + i, **options) for i in range(num_envs)])
