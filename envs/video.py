"""Recording played episodes as a GIF or MP4: ``python -m muzero.eval --video=PATH``.

    recorder = VideoRecorder("runs/cartpole/eval.gif")
    batch = recorder.make_batch("cartpole", 1, seed=0)   # an EnvBatch that draws env 0's frames
    ...                                                  # play: batch.reset(), batch.step(actions)
    recorder.close()                                     # writes the file; returns the frame count

Frames come from env 0 of the batch, drawn by the env kind's renderer:

* ``gym:<ID>``: Gymnasium's own ``rgb_array`` render (the env is made with
  ``render_mode="rgb_array"``), Atari ids included;
* ``cartpole``: the cart and pole drawn from the observation (x and the angle);
* ``minatar:<Game>``: one colour per object plane, each cell a square;
* ``atari``: the observed (down-sampled) frame, enlarged;
* ``tictactoe``: the board with its X and O stones;
* ``reach``: the point and the goal seen from above (x, y) and from the side (x, z);
* any other env: its batch's ``render(index)`` when it has one, else the observation (an
  image enlarged, a vector as bars).

Each frame carries a strip with the episode, the step and the return so far; the last
frame of an episode is held for a second with its final return. A GIF is written with
Pillow (a dependency of matplotlib); an MP4 needs the ``video`` extra (``imageio-ffmpeg``,
which ships its own ffmpeg binary and downloads nothing at run time).
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import numpy as np

FORMATS = (".gif", ".mp4")
STRIP = 16   # pixels of the text strip above each frame


def gif_frame_ms(fps: int) -> int:
    """How long a GIF shows one frame: GIF times are whole hundredths of a second."""
    return 10 * max(1, round(100 / fps))


class VideoError(ValueError):
    """A video that cannot be written (bad path or format, missing extra)."""


def check_path(path: str) -> str:
    """``path`` if its extension is a known format and its folder can be made; VideoError
    names what to do otherwise (also when an MP4 is asked for without the extra)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise VideoError(f"--video={path!r}: the file must end in .gif or .mp4")
    if ext == ".mp4":
        import importlib.util
        if importlib.util.find_spec("imageio_ffmpeg") is None:
            raise VideoError(f"--video={path!r}: MP4 needs the video extra (pip install -e '.[video]'); "
                             "a .gif needs nothing more")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise VideoError(f"--video={path!r}: cannot create {folder}: {e.strerror}") from None
    return path


# -- renderers: (batch, index, observation) -> uint8 [H, W, 3] -----------------------------------

def _canvas(height: int, width: int, colour=(255, 255, 255)):
    from PIL import Image, ImageDraw
    image = Image.new("RGB", (width, height), colour)
    return image, ImageDraw.Draw(image)


def cartpole_frame(observation: np.ndarray) -> np.ndarray:
    """The cart (x in [-2.4, 2.4] across the track) and the pole at angle theta (radians,
    0 upright, positive leaning right), from a (x, x_dot, theta, theta_dot) or (x, theta)
    observation."""
    obs = np.asarray(observation, np.float64).reshape(-1)
    x, theta = (obs[0], obs[2]) if obs.size >= 4 else (obs[0], obs[1])
    width, height, track_y = 360, 200, 150
    scale = width / 5.6                              # 4.8 of track plus margins
    image, draw = _canvas(height, width)
    draw.line([(0, track_y), (width, track_y)], fill=(0, 0, 0), width=1)
    for edge in (-2.4, 2.4):
        ex = width / 2 + edge * scale
        draw.line([(ex, track_y - 6), (ex, track_y + 6)], fill=(200, 0, 0), width=2)
    cx = width / 2 + float(np.clip(x, -2.8, 2.8)) * scale
    draw.rectangle([cx - 24, track_y - 14, cx + 24, track_y + 2], fill=(40, 40, 40))
    length = 1.0 * scale                             # the pole is 1.0 long (half-length 0.5)
    top = (cx + length * np.sin(theta), track_y - 8 - length * np.cos(theta))
    draw.line([(cx, track_y - 8), top], fill=(204, 153, 102), width=7)
    draw.ellipse([cx - 3, track_y - 11, cx + 3, track_y - 5], fill=(120, 120, 200))
    return np.asarray(image)


# Colours of MinAtar's object planes, in plane order (cycled for games with more planes).
_PLANE_COLOURS = np.array([(240, 200, 60), (220, 60, 60), (70, 160, 240), (90, 200, 90), (200, 100, 220),
                           (250, 140, 40), (60, 200, 200), (160, 160, 160), (240, 120, 160), (140, 90, 40)],
                          np.uint8)


def planes_frame(observation: np.ndarray, cell: int = 24) -> np.ndarray:
    """An [H, W, C] grid of object planes (non-zero = present) as H x W squares of ``cell``
    pixels, each cell the colour of its last present plane, black when empty."""
    obs = np.asarray(observation)
    height, width, planes = obs.shape
    rgb = np.zeros((height, width, 3), np.uint8)
    for c in range(planes):
        rgb[obs[..., c] > 0] = _PLANE_COLOURS[c % len(_PLANE_COLOURS)]
    return np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)


def image_frame(observation: np.ndarray, scale: int = 3) -> np.ndarray:
    """An [H, W, C] uint8 image enlarged ``scale`` times: as it is when C = 3 (RGB), else its
    last channel in grey."""
    frame = np.asarray(observation).astype(np.uint8)
    frame = frame if frame.shape[-1] == 3 else np.repeat(frame[..., -1:], 3, axis=2)
    return np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1)


def board_frame(observation: np.ndarray) -> np.ndarray:
    """A tic-tac-toe board from its (3, 3, 3) planes [player 0's stones, player 1's, to play]:
    X for player 0, O for player 1."""
    obs = np.asarray(observation)
    size, cell = 240, 80
    image, draw = _canvas(size, size)
    for i in (1, 2):
        draw.line([(i * cell, 6), (i * cell, size - 6)], fill=(0, 0, 0), width=3)
        draw.line([(6, i * cell), (size - 6, i * cell)], fill=(0, 0, 0), width=3)
    for row in range(3):
        for col in range(3):
            x0, y0 = col * cell + 16, row * cell + 16
            x1, y1 = x0 + cell - 32, y0 + cell - 32
            if obs[row, col, 0]:
                draw.line([(x0, y0), (x1, y1)], fill=(200, 40, 40), width=7)
                draw.line([(x0, y1), (x1, y0)], fill=(200, 40, 40), width=7)
            elif obs[row, col, 1]:
                draw.ellipse([x0, y0, x1, y1], outline=(40, 80, 200), width=7)
    return np.asarray(image)


def goal_frame(observation: np.ndarray, slices: dict, threshold: Optional[float] = None) -> np.ndarray:
    """A goal env's achieved goal (blue dot) and desired goal (red ring, the tolerance when
    known) in the box [-1, 1]^d: from above (x, y) and, with 3 dims, from the side (x, z)."""
    obs = np.asarray(observation, np.float64)
    achieved, desired = obs[slices["achieved_goal"]], obs[slices["desired_goal"]]
    views = [(0, 1)] if achieved.size >= 2 else [(0, 0)]
    if achieved.size >= 3:
        views.append((0, 2))
    panel = 200
    image, draw = _canvas(panel, panel * len(views))
    for v, (i, j) in enumerate(views):
        left = v * panel

        def at(p):
            return left + (p[i] + 1) / 2 * (panel - 20) + 10, panel - 10 - (p[j] + 1) / 2 * (panel - 20)
        draw.rectangle([left + 10, 10, left + panel - 10, panel - 10], outline=(0, 0, 0))
        gx, gy = at(desired)
        ring = max(4.0, (threshold or 0.0) / 2 * (panel - 20))
        draw.ellipse([gx - ring, gy - ring, gx + ring, gy + ring], outline=(210, 40, 40), width=2)
        ax, ay = at(achieved)
        draw.ellipse([ax - 5, ay - 5, ax + 5, ay + 5], fill=(40, 80, 220))
        names = "xyz"
        draw.text((left + 14, 12), f"{names[i]}-{names[j]}", fill=(0, 0, 0))
    return np.asarray(image)


def bars_frame(observation: np.ndarray) -> np.ndarray:
    """A vector observation as one bar per entry (tanh-squashed around a middle line)."""
    obs = np.tanh(np.asarray(observation, np.float64).reshape(-1))
    width, height = max(200, 12 * obs.size), 160
    image, draw = _canvas(height, width)
    bar = width / max(1, obs.size)
    draw.line([(0, height / 2), (width, height / 2)], fill=(0, 0, 0))
    for k, v in enumerate(obs):
        draw.rectangle([k * bar + 1, height / 2 - v * 70, (k + 1) * bar - 1, height / 2],
                       fill=(70, 130, 200) if v >= 0 else (220, 110, 60))
    return np.asarray(image)


def renderer(env: str, options: dict, descriptor) -> tuple:
    """(options to make the env with, render(batch, index, observation) -> uint8 [H, W, 3],
    frames per second) for env ``env``."""
    def from_observation(batch, index, observation):
        if descriptor.is_image:
            return image_frame(observation)
        if env.startswith("gym:CartPole"):
            return cartpole_frame(observation)
        return bars_frame(observation)

    if env.startswith("gym:"):
        fallback = []   # set once Gymnasium's render turns out to need a missing package

        def from_gym(batch, index, observation):
            if not fallback:
                try:
                    frame = batch.render(index)
                    if frame is not None:
                        return np.asarray(frame, np.uint8)
                    reason = "returned no rgb_array frame"
                except Exception as e:     # e.g. Gymnasium's DependencyNotInstalled (no pygame)
                    reason = f"cannot render here ({type(e).__name__}: {e})"
                print(f"--video: {env} {reason}; drawing its observations instead (classic-control and "
                      "Box2D envs render with pygame: pip install -e '.[video]')", file=sys.stderr)
                fallback.append(True)
            return from_observation(batch, index, observation)
        # pygame (Gymnasium's classic-control renderer) opens no window and no sound device.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        return dict(options, render_mode="rgb_array"), from_gym, 30
    if env == "cartpole":
        return options, lambda batch, index, obs: cartpole_frame(obs), 30
    if env.startswith("minatar:"):
        return options, lambda batch, index, obs: planes_frame(obs), 10
    if env == "tictactoe":
        return options, lambda batch, index, obs: board_frame(obs), 2
    if env == "reach" or descriptor.goal_layout is not None:
        slices = descriptor.goal_slices()
        threshold = options.get("threshold", 0.05) if env == "reach" else None
        return options, lambda batch, index, obs: goal_frame(obs, slices, threshold), 15

    def generic(batch, index, observation):
        render = getattr(batch, "render", None)
        frame = render(index) if callable(render) else None
        return np.asarray(frame, np.uint8) if frame is not None else from_observation(batch, index, observation)
    return options, generic, 15 if descriptor.is_image else 30


# -- recording ----------------------------------------------------------------------------------

def _annotate(frame: np.ndarray, text: str) -> np.ndarray:
    """``frame`` with a white strip of ``STRIP`` pixels above it holding ``text``."""
    from PIL import Image, ImageDraw
    frame = np.asarray(frame, np.uint8)
    if frame.ndim == 2:
        frame = np.repeat(frame[..., None], 3, axis=2)
    height, width = frame.shape[:2]
    image = Image.new("RGB", (width, height + STRIP), (255, 255, 255))
    image.paste(Image.fromarray(frame[..., :3]), (0, STRIP))
    ImageDraw.Draw(image).text((4, 2), text, fill=(0, 0, 0))
    return np.asarray(image)


class RecordingBatch:
    """An EnvBatch that draws env 0's frames into a :class:`VideoRecorder` while it is
    played; everything else is the wrapped batch's."""

    def __init__(self, batch, recorder: "VideoRecorder", render: Callable, from_env: bool):
        self._batch = batch
        self._recorder = recorder
        self._render = render
        # A renderer that reads the env (Gymnasium's render) sees the reset state after an
        # episode ends, not its last one: the last frame drawn is held instead.
        self._from_env = from_env
        self._step_in_episode = 0
        self._return = 0.0
        self._episode = 1

    def __getattr__(self, name):
        return getattr(self._batch, name)

    def _caption(self) -> str:
        return f"episode {self._episode}  step {self._step_in_episode}  return {self._return:.1f}"

    def _draw(self, observation) -> np.ndarray:
        return self._render(self._batch, 0, observation)

    def reset(self):
        step = self._batch.reset()
        self._recorder.add(_annotate(self._draw(step.observation[0]), self._caption()))
        return step

    def step(self, actions):
        nxt = self._batch.step(actions)
        if not self._recorder.recording:
            return nxt
        self._step_in_episode += 1
        self._return += float(nxt.reward[0])
        if nxt.episode_length[0] >= 0:      # env 0's episode ended (it is reset already)
            final = nxt.final_observation[0] if nxt.final_observation is not None else None
            if final is not None and not self._from_env:
                frame = self._draw(final)
            else:
                frame = self._recorder.last_frame
            ended = (f"episode {self._episode} ended: {int(nxt.episode_length[0])} steps, "
                     f"return {float(nxt.episode_return[0]):.1f}")
            self._recorder.add(_annotate(frame, ended), hold=True)
            self._recorder.episode_done()
            self._episode += 1
            self._step_in_episode, self._return = 0, 0.0
            if not self._recorder.recording:
                return nxt
        self._recorder.add(_annotate(self._draw(nxt.observation[0]), self._caption()))
        return nxt


class VideoRecorder:
    """Collects frames of played episodes and writes them to ``path`` (.gif or .mp4).

    ``episodes``: how many of env 0's episodes to record (None: all it plays). An MP4 is
    streamed to ffmpeg as frames arrive; a GIF's frames are kept (one byte per pixel) until
    :meth:`close` and stop at ``GIF_MAX_FRAMES`` (100 s at 30 frames/s; an MP4 has no cap)."""

    GIF_MAX_FRAMES = 3000

    def __init__(self, path: str, episodes: Optional[int] = None):
        self.path = check_path(path)
        self.gif = self.path.lower().endswith(".gif")
        self.episodes = episodes
        self.fps = 30
        self.num_frames = 0
        self.capped = False
        self._images: list = []       # GIF: palette images
        self._writer = None           # MP4: the ffmpeg writer, opened at the first frame
        self._shape = None
        self._last = None
        self._done = 0

    @property
    def recording(self) -> bool:
        return not self.capped and (self.episodes is None or self._done < self.episodes)

    @property
    def last_frame(self) -> np.ndarray:
        """The last frame added, without its text strip."""
        return self._last[STRIP:] if self._last is not None else np.zeros((8, 8, 3), np.uint8)

    def episode_done(self) -> None:
        self._done += 1

    def add(self, frame: np.ndarray, hold: bool = False) -> None:
        """Appends ``frame`` (uint8 [H, W, 3], the same size every time); ``hold`` shows it
        for a second (an episode's end)."""
        if not self.recording:
            return
        if self._shape is None:
            self._shape = frame.shape
        elif frame.shape != self._shape:
            raise VideoError(f"--video: frame of shape {frame.shape} after frames of {self._shape}")
        self._last = frame
        repeats = max(1, self.fps) if hold else 1
        if self.gif:
            from PIL import Image
            image = Image.fromarray(frame).quantize(256)
            for _ in range(repeats):
                if len(self._images) >= self.GIF_MAX_FRAMES:
                    self.capped = True
                    break
                self._images.append(image)
            self.num_frames = len(self._images)
            return
        if self._writer is None:
            import imageio_ffmpeg
            height, width = frame.shape[:2]
            self._writer = imageio_ffmpeg.write_frames(self.path, (width + width % 2, height + height % 2),
                                                       fps=self.fps, macro_block_size=1, quality=7)
            self._writer.send(None)
        pad = ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0))   # H.264 wants even sizes
        padded = np.ascontiguousarray(np.pad(frame, pad, mode="edge"))
        for _ in range(repeats):
            self._writer.send(padded)
        self.num_frames += repeats

    def make_batch(self, env: str, num_envs: int, seed: int = 0, **options):
        """``envs.make_batch`` with env 0's frames recorded."""
        import envs
        descriptor = envs.describe(env, **options)
        make_options, render, self.fps = renderer(env, options, descriptor)
        return RecordingBatch(envs.make_batch(env, num_envs, seed=seed, **make_options), self, render,
                              from_env=env.startswith("gym:"))

    def close(self) -> int:
        """Writes the video; returns how many frames it holds. VideoError when none were drawn."""
        if not self.num_frames:
            raise VideoError(f"--video={self.path!r}: no frame was recorded")
        if self.gif:
            first, *rest = self._images
            first.save(self.path, save_all=True, append_images=rest, duration=gif_frame_ms(self.fps), loop=0)
            self._images = []
        else:
            self._writer.close()
        return self.num_frames
