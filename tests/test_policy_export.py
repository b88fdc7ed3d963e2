"""muzero.algorithms.policy_export: SavedModel of a model-free policy, its json, its player."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from muzero.algorithms.policy_export import (EXPORT_JSON, PolicyPlayer, evaluate_policy, export_policy,
                                             is_policy_export)


class _Linear(tf.Module):
    """logits = x @ w + b, with fixed weights."""

    def __init__(self, w, b):
        super().__init__(name="linear")
        self.w = tf.Variable(np.asarray(w, np.float32))
        self.b = tf.Variable(np.asarray(b, np.float32))

    def __call__(self, x):
        return tf.matmul(tf.cast(x, tf.float32), self.w) + self.b


def test_export_writes_json_and_player_plays_argmax(tmp_path):
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(4, 3)), rng.normal(size=3)
    module = _Linear(w, b)
    path = export_policy(str(tmp_path / "export"), module, lambda obs: {"policy_logits": module(obs)},
                         (4,), np.float32, {"kind": "discrete", "num_actions": 3}, algo="test_algo")
    with open(os.path.join(path, EXPORT_JSON)) as f:
        spec = json.load(f)
    assert spec["format_version"] == 1
    assert spec["algo"] == "test_algo"
    assert spec["observation"] == {"shape": [4], "dtype": "float32"}
    assert spec["action"] == {"kind": "discrete", "num_actions": 3}
    assert is_policy_export(path)

    player = PolicyPlayer(path)
    obs = rng.normal(size=(7, 4)).astype(np.float32)
    expected_logits = obs @ w.astype(np.float32) + b.astype(np.float32)
    out = player.outputs(obs)
    np.testing.assert_allclose(out["policy_logits"], expected_logits, rtol=1e-5, atol=1e-5)
    actions = player.act(obs)
    assert actions.dtype == np.int32 and actions.shape == (7,)
    np.testing.assert_array_equal(actions, expected_logits.argmax(-1))
    # Any batch size works (batch dimension None).
    assert player.act(obs[:1]).shape == (1,)
    with pytest.raises(ValueError, match="shape"):
        player.act(np.zeros((2, 5), np.float32))


def test_export_rejects_bad_action_spec(tmp_path):
    module = _Linear(np.zeros((2, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="kind"):
        export_policy(str(tmp_path / "e"), module, module, (2,), np.float32, {"kind": "box"}, algo="x")


def test_evaluate_policy_on_cartpole(tmp_path):
    # "Push the cart toward the side the pole leans": logits = [-theta - omega, theta + omega]
    # balances CartPole for a while, far better than chance (~22 steps).
    w = np.zeros((4, 2), np.float32)
    w[2], w[3] = [-1.0, 1.0], [-1.0, 1.0]
    module = _Linear(w, np.zeros(2))
    path = export_policy(str(tmp_path / "export"), module, module, (4,), np.float32,
                         {"kind": "discrete", "num_actions": 2}, algo="test_algo")
    result = evaluate_policy(path, "cartpole", {}, episodes=4, num_envs=2, seed=3)
    assert len(result["returns"]) == 4 and len(result["lengths"]) == 4
    assert result["mean_return"] == pytest.approx(np.mean(result["returns"]))
    assert result["mean_return"] > 100
    with open(os.path.join(path, "run.json"), "w") as f:
        json.dump({"env": "cartpole", "env_options": {}}, f)
    again = evaluate_policy(path, episodes=4, num_envs=2, seed=3)
    assert again["returns"] == result["returns"]


def test_continuous_export_plays_within_bounds_on_pendulum(tmp_path):
    """A continuous export returns float actions; evaluate_policy steps a Box env with them and
    counts the actions the env had to clip (the export here returns 3 = outside [-2, 2])."""
    module = _Linear(np.zeros((3, 1)), [3.0])
    path = export_policy(str(tmp_path / "export"), module, lambda obs: {"action": module(obs)}, (3,), np.float32,
                         {"kind": "continuous", "shape": [1], "low": [-2.0], "high": [2.0]}, algo="test_algo")
    spec = json.load(open(os.path.join(path, EXPORT_JSON)))
    assert spec["action"] == {"kind": "continuous", "shape": [1], "low": [-2.0], "high": [2.0]}
    player = PolicyPlayer(path)
    assert player.continuous and player.action_shape == (1,)
    np.testing.assert_array_equal(player.act(np.zeros((2, 3), np.float32)), [[3.0], [3.0]])
    result = evaluate_policy(path, "gym:Pendulum-v1", {}, episodes=2, num_envs=2, seed=0)
    assert len(result["returns"]) == 2 and result["clipped_actions"] == 2 * 200
    module4 = _Linear(np.zeros((4, 1)), [0.0])
    path4 = export_policy(str(tmp_path / "export4"), module4, lambda obs: {"action": module4(obs)}, (4,),
                          np.float32, {"kind": "continuous", "shape": [1], "low": [-1.0], "high": [1.0]},
                          algo="test_algo")
    with pytest.raises(ValueError, match=r"Discrete\(2\) actions; the export's are"):
        evaluate_policy(path4, "cartpole", {}, episodes=1, num_envs=1)


class _Counter(tf.Module):
    """A recurrent policy: state n counts steps since the episode started; action = n mod 2;
    it also echoes the previous action and reward."""

    def __init__(self):
        super().__init__(name="counter")
        self.unused = tf.Variable(0.0)

    def __call__(self, observation, prev_action, prev_reward, state):
        n = state["n"] + 1.0
        return {"action": tf.cast(tf.math.floormod(n[:, 0], 2.0), tf.int32), "next_state_n": n,
                "echo_action": prev_action, "echo_reward": prev_reward}


def test_recurrent_export_keeps_and_resets_its_state(tmp_path):
    module = _Counter()
    path = export_policy(str(tmp_path / "export"), module, module, (4,), np.float32,
                         {"kind": "discrete", "num_actions": 2}, algo="test_algo", state_spec={"n": (1,)})
    spec = json.load(open(os.path.join(path, EXPORT_JSON)))
    assert spec["state"] == {"n": [1]}
    assert sorted(spec["signatures"]["policy"]["inputs"]) == ["observation", "prev_action", "prev_reward", "state_n"]
    player = PolicyPlayer(path)
    assert player.recurrent
    player.reset(2)
    obs = np.zeros((2, 4), np.float32)
    assert player.act(obs).tolist() == [1, 1]                 # n = 1
    player.observe(np.array([0.5, 0.25]), np.array([False, True]))
    out = player.outputs(obs)                                  # env 0: n = 2; env 1 restarted: n = 1
    assert out["action"].tolist() == [0, 1]
    assert out["echo_action"].tolist() == [1, 0] and out["echo_reward"].tolist() == [0.5, 0.0]
    # CartPole episodes end; the player restarts those rows and plays on.
    result = evaluate_policy(path, "cartpole", {}, episodes=3, num_envs=2, seed=0)
    assert len(result["returns"]) == 3
