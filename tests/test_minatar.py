"""MinAtar envs (``minatar:<Game>``): registry, descriptors, observations against the package
driven directly, sticky actions, truncation, seeding, and the MuZero defaults' network."""
import sys

import numpy as np
import pytest

minatar = pytest.importorskip("minatar")   # the `minatar` extra (part of `dev`)

import envs  # noqa: E402
from envs import minatar as mt  # noqa: E402
from envs.base import LoopEnvBatch  # noqa: E402

# From MinAtar's game sources: object planes and the minimal action set (MinAtar ids, of
# n, l, u, r, d, f = 0..5) of each game.
GAME_FACTS = {
    "Asterix": ("asterix", 4, [0, 1, 2, 3, 4]),
    "Breakout": ("breakout", 4, [0, 1, 3]),
    "Freeway": ("freeway", 7, [0, 2, 4]),
    "Seaquest": ("seaquest", 10, [0, 1, 2, 3, 4, 5]),
    "SpaceInvaders": ("space_invaders", 6, [0, 1, 3, 5]),
}


# ----------------------------------------------------------------------------- registry

def test_known_names_list_the_five_games():
    names = envs.known_names()
    for game in GAME_FACTS:
        assert f"minatar:{game}" in names
    assert "gym:<ID>" in names and "cartpole" in names


def test_camel_case_and_module_names_are_accepted():
    assert envs.describe("minatar:SpaceInvaders").name == "minatar:SpaceInvaders"
    assert envs.describe("minatar:space_invaders").name == "minatar:SpaceInvaders"
    assert envs.describe("minatar:breakout").name == "minatar:Breakout"


def test_unknown_game_is_one_line_listing_the_games():
    with pytest.raises(envs.UnknownEnvError) as err:
        envs.make("minatar:Pong")
    message = str(err.value)
    assert "\n" not in message and "'Pong'" in message
    for game in GAME_FACTS:
        assert game in message


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unknown minatar option"):
        envs.describe("minatar:Breakout", frame_skip=4)
    with pytest.raises(ValueError, match="sticky_actions"):
        envs.make("minatar:Breakout", sticky_actions=1.5)
    with pytest.raises(ValueError, match="max_episode_steps"):
        envs.make("minatar:Breakout", max_episode_steps=0)


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "minatar", None)   # makes `import minatar` fail
    with pytest.raises(ImportError) as err:
        envs.make("minatar:Breakout")
    assert "pip install -e '.[minatar]'" in str(err.value) and "\n" not in str(err.value)


def test_prefix_is_reserved():
    with pytest.raises(ValueError, match="reserved"):
        envs.register("minatar:Mine", lambda seed=0: None, lambda: None)


# ----------------------------------------------------------------------------- descriptor

@pytest.mark.parametrize("game", list(GAME_FACTS))
def test_descriptor(game):
    _, channels, actions = GAME_FACTS[game]
    d = envs.describe(f"minatar:{game}")
    assert d.observation_shape == (10, 10, channels)
    assert d.num_actions == len(actions)
    assert (d.observation_dtype, d.kind, d.frame_layout, d.two_player) == ("uint8", "image", "HWC", False)
    assert d.max_episode_steps == 10_000
    assert envs.describe(f"minatar:{game}", max_episode_steps=77).max_episode_steps == 77


def test_reward_ranges():
    assert envs.describe("minatar:Breakout").reward_range == (0.0, 1.0)
    assert envs.describe("minatar:Freeway").reward_range == (0.0, 1.0)
    assert envs.describe("minatar:Seaquest").reward_range is None   # surfacing pays up to 10


# ------------------------------------------------------------------ against the package itself

@pytest.mark.parametrize("game", list(GAME_FACTS))
def test_frames_are_255_times_minatars_state(game):
    """Same seed, same actions: the env's frames are 255 * MinAtar's boolean state() and
    the rewards and terminations are MinAtar's, through resets, sticky actions and all."""
    module, _, minimal = GAME_FACTS[game]
    seed = 11
    env = envs.make(f"minatar:{game}", seed=seed)
    ref = minatar.Environment(module, sticky_action_prob=0.1, difficulty_ramping=True)
    ref.seed(seed)
    rng = np.random.default_rng(0)
    obs = env.reset()
    ref.reset()
    episodes = 0
    for _ in range(400):
        expected = ref.state().astype(np.uint8) * 255
        assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 255}
        np.testing.assert_array_equal(obs, expected)
        a = int(rng.integers(len(minimal)))
        result = env.step(a)
        reward, terminal = ref.act(minimal[a])
        assert (result.reward, result.terminated, result.truncated) == (float(reward), bool(terminal), False)
        obs = result.observation
        if terminal:
            np.testing.assert_array_equal(obs, ref.state().astype(np.uint8) * 255)
            obs = env.reset()
            ref.reset()
            episodes += 1
    assert game == "Freeway" or episodes >= 1


def test_sticky_actions_worked_example():
    """Breakout, seed 6. MinAtar's RandomState(6) first draws the ball's start (randint(2) = 0:
    column 0, moving down-right from row 3), then one uniform per step for the sticky check:
    0.9475, 0.2094, 0.0643, 0.3701, 0.985. The third is below 0.1, so step 3 repeats step 2's
    action. Agent actions (minimal set n, l, r): right, right, left, left, noop.
    Paddle (row 9, starts at column 4): 5, 6, 7 (the sticky right), 6, 6.
    Without sticky actions: 5, 6, 5, 4, 4. The ball: (row, col) (4,1) (5,2) (6,3) (7,4) (8,5)."""
    draws = np.random.RandomState(6)
    assert draws.randint(2) == 0
    np.testing.assert_allclose(draws.rand(5), [0.9475, 0.2094, 0.0643, 0.3701, 0.9850], atol=1e-4)
    actions = [2, 2, 1, 1, 0]
    for sticky, paddle in ((0.1, [5, 6, 7, 6, 6]), (0.0, [5, 6, 5, 4, 4])):
        env = envs.make("minatar:Breakout", seed=6, sticky_actions=sticky)
        obs = env.reset()
        assert np.flatnonzero(obs[9, :, 0]).tolist() == [4]
        assert np.argwhere(obs[:, :, 1]).tolist() == [[3, 0]]
        for t, a in enumerate(actions):
            obs = env.step(a).observation
            assert np.flatnonzero(obs[9, :, 0]).tolist() == [paddle[t]], (sticky, t)
            assert np.argwhere(obs[:, :, 1]).tolist() == [[4 + t, 1 + t]]


# ----------------------------------------------------------------------------- episodes

def test_truncation_at_the_step_limit():
    env = envs.make("minatar:Freeway", seed=0, max_episode_steps=3)   # Freeway never ends early
    env.reset()
    flags = [(r.terminated, r.truncated) for r in (env.step(0) for _ in range(3))]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    batch = envs.make_batch("minatar:Freeway", 2, seed=0, max_episode_steps=3)
    batch.reset()
    for _ in range(2):
        step = batch.step(np.zeros(2, np.int64))
    step = batch.step(np.zeros(2, np.int64))
    assert step.truncated.all() and not step.terminated.any()
    assert step.episode_length.tolist() == [3, 3]


def test_freeway_terminates_itself_after_2500_frames():
    """MinAtar's own rule: Freeway's timer starts at 2500 and the game ends when it drops below 0."""
    env = envs.make("minatar:Freeway", seed=0)
    env.reset()
    for t in range(1, 2502):
        result = env.step(1)
        assert result.terminated == (t == 2501) and not result.truncated
    assert result.terminated


def test_same_seed_same_trajectory_and_batch_seeds():
    def rollout(env, steps=150):
        rng = np.random.default_rng(3)
        frames, rewards = [env.reset()], []
        for _ in range(steps):
            r = env.step(int(rng.integers(env.descriptor.num_actions)))
            frames.append(r.observation)
            rewards.append(r.reward)
            if r.terminated or r.truncated:
                frames.append(env.reset())
        return np.stack(frames), rewards

    a, ra = rollout(envs.make("minatar:Asterix", seed=5))
    b, rb = rollout(envs.make("minatar:Asterix", seed=5))
    c, _ = rollout(envs.make("minatar:Asterix", seed=6))
    np.testing.assert_array_equal(a, b)
    assert ra == rb
    assert a.shape != c.shape or not np.array_equal(a, c)
    batch = envs.make_batch("minatar:Asterix", 3, seed=10)
    assert isinstance(batch, LoopEnvBatch)
    first = batch.reset().observation
    for i in range(3):   # env i of a batch is seeded with seed + i
        np.testing.assert_array_equal(first[i], envs.make("minatar:Asterix", seed=10 + i).reset())


# ----------------------------------------------------------------------------- MuZero defaults

def test_muzero_defaults_build_a_network():
    from muzero.algorithms.muzero.defaults import run_defaults
    from muzero.algorithms.muzero.network.networks import make_network
    settings = run_defaults("minatar:Seaquest")
    cfg = settings.config
    assert settings.env == "minatar:Seaquest"
    assert cfg.network.conv_downsample is False and cfg.search.discount == 0.99
    d = envs.describe("minatar:Seaquest")
    t = cfg.targets.stack_frames
    net = make_network(d, cfg.network, stack_frames=t, seed=0)
    assert net.input_shape == (10, 10, t * 10 + t)     # T frames of 10 planes, T action planes
    obs = np.zeros((2, 10, 10, t * 10 + t), np.uint8)
    out = net.initial_inference(obs)
    assert tuple(out["policy_logits"].shape) == (2, 6)
    assert tuple(out["value"].shape) == (2,)
    assert tuple(out["hidden_state"].shape) == (2, 10, 10, cfg.network.conv_channels)
