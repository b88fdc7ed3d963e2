"""Recording played episodes (``envs.video``, ``python -m muzero.eval --video``): a short
clip of every env kind, with the frame count worked out from the episode's own length."""
import importlib.util

import numpy as np
import pytest

from envs.video import STRIP, VideoError, VideoRecorder, cartpole_frame, check_path, gif_frame_ms

HAS_MINATAR = importlib.util.find_spec("minatar") is not None
HAS_FFMPEG = importlib.util.find_spec("imageio_ffmpeg") is not None
HAS_PYGAME = importlib.util.find_spec("pygame") is not None


def _play(recorder, env, options=None, max_steps=120, seed=0):
    """Random legal actions in one env until its first episode ends (or ``max_steps``);
    returns (steps taken, the episode's length or None)."""
    batch = recorder.make_batch(env, 1, seed=seed, **(options or {}))
    rng = np.random.default_rng(seed)
    step = batch.reset()
    d = batch.descriptor
    for n in range(1, max_steps + 1):
        if d.is_continuous:
            action = rng.uniform(-1, 1, (1, *d.action_shape)).astype(np.float32)
        else:
            action = np.array([rng.choice(np.flatnonzero(step.legal_mask[0]))])
        step = batch.step(action)
        if step.episode_length[0] >= 0:
            batch.close()
            return n, int(step.episode_length[0])
    batch.close()
    return max_steps, None


# env, options, the frame's size (width, height) without the text strip, frames per second
KINDS = [
    ("cartpole", {}, (360, 200), 30),
    ("tictactoe", {}, (240, 240), 2),
    ("reach", {"max_episode_steps": 20}, (400, 200), 15),
    ("atari", {"game": "Pong", "screen_size": 84}, (252, 252), 15),     # the observed frame x 3
    pytest.param("minatar:Breakout", {}, (240, 240), 10,
                 marks=pytest.mark.skipif(not HAS_MINATAR, reason="needs the minatar extra")),
    pytest.param("gym:CartPole-v1", {}, (600, 400), 30,
                 marks=pytest.mark.skipif(not HAS_PYGAME, reason="Gymnasium renders CartPole with pygame")),
]


@pytest.mark.parametrize("env,options,size,fps", KINDS)
def test_a_gif_of_each_env_kind(tmp_path, env, options, size, fps):
    from PIL import Image
    path = str(tmp_path / "clip.gif")
    recorder = VideoRecorder(path, episodes=1)
    steps, length = _play(recorder, env, options)
    frames = recorder.close()
    # The reset frame, one per step, and the episode's last frame held for a second.
    expected = 1 + steps if length is None else 1 + (length - 1) + fps
    if length is not None:
        assert length == steps
    assert frames == expected and recorder.fps == fps
    with Image.open(path) as gif:
        assert gif.size == (size[0], size[1] + STRIP)
        total_ms = 0
        for k in range(gif.n_frames):   # Pillow merges repeated frames into longer ones
            gif.seek(k)
            total_ms += gif.info["duration"]
    assert total_ms == frames * gif_frame_ms(fps)


@pytest.mark.skipif(not HAS_FFMPEG, reason="MP4 needs the video extra (imageio-ffmpeg)")
def test_an_mp4_holds_every_frame(tmp_path):
    import imageio_ffmpeg
    path = str(tmp_path / "clip.mp4")
    recorder = VideoRecorder(path, episodes=2)
    batch = recorder.make_batch("cartpole", 1, seed=3)
    batch.reset()
    lengths = []
    while len(lengths) < 2:
        step = batch.step(np.zeros(1, np.int64))     # always push left: a short episode
        if step.episode_length[0] >= 0:
            lengths.append(int(step.episode_length[0]))
    frames = recorder.close()
    # Per episode: its steps' frames, the last held for 30; the second starts with a reset frame.
    assert frames == 1 + sum(n - 1 + 30 for n in lengths) + 1
    reader = imageio_ffmpeg.read_frames(path)
    meta = next(reader)
    assert tuple(meta["size"]) == (360, 200 + STRIP) and meta["fps"] == 30
    assert sum(1 for _ in reader) == frames


def test_the_cartpole_drawing_follows_the_pole():
    # Pole leaning right (theta = +0.2 rad): its top lies right of the cart's centre, so the
    # pole's colour appears in the right half of the rows above the cart.
    frame = cartpole_frame(np.array([0.0, 0.0, 0.2, 0.0]))
    pole = np.all(frame == (204, 153, 102), axis=-1)
    rows, cols = np.nonzero(pole[:100])
    assert cols.size and cols.mean() > 180
    frame = cartpole_frame(np.array([1.0, -0.2]))      # (x, theta): the cart 1.0 right of the centre
    cart = np.all(frame == (40, 40, 40), axis=-1)
    assert np.nonzero(cart)[1].mean() == pytest.approx(180 + 360 / 5.6, abs=2)


def test_bad_paths_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(VideoError, match=r"--video='x.avi': the file must end in .gif or .mp4"):
        check_path("x.avi")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(VideoError, match=r"MP4 needs the video extra \(pip install -e '.\[video\]'\)"):
        check_path(str(tmp_path / "a.mp4"))
    recorder = VideoRecorder(str(tmp_path / "none.gif"))
    with pytest.raises(VideoError, match="no frame was recorded"):
        recorder.close()
