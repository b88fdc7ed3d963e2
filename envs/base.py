"""Environment interface shared by every env in the registry.

An env here is a small single-agent (or two-player, alternating) episodic
environment with a discrete action set or a box of continuous actions (a float vector
with per-dimension bounds). It returns *single frames*, never stacks:
stacking happens where network inputs are assembled (``muzero.observation``), so
the replay stores each frame once.

This package imports nothing from ``muzero``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

ACTION_KINDS = ("discrete", "continuous")

@dataclasses.dataclass(frozen=True)
class EnvDescriptor:
    """Static facts about an env, enough to build networks, replay and search.

    Attributes:
      name: registry name (``cartpole``, ``tictactoe``, ``atari``, ``gym:<ID>``).
      observation_shape: shape of one observation (one frame for image envs).
      observation_dtype: numpy dtype name of observations (``uint8`` for images).
      num_actions: size of the discrete action set, A; 0 for continuous actions.
      two_player: True for alternating two-player zero-sum games. Then ``to_play``
        names the player to move and rewards are from the mover's point of view.
      kind: ``vector`` (flat features), ``image`` (H, W, C uint8 frames) or
        ``board`` (H, W, planes for board games).
      reward_range: (low, high) of one step's reward, or None when unbounded/unknown.
      value_range: (low, high) of discounted returns, or None when unknown.
      known_bounds: (low, high) bounds on search Q values when known exactly, else None.
      max_episode_steps: agent steps after which an episode is truncated, or None.
      frame_layout: for image envs, ``HWC``: C = 1 (grayscale), 3 (RGB) or one 0/255 plane per
        kind of object (MinAtar, C = 4..10); networks divide image inputs by 255. Else None.
      has_legal_mask: True when some actions can be illegal in some states.
      action_kind: ``discrete`` (integer actions in [0, num_actions)) or ``continuous``
        (float32 vectors of shape ``action_shape`` within [action_low, action_high]).
      action_shape: shape of one action: ``()`` for discrete actions, ``(d,)`` for a box.
      action_low, action_high: for continuous actions, the per-dimension bounds as tuples of
        floats (finite); None for discrete actions.
      goal_layout: for goal-conditioned envs (Gymnasium-Robotics style dict observations
        flattened into one vector), ``(("observation", start, stop), ("achieved_goal", ...),
        ("desired_goal", ...))``: where each part sits in the flat observation; the env
        then implements :meth:`Env.compute_reward`. None otherwise.
    """

    name: str
    observation_shape: tuple
    observation_dtype: str
    num_actions: int
    two_player: bool = False
    kind: str = "vector"
    reward_range: Optional[tuple] = None
    value_range: Optional[tuple] = None
    known_bounds: Optional[tuple] = None
    max_episode_steps: Optional[int] = None
    frame_layout: Optional[str] = None
    has_legal_mask: bool = False
    action_kind: str = "discrete"
    action_shape: tuple = ()
    action_low: Optional[tuple] = None
    action_high: Optional[tuple] = None
    goal_layout: Optional[tuple] = None

    def __post_init__(self):
        if self.goal_layout is not None:     # JSON round trips turn the triples into lists
            layout = tuple((str(n), int(a), int(b)) for n, a, b in self.goal_layout)
            if sorted(n for n, _, _ in layout) != ["achieved_goal", "desired_goal", "observation"]:
                raise ValueError(f"EnvDescriptor({self.name!r}): goal_layout must name observation, "
                                 f"achieved_goal and desired_goal; got {layout}")
            object.__setattr__(self, "goal_layout", layout)
        if self.action_kind not in ACTION_KINDS:
            raise ValueError(f"EnvDescriptor({self.name!r}): action_kind={self.action_kind!r} must be one of "
                             f"{list(ACTION_KINDS)}")
        if self.action_kind == "discrete":
            if self.action_shape != () or self.num_actions < 1:
                raise ValueError(f"EnvDescriptor({self.name!r}): discrete actions need action_shape () and "
                                 f"num_actions >= 1; got {self.action_shape} and {self.num_actions}")
            return
        shape = tuple(int(d) for d in self.action_shape)
        size = int(np.prod(shape)) if shape else 1
        if len(shape) != 1 or size < 1 or self.num_actions != 0:
            raise ValueError(f"EnvDescriptor({self.name!r}): continuous actions need action_shape (d,) with "
                             f"d >= 1 and num_actions 0; got {self.action_shape} and {self.num_actions}")
        low = tuple(float(v) for v in np.broadcast_to(np.asarray(self.action_low, np.float64), shape))
        high = tuple(float(v) for v in np.broadcast_to(np.asarray(self.action_high, np.float64), shape))
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(np.less(low, high))):
            raise ValueError(f"EnvDescriptor({self.name!r}): continuous actions need finite bounds with "
                             f"low < high; got low={low} high={high}")
        object.__setattr__(self, "action_shape", shape)
        object.__setattr__(self, "action_low", low)
        object.__setattr__(self, "action_high", high)

    @property
    def is_image(self) -> bool:
        return self.kind == "image"

    @property
    def is_continuous(self) -> bool:
        return self.action_kind == "continuous"

    @property
    def action_space(self) -> str:
        """The action space in Gymnasium's notation: ``Discrete(2)`` or ``Box(-2.0, 2.0, (1,))``
        (bounds shown as one number when every dimension shares them)."""
        if not self.is_continuous:
            return f"Discrete({self.num_actions})"

        def bound(values):
            return f"{values[0]:g}" if len(set(values)) == 1 else f"[{', '.join(f'{v:g}' for v in values)}]"
        return f"Box({bound(self.action_low)}, {bound(self.action_high)}, {self.action_shape})"

    def goal_slices(self) -> dict:
        """``{part: slice}`` of a goal env's flat observation (see ``goal_layout``); {} otherwise."""
        return {name: slice(start, stop) for name, start, stop in (self.goal_layout or ())}


@dataclasses.dataclass
class StepResult:
    """What ``Env.step`` returns.

    ``terminated`` means the episode reached a terminal state (no value after it);
    ``truncated`` means it was cut (time limit) and the state still has a value.
    The two are never merged.
    """

    observation: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    info: dict


class Env:
    """Base class: ``reset`` and ``step`` over single observations."""

    descriptor: EnvDescriptor

    def reset(self) -> np.ndarray:
        raise NotImplementedError

    def step(self, action: int) -> StepResult:
        raise NotImplementedError

    def legal_mask(self) -> np.ndarray:
        """[A] bool: which actions are legal now (all True unless the game restricts them)."""
        return np.ones(self.descriptor.num_actions, dtype=bool)

    def to_play(self) -> int:
        """Player to move: always 0 in single-player envs; 0 or 1 in two-player games."""
        return 0

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
        """Goal envs only (``descriptor.goal_layout`` set): the reward of reaching
        ``achieved_goal`` [N, g] when the goal is ``desired_goal`` [N, g] -> [N] float32, the
        function hindsight relabelling recomputes rewards with."""
        raise NotImplementedError(f"env {self.descriptor.name!r} is not a goal env (no goal_layout)")

    def close(self) -> None:
        pass


@dataclasses.dataclass
class BatchStep:
    """What ``EnvBatch.reset`` and ``EnvBatch.step`` return, one row per env.

    After an episode ends, the env is reset at once (same step): ``observation``,
    ``legal_mask`` and ``to_play`` then describe the *new* episode's first state,
    while ``reward``/``terminated``/``truncated`` describe the step that ended the
    old one, and ``episode_return``/``episode_length`` hold its totals.

    Attributes:
      observation: [E, *observation_shape]
      reward: [E] float32, reward of the step just taken (mover's view in two-player games)
      terminated: [E] bool, the step reached a terminal state
      truncated: [E] bool, the episode was cut (time limit); never set together with terminated
      legal_mask: [E, A] bool, legal actions in the state now shown
      to_play: [E] int8, player to move in the state now shown
      episode_return: [E] float32, the ended episode's return; NaN where no episode ended
      episode_length: [E] int32, the ended episode's length in agent steps; -1 where none ended
      final_observation: [E, *observation_shape], the observation the ended episode finished
        on (before the same-step reset) where ``done``, equal to ``observation`` elsewhere.
        Step-streaming actors send it so the learner can bootstrap truncated episodes from
        the final state's value. To keep steps cheap, when no env is done (and after
        ``reset``) it may be the *same array object* as ``observation``: treat both as
        read-only, or copy before writing. Every EnvBatch in this package fills it; None
        only comes from third-party EnvBatch classes that predate the field.
    """

    observation: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    legal_mask: np.ndarray
    to_play: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    final_observation: Optional[np.ndarray] = None

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated


class EnvBatch:
    """E environments stepped in lockstep with automatic reset.

    ``reset()`` starts all E episodes; ``step(actions [E])`` advances all of them.
    Subclasses vectorise where they can (CartPole, tic-tac-toe, Atari through
    ale-py's C++ vector env); :class:`LoopEnvBatch` wraps any single envs.
    """

    descriptor: EnvDescriptor
    num_envs: int
    clipped_actions = 0   # continuous actions: rows clipped into the bounds so far

    def reset(self) -> BatchStep:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> BatchStep:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _check_actions(self, actions) -> np.ndarray:
        """Discrete: an integer array [E] in [0, A). Continuous: a float array [E, d], finite;
        rows outside [action_low, action_high] are clipped into it and counted in
        ``clipped_actions`` (never passed on silently). Raises ValueError otherwise."""
        if self.descriptor.is_continuous:
            return self._check_continuous(actions)
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or actions.dtype.kind not in "iu":
            raise ValueError(
                f"actions must be an integer array of shape ({self.num_envs},), "
                f"got {actions.dtype} {actions.shape}")
        a = self.descriptor.num_actions
        if actions.size and (actions.min() < 0 or actions.max() >= a):
            raise ValueError(f"actions must lie in [0, {a - 1}], got min {actions.min()} max {actions.max()}")
        return actions

    def _check_continuous(self, actions) -> np.ndarray:
        actions, clipped = check_continuous_actions(self.descriptor, actions, self.num_envs)
        self.clipped_actions += clipped
        return actions


def check_continuous_actions(descriptor: EnvDescriptor, actions, rows: int) -> tuple:
    """Continuous actions [rows, d] -> (float32 actions clipped into the bounds, number of
    rows that needed clipping). Raises ValueError for a wrong shape or dtype, or a
    non-finite value (those are refused, never clipped)."""
    actions = np.asarray(actions)
    shape = (rows, *descriptor.action_shape)
    if actions.shape != shape or actions.dtype.kind not in "fiu":
        raise ValueError(f"actions must be a float array of shape {shape}, got {actions.dtype} {actions.shape}")
    actions = actions.astype(np.float32)
    if not np.isfinite(actions).all():
        row = int(np.flatnonzero(~np.isfinite(actions).all(axis=1))[0])
        raise ValueError(f"actions hold a non-finite value at row {row}: {actions[row].tolist()}")
    low = np.asarray(descriptor.action_low, np.float32)
    high = np.asarray(descriptor.action_high, np.float32)
    outside = ((actions < low) | (actions > high)).any(axis=1)
    if outside.any():
        actions = np.clip(actions, low, high)
    return actions, int(outside.sum())


class EpisodeStats:
    """Running per-env return and length; emits totals when episodes end."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def update(self, reward: np.ndarray, done: np.ndarray):
        """Adds one step; returns (episode_return [E] f32 NaN if not done, episode_length [E] i32 -1 if not done)."""
        self.returns += reward
        self.lengths += 1
        ep_return = np.where(done, self.returns, np.nan).astype(np.float32)
        ep_length = np.where(done, self.lengths, -1).astype(np.int32)
        self.returns[done] = 0.0
        self.lengths[done] = 0
        return ep_return, ep_length

    def no_episode(self):
        e = len(self.returns)
        return np.full(e, np.nan, np.float32), np.full(e, -1, np.int32)


class LoopEnvBatch(EnvBatch):
    """Steps E single :class:`Env` objects one after another.

    The fallback for envs with no vectorised implementation (``gym:<ID>``). Its
    per-step cost is E Python calls; the search's per-step cost is far larger.
    """

    def __init__(self, envs: list):
        if not envs:
            raise ValueError("LoopEnvBatch needs at least one env")
        self.envs = list(envs)
        self.descriptor = self.envs[0].descriptor
        self.num_envs = len(self.envs)
        self._stats = EpisodeStats(self.num_envs)
        self._obs = None

    def _current(self, obs_list, reward, terminated, truncated, ep_return, ep_length,
                 finals: Optional[dict] = None) -> BatchStep:
        """finals: {env index: final observation} of the envs whose episode ended."""
        observation = np.stack(obs_list)
        final = observation
        if finals:
            final = observation.copy()
            for i, obs in finals.items():
                final[i] = obs
        return BatchStep(
            observation=observation,
            reward=reward, terminated=terminated, truncated=truncated,
            legal_mask=np.stack([env.legal_mask() for env in self.envs]),
            to_play=np.array([env.to_play() for env in self.envs], dtype=np.int8),
            episode_return=ep_return, episode_length=ep_length, final_observation=final)

    def render(self, index: int):
        """Env ``index``'s own render of its current state (``render()``), or None."""
        render = getattr(self.envs[index], "render", None)
        return render() if callable(render) else None

    def reset(self) -> BatchStep:
        e = self.num_envs
        obs = [env.reset() for env in self.envs]
        self._stats = EpisodeStats(e)
        return self._current(obs, np.zeros(e, np.float32), np.zeros(e, bool), np.zeros(e, bool),
                             *self._stats.no_episode())

    def step(self, actions) -> BatchStep:
        actions = self._check_actions(actions)
        e = self.num_envs
        reward = np.zeros(e, np.float32)
        terminated = np.zeros(e, bool)
        truncated = np.zeros(e, bool)
        obs = []
        finals = {}
        continuous = self.descriptor.is_continuous
        for i, env in enumerate(self.envs):
            result = env.step(actions[i] if continuous else int(actions[i]))
            reward[i] = result.reward
            terminated[i] = result.terminated
            truncated[i] = result.truncated and not result.terminated
            if result.terminated or result.truncated:
                finals[i] = result.observation
                obs.append(env.reset())
            else:
                obs.append(result.observation)
        ep_return, ep_length = self._stats.update(reward, terminated | truncated)
        return self._current(obs, reward, terminated, truncated, ep_return, ep_length, finals)

    def close(self) -> None:
        for env in self.envs:
            env.close()
