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
