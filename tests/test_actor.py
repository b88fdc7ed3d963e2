"""Actor side: segment building by hand, in-tree legal masks, and the actor loop against a real
server (a NumPy model, no TensorFlow) whose pushed segments must form valid, contiguous episodes."""
import dataclasses

import numpy as np
import pytest

import envs
from muzero.algorithms.muzero.actor import Actor, ActorSettings
from muzero.algorithms.muzero.acting import SearchPolicy, TreeLegalMasks
from muzero.algorithms.muzero.segments import SegmentBuilder
from muzero.config import ConfigError
from muzero.mcts.config import SearchConfig
from muzero.replay.store import validate_segment
from muzero.algorithms.muzero.client import InferenceClient
from muzero.algorithms.muzero.config import CacheServiceConfig
from muzero.algorithms.muzero.service import InMemoryLearnerHandlers, serve


def _add(builder, t, done_env=None, truncated_env=None):
    e = builder.num_envs
    terminated = np.zeros(e, bool)
    truncated = np.zeros(e, bool)
    if done_env is not None:
        terminated[done_env] = True
    if truncated_env is not None:
        truncated[truncated_env] = True
    obs = np.full((e, 1), t, np.float32) + np.arange(e)[:, None] * 100
    return builder.add(obs, np.full(e, t % 2), np.full(e, 0.5 * t, np.float32), np.full(e, t, np.float32),
                       np.full((e, 2), 0.5, np.float32), np.zeros(e, np.int8), None, terminated, truncated)


def test_segment_builder_by_hand():
    builder = SegmentBuilder(2, (1,), np.float32, 2, segment_length=3, with_legal_masks=False)
    ids = builder.episode_id.copy()
    assert _add(builder, 0) == []
    # Step 1: env 1's episode terminates after 2 steps -> a 2-step terminated segment.
    out = _add(builder, 1, done_env=1)
    assert len(out) == 1
    seg = out[0]
    assert seg["episode_id"] == ids[1] and seg["start"] == 0 and bool(seg["terminated"])
    np.testing.assert_array_equal(seg["observations"][:, 0], [100, 101])
    np.testing.assert_array_equal(seg["actions"], [0, 1])
    np.testing.assert_array_equal(seg["rewards"], [0.0, 0.5])
    assert builder.episode_id[1] != ids[1]                    # env 1 starts a new episode
    # Step 2: env 0 holds 3 steps -> a full, unfinished segment; its next one starts at 3.
    out = _add(builder, 2)
    assert [(s["episode_id"], int(s["start"]), len(s["actions"])) for s in out] == [(ids[0], 0, 3)]
    assert not out[0]["terminated"] and not out[0]["truncated"]
    # Step 3: env 0 is truncated -> [3] with truncated; env 1 (new episode) has 2 steps.
    out = _add(builder, 3, truncated_env=0)
    assert [(s["episode_id"], int(s["start"]), bool(s["truncated"])) for s in out] == [(ids[0], 3, True)]
    flushed = builder.flush()
    assert [(int(s["start"]), len(s["actions"])) for s in flushed] == [(0, 2)]
    np.testing.assert_array_equal(flushed[0]["observations"][:, 0], [102, 103])


def test_episode_ids_differ_between_runs_with_the_same_seed():
    # A restarted actor gets the same seed; its episodes must not chain onto the old run's.
    a = SegmentBuilder(8, (1,), np.float32, 2, segment_length=3, with_legal_masks=False)
    b = SegmentBuilder(8, (1,), np.float32, 2, segment_length=3, with_legal_masks=False)
    assert not set(a.episode_id.tolist()) & set(b.episode_id.tolist())


def test_tree_legal_masks_follow_the_path():
    root = np.array([[True, True, True, False], [True, False, False, False]])
    masks = TreeLegalMasks(root, num_nodes=4)
    # Simulation 0: both trees play action 0 from the root (node 0) into node 1.
    m1 = masks(np.array([0, 0]), np.array([0, 0]), np.array([1, 1]))
    np.testing.assert_array_equal(m1[0], [False, True, True, False])
    np.testing.assert_array_equal(m1[1], [True, True, True, True])   # nothing left: all allowed
    # Simulation 1: tree 0 continues from node 1 with action 2 into node 2.
    m2 = masks(np.array([1, 0]), np.array([2, 0]), np.array([2, 2]))
    np.testing.assert_array_equal(m2[0], [False, True, False, False])


class _VectorModel:
    """A NumPy model for CartPole-shaped inputs: (4,) float32 -> hidden (4,), 2 actions."""

    input_shape, input_dtype, hidden_shape, num_actions = (4,), np.float32, (4,), 2

    def _out(self, h, reward):
        return {"value": np.tanh(h.sum(1)), "reward": reward, "hidden_state": h,
                "policy_logits": np.stack([h[:, 0], -h[:, 0]], 1).astype(np.float32)}

    def initial_inference(self, observation):
        h = np.asarray(observation, np.float32)
        return self._out(h, np.zeros(len(h), np.float32))

    def recurrent_inference(self, hidden_state, action):
        h = (0.5 * np.asarray(hidden_state) + np.asarray(action)[:, None]).astype(np.float32)
        return self._out(h, np.ones(len(h), np.float32))


class _BoardModel:
    """A NumPy model for tic-tac-toe planes: (3, 3, 3) uint8 -> hidden (9,), 9 actions."""

    input_shape, input_dtype, hidden_shape, num_actions = (3, 3, 3), np.uint8, (9,), 9

    def _out(self, h):
        return {"value": np.zeros(len(h), np.float32), "reward": np.zeros(len(h), np.float32),
                "hidden_state": h, "policy_logits": h.copy()}

    def initial_inference(self, observation):
        return self._out(np.asarray(observation, np.float32)[..., 0].reshape(-1, 9))

    def recurrent_inference(self, hidden_state, action):
        return self._out((np.asarray(hidden_state) + np.eye(9, dtype=np.float32)[action]).astype(np.float32))


def _run_actor(model, env, steps, envs_per_actor, segment_length, simulations=4, **search):
    handlers = InMemoryLearnerHandlers()
    server, _ = serve(model, CacheServiceConfig(max_nodes=simulations + 1, cache_slots=64),
                      push_segments_handler=handlers.push_segments, learner_info_handler=handlers.learner_info)
    try:
        settings = ActorSettings(server=f"127.0.0.1:{server.port}", env=env,
                                 search=SearchConfig(num_simulations=simulations,
                                                     two_player=envs.describe(env).two_player, **search),
                                 envs_per_actor=envs_per_actor, segment_length=segment_length,
                                 max_env_steps=steps, push_every_s=0.0)
        client = InferenceClient(settings.server)
        actor = Actor(settings, client)
        actor.run()
        client.close()
    finally:
        server.stop()
    return handlers.segments, actor


def _episodes(segments, descriptor):
    """Checks every segment and that each episode's segments are contiguous; returns them by id."""
    by_episode = {}
    for seg in (s for s in segments if "report" not in s):
        validate_segment(seg, descriptor, 10_000)
        by_episode.setdefault(int(seg["episode_id"]), []).append(seg)
    for parts in by_episode.values():
        starts = [int(s["start"]) for s in parts]
        assert starts[0] == 0
        assert starts == list(np.cumsum([0] + [len(s["actions"]) for s in parts[:-1]]))
        assert not any(bool(s["terminated"]) or bool(s["truncated"]) for s in parts[:-1])
    return by_episode


def test_evaluation_actors_search_by_the_evaluation_root_and_training_actors_do_not():
    search = SearchConfig(num_simulations=4, eval_root_selection="gumbel", eval_gumbel_value_scale=0.1)
    for evaluation, root, scale in ((True, "gumbel", 0.1), (False, "puct", search.gumbel_value_scale)):
        actor = Actor(ActorSettings(server="127.0.0.1:1", env="cartpole", search=search, envs_per_actor=2,
                                    evaluation=evaluation), client=None)
        assert (actor.policy.config.root_selection, actor.policy.config.gumbel_value_scale) == (root, scale)
        assert actor.policy.evaluation is evaluation


def test_actor_pushes_contiguous_cartpole_episodes():
    segments, actor = _run_actor(_VectorModel(), "cartpole", steps=400, envs_per_actor=4, segment_length=7)
    episodes = _episodes(segments, envs.describe("cartpole"))
    pushed_steps = sum(len(s["actions"]) for s in segments if "report" not in s)
    assert pushed_steps == actor.env_steps == 400
    reports = [s for s in segments if "report" in s]
    lengths = np.concatenate([r["episode_length"] for r in reports])
    finished = sorted(sum(len(s["actions"]) for s in parts) for parts in episodes.values()
                      if bool(parts[-1]["terminated"]))
    assert finished and sorted(lengths.tolist()) == finished
    for parts in episodes.values():
        np.testing.assert_array_equal(np.concatenate([s["rewards"] for s in parts]), 1.0)
        policies = np.concatenate([s["policies"] for s in parts])
        np.testing.assert_allclose(policies.sum(1), 1.0, rtol=1e-5)


def test_actor_plays_only_legal_tictactoe_moves_with_alternating_players():
    segments, _ = _run_actor(_BoardModel(), "tictactoe", steps=180, envs_per_actor=6, segment_length=9,
                             simulations=6)
    episodes = _episodes(segments, envs.describe("tictactoe"))
    complete = [parts for parts in episodes.values() if bool(parts[-1]["terminated"])]
    assert len(complete) >= 10
    for parts in complete:
        actions = np.concatenate([s["actions"] for s in parts])
        legal = np.concatenate([s["legal_masks"] for s in parts])
        to_play = np.concatenate([s["to_play"] for s in parts])
        assert legal[np.arange(len(actions)), actions].all()
        assert len(set(actions.tolist())) == len(actions)          # no cell played twice
        np.testing.assert_array_equal(to_play, np.arange(len(actions)) % 2)
        policies = np.concatenate([s["policies"] for s in parts])
        assert (policies[~legal] == 0).all()                       # no visits to illegal moves


def test_greedy_after_moves_samples_openings_then_plays_the_most_visited_move():
    segments, _ = _run_actor(_BoardModel(), "tictactoe", steps=240, envs_per_actor=6, segment_length=9,
                             simulations=6, greedy_after_moves=2)
    episodes = _episodes(segments, envs.describe("tictactoe"))
    opening_off_argmax = 0
    complete = [parts for parts in episodes.values() if bool(parts[-1]["terminated"])]
    assert len(complete) >= 10
    for parts in complete:
        actions = np.concatenate([s["actions"] for s in parts])
        policies = np.concatenate([s["policies"] for s in parts])   # visit distributions
        most_visited = np.argmax(policies, axis=1)                  # ties: lowest cell, as greedy play
        np.testing.assert_array_equal(actions[2:], most_visited[2:])
        opening_off_argmax += int((actions[:2] != most_visited[:2]).sum())
    # Temperature 1 over 6 visits spread across 9 cells: openings often leave the argmax.
    assert opening_off_argmax >= 5


def test_greedy_env_fraction_makes_the_last_envs_play_the_most_visited_action():
    batch, num_actions = 4, 3

    def recurrent_fn(parent_node, action, new_node):   # a flat world: every move looks alike
        return (np.zeros(batch, np.float32), np.zeros(batch, np.float32),
                np.zeros((batch, num_actions), np.float32))
    # round(0.5 * 4) = 2: envs 2 and 3 are greedy; envs 0 and 1 sample at temperature 1.
    config = SearchConfig(num_simulations=6, greedy_env_fraction=0.5)
    policy = SearchPolicy(config, batch, num_actions, np.random.default_rng(3), evaluation=False,
                          in_tree_masks=False)
    np.testing.assert_array_equal(policy.greedy_envs, [False, False, True, True])
    off_argmax = np.zeros(batch, int)
    for _ in range(60):
        actions, result = policy.act(np.zeros(batch, np.float32), np.zeros((batch, num_actions), np.float32),
                                     np.ones((batch, num_actions), bool), np.zeros(batch, np.int32), recurrent_fn)
        off_argmax += actions != np.argmax(result.visit_counts, axis=1)
    assert off_argmax[2:].tolist() == [0, 0]
    # Six visits over three equal actions (plus root noise): sampling leaves the argmax often.
    assert off_argmax[:2].min() >= 10
    # round(0.3 * 8) = 2 of 8 envs; 0 makes none greedy; above 1 is refused.
    assert SearchPolicy(dataclasses.replace(config, greedy_env_fraction=0.3), 8, num_actions,
                        np.random.default_rng(0), evaluation=False, in_tree_masks=False).greedy_envs.sum() == 2
    assert not SearchPolicy(SearchConfig(num_simulations=6), batch, num_actions, np.random.default_rng(0),
                            evaluation=False, in_tree_masks=False).greedy_envs.any()
    with pytest.raises(ConfigError, match=r"SearchConfig.greedy_env_fraction=1.5 is invalid: must be in \[0.0, 1.0\]"):
        SearchConfig(greedy_env_fraction=1.5)
