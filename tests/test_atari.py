"""Atari preprocessing: shapes, no-op starts, sticky actions, life loss, truncation at the frame cap."""
import numpy as np
import pytest

import envs
from envs.atari import AtariEnv, _area_matrix


@pytest.mark.parametrize("grayscale,size,channels", [(True, 96, 1), (False, 84, 3)])
def test_frame_shapes_and_dtype(grayscale, size, channels):
    d = envs.describe("atari", grayscale=grayscale, screen_size=size)
    assert d.observation_shape == (size, size, channels) and d.kind == "image"
    env = AtariEnv(seed=0, grayscale=grayscale, screen_size=size)
    obs = env.reset()
    assert obs.shape == (size, size, channels) and obs.dtype == np.uint8
    assert env.step(0).observation.shape == (size, size, channels)


def test_action_sets():
    assert envs.describe("atari", game="Pong").num_actions == 6
    assert envs.describe("atari", game="Pong", full_action_space=True).num_actions == 18
    assert envs.describe("atari", game="MsPacman").num_actions == 9
    with pytest.raises(ValueError, match="unknown Atari game"):
        envs.describe("atari", game="NotAGame")
    with pytest.raises(ValueError, match="screen_size"):
        envs.describe("atari", screen_size=100)
    with pytest.raises(ValueError, match="unknown atari option"):
        envs.describe("atari", frameskip=4)


def test_area_resampling_averages_spans():
    # 4 -> 2: each output averages two inputs; 3 -> 2: spans [0, 1.5) and [1.5, 3).
    np.testing.assert_allclose(_area_matrix(2, 4), [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
    np.testing.assert_allclose(_area_matrix(2, 3), [[2 / 3, 1 / 3, 0], [0, 1 / 3, 2 / 3]])


def test_noop_starts_are_seeded_and_bounded():
    frames = []
    for seed in range(6):
        env = AtariEnv(seed=seed, sticky_actions=0.0, noop_max=30)
        env.reset()
        frames.append(env._episode_frames)
    # 1..30 no-op agent steps of 4 emulator frames each.
    assert all(4 <= f <= 120 and f % 4 == 0 for f in frames)
    assert len(set(frames)) > 1
    again = AtariEnv(seed=3, sticky_actions=0.0, noop_max=30)
    again.reset()
    assert again._episode_frames == frames[3]
    none = AtariEnv(seed=3, noop_max=0)
    none.reset()
    assert none._episode_frames == 0


def _trajectory(seed, sticky, steps=150):
    env = AtariEnv(seed=seed, sticky_actions=sticky, noop_max=0, game="Breakout")
    out = [env.reset()]
    for t in range(steps):
        out.append(env.step([1, 2, 3][t % 3]).observation)  # FIRE, RIGHT, LEFT
    return np.stack(out)


def test_sticky_actions_switch():
    # Without sticky actions the emulator is deterministic: the seed does not matter.
    np.testing.assert_array_equal(_trajectory(1, 0.0), _trajectory(2, 0.0))
    # With p = 0.25 repeated actions depend on the seed: trajectories diverge.
    assert not np.array_equal(_trajectory(1, 0.25), _trajectory(2, 0.25))
    np.testing.assert_array_equal(_trajectory(1, 0.25), _trajectory(1, 0.25))


def _play_until_life_lost(env, max_steps=3000):
    env.reset()
    lives = env._ale.lives()
    for t in range(max_steps):
        result = env.step(t % 2)  # NOOP / FIRE in Breakout: the ball is missed sooner or later
        if result.info["life_lost"] or result.terminated:
            return result, lives
    raise AssertionError("no life lost")


def test_life_loss_as_terminal_switch():
    env = AtariEnv(seed=0, game="Breakout", terminal_on_life_loss=True, sticky_actions=0.0, noop_max=0)
    result, lives_before = _play_until_life_lost(env)
    assert result.info["life_lost"] and result.terminated and not result.truncated
    assert result.info["lives"] == lives_before - 1
    env.reset()  # continues the same game: lives are not restored
    assert env._ale.lives() == lives_before - 1
    off = AtariEnv(seed=0, game="Breakout", terminal_on_life_loss=False, sticky_actions=0.0, noop_max=0)
    result, lives_before = _play_until_life_lost(off)
    assert result.info["life_lost"] and not result.terminated


def test_truncation_at_the_frame_cap():
    env = AtariEnv(seed=0, max_episode_frames=40, noop_max=0)
    env.reset()
    flags = [env.step(0) for _ in range(10)]
    assert [f.truncated for f in flags] == [False] * 9 + [True]
    assert not any(f.terminated for f in flags)
    env.reset()  # a truncated game restarts from the beginning
    assert env._episode_frames == 0


def test_vector_batch_shapes_and_truncation():
    batch = envs.make_batch("atari", 3, seed=0, max_episode_frames=40, noop_max=0)
    step = batch.reset()
    assert step.observation.shape == (3, 96, 96, 1) and step.observation.dtype == np.uint8
    for _ in range(10):
        step = batch.step(np.zeros(3, np.int64))
    assert step.truncated.all() and not step.terminated.any()
    assert (step.episode_length == 10).all()
    loop = envs.make_batch("atari", 2, seed=0, vectorized=False, grayscale=False)
    assert loop.reset().observation.shape == (2, 96, 96, 3)
    batch.close()
