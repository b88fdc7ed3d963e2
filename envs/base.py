"""Environment interface shared by every env in the registry.

An env here is a small single-agent (or two-player, alternating) episodic
environment with a discrete action set. It returns *single frames*, never stacks:
stacking happens where network inputs are assembled (``muzero.observation``), so
the replay stores each frame once.

This package imports nothing from ``muzero``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class EnvDescriptor:
    """Static facts about an env, enough to build networks, replay and search.

    Attributes:
      name: registry name (``cartpole``, ``tictactoe``, ``atari``, ``gym:<ID>``).
      observation_shape: shape of one observation (one frame for image envs).
      observation_dtype: numpy dtype name of observations (``uint8`` for images).
      num_actions: size of the discrete action set, A.
      two_player: True for alternating two-player zero-sum games. Then ``to_play``
        names the player to move and rewards are from the mover's point of view.
      kind: ``vector`` (flat features), ``image`` (H, W, C uint8 frames) or
        ``board`` (H, W, planes for board games).
      reward_range: (low, high) of one step's reward, or None when unbounded/unknown.
      value_range: (low, high) of discounted returns, or None when unknown.
      known_bounds: (low, high) bounds on search Q values when known exactly, else None.
      max_episode_steps: agent steps after which an episode is truncated, or None.
      frame_layout: for image envs, ``HWC`` with C = 1 (grayscale) or 3 (RGB); else None.
      has_legal_mask: True when some actions can be illegal in some states.
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

    @property
    def is_image(self) -> bool:
        return self.kind == "image"


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

    def close(self) -> None:
        pass
