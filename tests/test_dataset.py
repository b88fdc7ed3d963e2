"""Recorded experience (``muzero.dataset``): the Minari round trip, the space checks, the
collector, and the targets a MuZero replay builds from a hand-made two-episode dataset."""
import dataclasses

import numpy as np
import pytest

pytest.importorskip("minari")

import envs  # noqa: E402
from muzero import dataset  # noqa: E402
from muzero.dataset import Episode  # noqa: E402


@pytest.fixture(autouse=True)
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def _vector_episodes():
    rng = np.random.default_rng(0)
    return [Episode(observations=rng.normal(size=(4, 4)).astype(np.float32), actions=np.array([0, 1, 1]),
                    rewards=np.array([1.0, 1.0, 1.0], np.float32), terminated=True, truncated=False),
            Episode(observations=rng.normal(size=(3, 4)).astype(np.float32), actions=np.array([1, 0]),
                    rewards=np.array([1.0, 1.0], np.float32), terminated=False, truncated=True)]


def test_round_trip_keeps_every_field_and_how_episodes_ended(minari_root):
    cartpole = envs.describe("cartpole")
    written = _vector_episodes()
    path = dataset.write_dataset("test/cartpole-v0", written, cartpole, env="cartpole", algorithm="muzero")
    assert path == str(minari_root / "test" / "cartpole-v0")
    for ref in ("test/cartpole-v0", path):        # by id in the root, or by folder
        data = dataset.open_dataset(ref)
        dataset.check_matches(data, cartpole, "cartpole")
        assert dataset.dataset_env(data) == {"env": "cartpole", "env_options": {}}
        read = list(dataset.read_episodes(data))
        assert len(read) == 2
        for a, b in zip(written, read):
            np.testing.assert_array_equal(a.observations, b.observations)
            np.testing.assert_array_equal(a.actions, b.actions)
            np.testing.assert_array_equal(a.rewards, b.rewards)
            assert (a.terminated, a.truncated) == (b.terminated, b.truncated)
    with pytest.raises(ValueError, match="already exists|exists"):
        dataset.write_dataset("test/cartpole-v0", written, cartpole, env="cartpole")


def test_image_frames_round_trip_as_uint8():
    descriptor = envs.EnvDescriptor("frames", (5, 5, 2), "uint8", 3, kind="image", frame_layout="HWC")
    frames = np.arange(4 * 50, dtype=np.uint8).reshape(4, 5, 5, 2)
    episode = Episode(observations=frames, actions=np.array([2, 0, 1]), rewards=np.array([0.0, 1.0, 0.0], np.float32),
                      terminated=True, truncated=False)
    dataset.write_dataset("frames-v0", [episode], descriptor, env="frames")
    (read,) = dataset.read_episodes(dataset.open_dataset("frames-v0"))
    assert read.observations.dtype == np.uint8
    np.testing.assert_array_equal(read.observations, frames)


def test_a_dataset_of_another_env_is_refused_in_one_line():
    dataset.write_dataset("test/cp-v0", _vector_episodes(), envs.describe("cartpole"), env="cartpole")
    data = dataset.open_dataset("test/cp-v0")
    with pytest.raises(ValueError, match=r"^--dataset='test/cp-v0' holds observations Box\(4,\) float32 and actions "
                                         r"Discrete\(2\); env 'tictactoe' has observations Box\(3, 3, 3\) uint8 and "
                                         r"actions Discrete\(9\)$"):
        dataset.check_matches(data, envs.describe("tictactoe"), "tictactoe", ref="--dataset='test/cp-v0'")
    stateless = envs.describe("cartpole", observe_velocity=False)
    with pytest.raises(ValueError, match=r"observations Box\(4,\) float32 .* env 'cartpole' has observations Box\(2,\)"):
        dataset.check_matches(data, stateless, "cartpole")
    same_spaces = dataclasses.replace(envs.describe("cartpole"), name="other")
    with pytest.raises(ValueError, match="was recorded in env 'cartpole', not 'other'"):
        dataset.check_matches(data, same_spaces, "other")
    with pytest.raises(ValueError, match=r"--dataset='nope-v0' is neither a folder nor a dataset in the Minari root "
                                         r".*local datasets: test/cp-v0"):
        dataset.open_dataset("nope-v0")


def test_the_collector_records_what_the_envs_were_stepped_with():
    # Always pushing right: CartPole terminates within a few dozen steps, the pole past 12
    # degrees (0.2094 rad) or the cart past 2.4 in the last observation, before the reset.
    collector = dataset.EpisodeCollector(epsilon=0.0, seed=1)
    batch = collector.make_batch("cartpole", 2, seed=3, observe_velocity=True)
    assert (collector.env, collector.env_options) == ("cartpole", {"observe_velocity": True})
    assert collector.descriptor == envs.describe("cartpole")
    batch.reset()
    while len(collector.episodes) < 4:
        batch.step(np.ones(2, np.int64))
    for e in collector.episodes:
        assert e.terminated and not e.truncated and np.all(e.actions == 1) and np.all(e.rewards == 1.0)
        assert len(e.observations) == e.num_steps + 1
        last = e.observations[-1]
        assert abs(last[2]) > 0.2094 or abs(last[0]) > 2.4
        assert np.all(np.abs(e.observations[:-1, 2]) <= 0.2094)
    # epsilon 1: every move is random, so both actions appear.
    collector = dataset.EpisodeCollector(epsilon=1.0, seed=1)
    batch = collector.make_batch("cartpole", 2, seed=3)
    batch.reset()
    for _ in range(30):
        batch.step(np.ones(2, np.int64))
    assert collector.random_actions == collector.steps == 60
    # max_steps: the step that completes the episode bringing the total to 50 raises Enough;
    # always pushing right, every CartPole episode ends within 8-12 steps (by termination).
    collector = dataset.EpisodeCollector(max_steps=50)
    batch = collector.make_batch("cartpole", 3, seed=0)
    batch.reset()
    with pytest.raises(dataset.Enough):
        for _ in range(1000):
            batch.step(np.ones(3, np.int64))
    lengths = [e.num_steps for e in collector.episodes]
    # before the last step fewer than 50 were collected; that step completes at most 3 episodes
    assert 50 <= collector.episode_steps == sum(lengths) < 50 + 3 * max(lengths)
    with pytest.raises(ValueError, match=r"--steps=-1 must be an integer >= 0"):
        dataset.EpisodeCollector(max_steps=-1)
    with pytest.raises(ValueError, match="two-player game"):
        dataset.EpisodeCollector().make_batch("tictactoe", 1)
    with pytest.raises(ValueError, match=r"--epsilon=1.5 must be a number in \[0, 1\]"):
        dataset.EpisodeCollector(epsilon=1.5)


def test_replay_targets_of_a_hand_made_two_episode_dataset():
    # Episode 0: rewards 1, 2, 3, terminated; episode 1: rewards 4, 5, truncated. Discount 0.5,
    # n = 2, K = 1, root values 0 (a recording has no search). Value targets by hand:
    #   ep 0: t0: 1 + .5*2 = 2; t1: 2 + .5*3 = 3.5; t2: 3 (nothing after the terminal step)
    #   ep 1 (truncated: the observation after its last step is not stored, so the window
    #   stops at the last stored step and bootstraps from its root value, 0):
    #         t0: 4 + .5*0 = 4; t1: its own root value, 0
    # and each policy target is the recorded action, one-hot.
    from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
    from muzero.algorithms.muzero.replay import Replay, dataset_segments
    cartpole = envs.describe("cartpole")
    obs = np.zeros((4, 4), np.float32)
    episodes = [Episode(obs, np.array([0, 1, 0]), np.array([1.0, 2.0, 3.0], np.float32), True, False),
                Episode(obs[:3] + 1, np.array([1, 1]), np.array([4.0, 5.0], np.float32), False, True)]
    replay = Replay(cartpole, ReplayConfig(capacity_steps=64, min_steps_to_sample=1, samples_per_insert=8.0,
                                           samples_per_insert_tolerance=4.0),
                    TargetConfig(num_unroll_steps=1, td_steps=2, stack_frames=1), seed=0, discount=0.5)
    assert replay.insert_many(dataset_segments(episodes, 2), limited=False) == 5
    assert replay.num_steps == 5
    # Recorded steps are not actor inserts: a replay ratio waits for the actors' (8 x (0 - 1) + 4 < 1).
    assert not replay.can_sample(1)
    replay = Replay(cartpole, ReplayConfig(capacity_steps=64, min_steps_to_sample=1), TargetConfig(
        num_unroll_steps=1, td_steps=2, stack_frames=1), seed=0, discount=0.5)
    replay.insert_many(dataset_segments(episodes, 2), limited=False)
    expected = {0: (2.0, 0), 1: (3.5, 1), 2: (3.0, 0), 3: (4.0, 1), 4: (0.0, 1)}
    seen = {}
    for _ in range(40):
        batch = replay.sample(5)
        for row, index in enumerate(batch["index"]):
            seen[int(index)] = (float(batch["target_value"][row, 0]), batch["target_policy"][row, 0].tolist())
    assert set(seen) == set(expected)
    for index, (value, action) in expected.items():
        assert seen[index][0] == pytest.approx(value)
        assert seen[index][1] == [1.0 - action, float(action)]


def test_a_dataset_in_a_run_with_actors_gets_reanalysed_targets_unless_the_user_says():
    from muzero import algorithms
    builder = algorithms.get("muzero")
    settings = builder.default_settings("cartpole")
    cartpole = envs.describe("cartpole")
    fitted, notes = builder.fit_to_env(settings, cartpole, {"replay": {"dataset": "x-v0"}})
    assert fitted.config.targets.reanalyse_fraction == 0.5
    assert any(n.startswith("targets.reanalyse_fraction=0.5: the recorded episodes") for n in notes)
    mine, _ = builder.fit_to_env(settings, cartpole, {"replay": {"dataset": "x-v0"},
                                                      "targets": {"reanalyse_fraction": 0.0}})
    assert mine.config.targets.reanalyse_fraction == 0.0     # the user's choice (applied after the fit) stands
    # Both are shares of one batch: with three quarters from the dataset, a quarter is reanalysed.
    shared, notes = builder.fit_to_env(settings, cartpole, {"replay": {"dataset": "x-v0", "dataset_fraction": 0.75}})
    assert shared.config.targets.reanalyse_fraction == 0.25
    assert any(n.startswith("targets.reanalyse_fraction=0.25: ") and "25% of each batch" in n for n in notes)
    plain, notes = builder.fit_to_env(settings, cartpole, {})
    assert plain.config.targets.reanalyse_fraction == 0.0 and not notes


def test_recorded_actions_mix_into_the_policy_targets_of_recorded_positions_only():
    # Stored targets uniform (0.5, 0.5); w = 0.5: a recorded position whose action was 1
    # gets (0.5 x 0.5, 0.5 x 0.5 + 0.5) = (0.25, 0.75); an actor's position keeps (0.5, 0.5).
    from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
    from muzero.algorithms.muzero.replay import Replay, dataset_segments
    cartpole = envs.describe("cartpole")
    recorded = dataset_segments([Episode(np.zeros((3, 4), np.float32), np.array([1, 1]),
                                         np.ones(2, np.float32), True, False)], 2)[0]
    recorded["policies"] = np.full((2, 2), 0.5, np.float32)
    actor = dict(recorded, episode_id=np.int64(7), actions=np.zeros(2, np.int32),
                 observations=np.ones((2, 4), np.float32))
    replay = Replay(cartpole, ReplayConfig(capacity_steps=16, min_steps_to_sample=1),
                    TargetConfig(num_unroll_steps=0, td_steps=1, stack_frames=1, recorded_action_weight=0.5),
                    seed=0, discount=0.9)
    replay.insert_many([recorded], limited=False)
    replay.insert_many([actor])
    batch = replay.sample(64)
    from_dataset = batch["observation"][:, 0] == 0.0
    assert from_dataset.any() and (~from_dataset).any()
    np.testing.assert_allclose(batch["target_policy"][from_dataset, 0], [[0.25, 0.75]] * from_dataset.sum())
    np.testing.assert_allclose(batch["target_policy"][~from_dataset, 0], [[0.5, 0.5]] * (~from_dataset).sum())


def test_a_share_of_each_batch_comes_from_the_recorded_positions_with_weights_for_the_mixture(tmp_path):
    # 10 recorded steps, 90 an actor's; replay.dataset_fraction 0.5, B = 8: rows 0-3 come
    # from the recorded positions, rows 4-7 from all 100. The share is oversampling on
    # purpose: importance weights use the probability without it, w_i / W, so with equal
    # priorities every row weighs 1 (a correction by the mixture, 0.5/10 + 0.5/100 for a
    # recorded row, would give those rows 1/11 and undo the share at beta = 1). Then the
    # recorded positions' priorities doubled (exponent 1): (N p)^-1 = (100 x 2/110)^-1 = 0.55
    # for them, (100 x 1/110)^-1 = 1.1 for the actor's; over the maximum: 0.5 and 1.
    from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
    from muzero.algorithms.muzero.replay import Replay, dataset_segments
    from muzero.config import ConfigError
    cartpole = envs.describe("cartpole")
    recorded = dataset_segments([Episode(np.zeros((11, 4), np.float32), np.ones(10, np.int64),
                                         np.ones(10, np.float32), True, False)], 2)
    actor = dict(recorded[0], episode_id=np.int64(7), actions=np.zeros(90, np.int32),
                 observations=np.ones((90, 4), np.float32), rewards=np.ones(90, np.float32),
                 root_values=np.zeros(90, np.float32), policies=np.full((90, 2), 0.5, np.float32),
                 to_play=np.zeros(90, np.int8))
    targets = TargetConfig(num_unroll_steps=0, td_steps=1, stack_frames=1)
    replay = Replay(cartpole, ReplayConfig(capacity_steps=128, min_steps_to_sample=1, dataset_fraction=0.5),
                    targets, seed=0, discount=0.9)
    replay.insert_many(recorded, limited=False)
    replay.insert_many([actor])
    replay.snapshot(str(tmp_path / "replay"))
    for r in (replay, Replay.restore(str(tmp_path / "replay"))):   # a resumed run keeps the share
        for _ in range(20):
            batch = r.sample(8)
            from_dataset = batch["observation"][:, 0] == 0.0
            assert from_dataset[:4].all()
            np.testing.assert_allclose(batch["importance_weight"], 1.0, rtol=1e-5)
    replay.update_priorities(np.arange(10), np.full(10, 2.0, np.float32))   # the recorded ones came first
    for _ in range(5):
        batch = replay.sample(8)
        from_dataset = batch["observation"][:, 0] == 0.0
        np.testing.assert_allclose(batch["importance_weight"], np.where(from_dataset, 0.5, 1.0), rtol=1e-5)
    # Without the share the recorded positions are drawn by priority among all: 10 % of rows.
    plain = Replay(cartpole, ReplayConfig(capacity_steps=128, min_steps_to_sample=1), targets, seed=0, discount=0.9)
    plain.insert_many(recorded, limited=False)
    plain.insert_many([actor])
    share = np.mean([plain.sample(100)["observation"][:, 0] == 0.0 for _ in range(20)])
    assert 0.05 < share < 0.15
    # A share with no recorded positions stored draws every row from all positions.
    online = Replay(cartpole, ReplayConfig(capacity_steps=128, min_steps_to_sample=1, dataset_fraction=0.5),
                    targets, seed=0, discount=0.9)
    online.insert_many([actor])
    np.testing.assert_allclose(online.sample(8)["importance_weight"], 1.0)
    with pytest.raises(ConfigError, match=r"replay.dataset_fraction=0.6 is invalid: plus "
                                          r"targets.reanalyse_fraction \(0.5\) must be <= 1"):
        from muzero.algorithms.muzero.config import MuZeroConfig
        MuZeroConfig(targets=TargetConfig(reanalyse_fraction=0.5), replay=ReplayConfig(dataset_fraction=0.6))


def test_a_runs_replay_gives_back_its_whole_episodes():
    # Capacity 12, inserted in order: C's first 3 steps, A's first 3, C's next 2, A's last 2
    # (terminated), B's 3 (still open), then a recorded episode D of 2 steps: B's insert
    # evicts C's first segment. Observation of step t of episode e: 100 e + t.
    # Expected by hand: A whole (5 steps, 5 observations and a zero one after the terminal
    # step); B open, so it loses its last step (2 steps, observations 200, 201, 202,
    # truncated); C (its first steps evicted) and D (recorded) are left out: skipped = 2.
    from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
    from muzero.algorithms.muzero.replay import Replay, dataset_segments, stored_episodes
    cartpole = envs.describe("cartpole")

    def segment(episode, start, t, terminated=False):
        steps = np.arange(start, start + t)
        return dict(episode_id=np.int64(episode), start=np.int64(start),
                    observations=np.repeat((100.0 * episode + steps)[:, None], 4, axis=1).astype(np.float32),
                    actions=(steps % 2).astype(np.int32), rewards=(10.0 * episode + steps).astype(np.float32),
                    root_values=np.zeros(t, np.float32), policies=np.full((t, 2), 0.5, np.float32),
                    to_play=np.zeros(t, np.int8), terminated=np.bool_(terminated), truncated=np.bool_(False))

    replay = Replay(cartpole, ReplayConfig(capacity_steps=12, min_steps_to_sample=1),
                    TargetConfig(num_unroll_steps=1, td_steps=1, stack_frames=1), seed=0, discount=0.9)
    for seg in (segment(5, 0, 3), segment(1, 0, 3), segment(5, 3, 2), segment(1, 3, 2, terminated=True),
                segment(2, 0, 3)):
        replay.insert(seg)
    replay.insert_many(dataset_segments([Episode(np.zeros((3, 4), np.float32), np.array([0, 1]),
                                                 np.ones(2, np.float32), True, False)], 2), limited=False)
    assert replay.num_steps == 12
    episodes, skipped = stored_episodes(replay)
    assert skipped == 2 and len(episodes) == 2
    a, b = episodes
    np.testing.assert_array_equal(a.observations[:, 0], [100, 101, 102, 103, 104, 0])
    np.testing.assert_array_equal(a.actions, [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(a.rewards, [10, 11, 12, 13, 14])
    assert a.terminated and not a.truncated
    np.testing.assert_array_equal(b.observations[:, 0], [200, 201, 202])
    np.testing.assert_array_equal(b.actions, [0, 1])
    np.testing.assert_array_equal(b.rewards, [20, 21])
    assert b.truncated and not b.terminated
