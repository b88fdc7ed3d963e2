"""Network-input assembly from single environment frames.

Environments return one frame per step and the replay stores each frame once.
The network input for image envs is built here, from the last ``stack_frames``
frames and the actions that led to each of them, by the actor (at acting time)
and by the replay (at sampling time) through the same function, so the two can
never disagree.

Image layout (``H, W, C`` frames, ``T = stack_frames``), uint8, channels last:

    channels [0, T*C)        frames oldest to newest, each frame's C channels together
    channels [T*C, T*C + T)  one action plane per frame, oldest to newest

An action plane holds ``round(255 * (a + 1) / A)`` for the action ``a`` that led to
that frame, and 0 where there is none (before the episode's first frame, and for
the first frame itself). Frames before the episode start are zeros. The network
divides the whole input by 255.

Vector and board envs use ``stack_frames == 1`` and no action planes: the input is
the observation itself.

Imports only NumPy; never TensorFlow.
"""
from __future__ import annotations

import numpy as np

NO_ACTION = -1


def network_input_shape(frame_shape: tuple, is_image: bool, stack_frames: int) -> tuple:
    """Shape of one network input (no batch dimension)."""
    if not is_image:
        if stack_frames != 1:
            raise ValueError(f"stack_frames={stack_frames} but non-image observations use 1")
        return tuple(frame_shape)
    if len(frame_shape) != 3:
        raise ValueError(f"image frames must be (H, W, C), got shape {tuple(frame_shape)}")
    h, w, c = frame_shape
    return (h, w, stack_frames * c + stack_frames)


def action_plane_values(actions: np.ndarray, num_actions: int) -> np.ndarray:
    """uint8 plane value per action: round(255 * (a + 1) / A); NO_ACTION -> 0."""
    actions = np.asarray(actions)
    values = np.rint(255.0 * (actions.astype(np.float64) + 1.0) / num_actions)
    values = np.where(actions < 0, 0.0, values)
    return values.astype(np.uint8)


def assemble_image_input(frames: np.ndarray, actions: np.ndarray, num_actions: int) -> np.ndarray:
    """Stacks frames and action planes into network inputs.

    Args:
      frames: [B, T, H, W, C] uint8, oldest first; zeros before the episode start.
      actions: [B, T] int, the action that led to each frame; NO_ACTION (-1) where none.
      num_actions: A, the size of the action set.

    Returns:
      [B, H, W, T*C + T] uint8.
    """
    frames = np.asarray(frames)
    actions = np.asarray(actions)
    if frames.ndim != 5 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be [B, T, H, W, C] uint8, got {frames.shape} {frames.dtype}")
    b, t, h, w, c = frames.shape
    if actions.shape != (b, t):
        raise ValueError(f"actions must be [B, T] = {(b, t)}, got {actions.shape}")
    out = np.empty((b, h, w, t * c + t), dtype=np.uint8)
    # [B, T, H, W, C] -> [B, H, W, T, C] -> [B, H, W, T*C]
    out[..., : t * c] = frames.transpose(0, 2, 3, 1, 4).reshape(b, h, w, t * c)
    out[..., t * c:] = action_plane_values(actions, num_actions)[:, None, None, :]
    return out


class FrameHistory:
    """The actor's rolling window of the last ``stack_frames`` frames per env.

    Keeps ``frames [E, T, H, W, C]`` uint8 and ``actions [E, T]`` (the action that led
    to each frame, NO_ACTION at the episode start), oldest first, so that
    :meth:`network_input` equals what the replay assembles for the same position.
    """

    def __init__(self, num_envs: int, frame_shape: tuple, stack_frames: int, num_actions: int):
        self.num_actions = num_actions
        self.frames = np.zeros((num_envs, stack_frames) + tuple(frame_shape), dtype=np.uint8)
        self.actions = np.full((num_envs, stack_frames), NO_ACTION, dtype=np.int64)

    def start(self, frames: np.ndarray, envs: np.ndarray) -> None:
        """Begins new episodes in the envs selected by ``envs`` ([E] bool) with ``frames [E, ...]``."""
        self.frames[envs] = 0
        self.actions[envs] = NO_ACTION
        self.frames[envs, -1] = frames[envs]

    def push(self, frames: np.ndarray, actions: np.ndarray) -> None:
        """Appends ``frames [E, H, W, C]`` reached by taking ``actions [E]``."""
        self.frames[:, :-1] = self.frames[:, 1:]
        self.actions[:, :-1] = self.actions[:, 1:]
        self.frames[:, -1] = frames
        self.actions[:, -1] = actions

    def network_input(self) -> np.ndarray:
        """[E, H, W, T*C + T] uint8."""
        return assemble_image_input(self.frames, self.actions, self.num_actions)
