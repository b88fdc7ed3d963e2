"""SavedModel export: loads and matches in a separate process that cannot import ``muzero``."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import NetworkConfig, SupportConfig
from muzero.algorithms.muzero.network import export_saved_model, make_network

TINY = NetworkConfig(value_support=SupportConfig(num_bins=21, low=-10.0, high=10.0),
                     reward_support=SupportConfig(num_bins=7, low=-3.0, high=3.0,
                                                  use_transform=False),
                     mlp_hidden_size=16, mlp_num_layers=1, latent_size=8, conv_channels=4,
                     conv_num_blocks=1, conv_reduced_channels=2, head_hidden_size=8,
                     jit_compile=True)
MODELS = {
    "image": (EnvDescriptor("atari", (32, 32, 1), "uint8", 5, kind="image"), 3),
    "vector": (EnvDescriptor("cartpole", (4,), "float32", 2), 1),
}

# Runs in a fresh interpreter. Importing muzero there would fail (sys.modules entry None),
# so a pass proves the model and its JSON are enough on their own.
LOADER = textwrap.dedent("""
    import json, os, sys
    sys.modules["muzero"] = None
    import numpy as np
    import tensorflow as tf
    root = sys.argv[1]
    for name in sys.argv[2:]:
        path = os.path.join(root, name)
        spec = json.load(open(os.path.join(path, "muzero_export.json")))
        model = tf.saved_model.load(path)
        obs = np.load(os.path.join(root, name + "_obs.npy"))
        assert list(obs.shape[1:]) == spec["observation"]["shape"]
        assert obs.dtype.name == spec["observation"]["dtype"]
        first = model.signatures["initial_inference"](observation=tf.constant(obs))
        actions = np.arange(obs.shape[0], dtype=np.int32) % spec["num_actions"]
        nxt = model.signatures["recurrent_inference"](hidden_state=first["hidden_state"],
                                                      action=tf.constant(actions))
        # Decode the value with nothing but the JSON description.
        vs = spec["value_support"]
        logits = first["value_logits"].numpy().astype(np.float64)
        p = np.exp(logits - logits.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
        y = p @ np.linspace(vs["low"], vs["high"], vs["num_bins"])
        if vs["use_transform"]:
            e = vs["eps"]
            y = np.sign(y) * (((np.sqrt(1 + 4 * e * (np.abs(y) + 1 + e)) - 1) / (2 * e)) ** 2 - 1)
        out = {"decoded_value": y}
        out.update({"initial/" + k: v.numpy() for k, v in first.items()})
        out.update({"recurrent/" + k: v.numpy() for k, v in nxt.items()})
        np.savez(os.path.join(root, name + "_out.npz"), **out)
    assert "muzero" not in sys.modules or sys.modules["muzero"] is None
    print("loaded", sys.argv[2:])
""")


def test_export_loads_in_a_separate_process(tmp_path):
    expected = {}
    for name, (descriptor, stack) in MODELS.items():
        net = make_network(descriptor, TINY, stack, seed=5)
        export_saved_model(net, str(tmp_path / name))
        spec = json.loads((tmp_path / name / "muzero_export.json").read_text())
        assert spec["observation"]["shape"] == list(net.input_shape)
        assert spec["hidden_shape"] == list(net.hidden_shape)
        assert spec["num_actions"] == descriptor.num_actions
        rng = np.random.default_rng(0)
        if net.input_dtype.name == "uint8":
            obs = rng.integers(0, 256, (3,) + net.input_shape).astype(np.uint8)
        else:
            obs = rng.normal(size=(3,) + net.input_shape).astype(np.float32)
        np.save(tmp_path / f"{name}_obs.npy", obs)
        first = net.initial_inference(obs)
        nxt = net.recurrent_inference(first["hidden_state"],
                                      np.arange(3, dtype=np.int32) % net.num_actions)
        expected[name] = {**{"initial/" + k: v.numpy() for k, v in first.items()},
                          **{"recurrent/" + k: v.numpy() for k, v in nxt.items()}}

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    proc = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path), *MODELS],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in MODELS:
        got = np.load(tmp_path / f"{name}_out.npz")
        assert set(expected[name]) <= set(got.files)
        for key, value in expected[name].items():
            np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} {key}")
        np.testing.assert_allclose(got["decoded_value"], expected[name]["initial/value"],
                                   rtol=1e-4, atol=1e-4)


def test_saved_model_player_reports_the_root_value_it_searched_from(tmp_path):
    # The evaluator's player: one greedy search per call; last_root_value is the exported
    # model's value of the observations (what bench/cartpole_endings.py prints).
    from muzero.mcts.config import SearchConfig
    from muzero.algorithms.muzero.evaluator import SavedModelPlayer
    descriptor, stack = MODELS["vector"]
    net = make_network(descriptor, TINY, stack, seed=3)
    export_saved_model(net, str(tmp_path / "m"))
    obs = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    player = SavedModelPlayer(str(tmp_path / "m"), SearchConfig(num_simulations=4), num_envs=3)
    assert player.last_root_value is None
    actions = player.act(obs, np.ones((3, 2), bool), np.zeros(3, np.int8), np.random.default_rng(0))
    assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}
    np.testing.assert_allclose(player.last_root_value, net.initial_inference(obs)["value"].numpy(),
                               rtol=1e-4, atol=1e-4)


def test_evaluate_refuses_bad_input_with_one_clear_error(tmp_path):
    import pytest
    from muzero.mcts.config import SearchConfig
    from muzero.algorithms.muzero.evaluator import evaluate, write_run
    descriptor, stack = MODELS["vector"]
    path = str(tmp_path / "m")
    export_saved_model(make_network(descriptor, TINY, stack, seed=3), path)
    write_run(path, "cartpole", {}, SearchConfig(num_simulations=2), 1)
    with pytest.raises(ValueError, match="episodes=0 must be an integer >= 1"):
        evaluate(path, 0)
    with pytest.raises(ValueError, match=r"env 'tictactoe' gives network inputs \[3, 3, 3\] and 9 actions; "
                                         r"the export takes \[4\] and 2"):
        evaluate(path, 2, env="tictactoe")
    with pytest.raises(ValueError, match="is not a directory"):
        evaluate(str(tmp_path / "missing"), 2, env="cartpole")
    variables = os.path.join(path, "variables", "variables.data-00000-of-00001")
    data = bytearray(open(variables, "rb").read())
    data[len(data) // 2] ^= 0xFF                             # one flipped byte: the shard's checksum fails
    open(variables, "wb").write(bytes(data))
    with pytest.raises(ValueError, match="cannot be loaded \\(DataLossError.*Checksum does not match.*export again"):
        evaluate(path, 2)


def test_evaluator_search_overrides_are_checked_like_the_learners_set():
    import pytest
    from muzero.config import ConfigError
    from muzero.mcts.config import SearchConfig
    from muzero.algorithms.muzero.evaluator import override_search
    base = SearchConfig(num_simulations=8, gumbel_value_scale=0.02)
    assert override_search(base) is base
    got = override_search(base, None, ["search.root_selection=gumbel", "search.gumbel_q_range=tree",
                                       "search.max_num_considered_actions=4"])
    assert (got.root_selection, got.gumbel_q_range, got.max_num_considered_actions) == ("gumbel", "tree", 4)
    assert (got.num_simulations, got.gumbel_value_scale) == (8, 0.02)   # the rest is the export's
    assert override_search(base, 3, ["search.num_simulations=5"]).num_simulations == 5   # --set last
    with pytest.raises(ConfigError, match="search has no field 'root'; fields: .*root_selection"):
        override_search(base, None, ["search.root=gumbel"])
    with pytest.raises(ConfigError, match="section in search"):
        override_search(base, None, ["training.batch_size=4"])
    with pytest.raises(ConfigError, match="root_selection='greedy' is invalid"):
        override_search(base, None, ["search.root_selection=greedy"])
    with pytest.raises(ValueError, match="no run.json .* pass --simulations"):
        override_search(None, None, ["search.root_selection=gumbel"])
    assert override_search(None, 6, ["search.root_selection=gumbel"]).num_simulations == 6
    # An export whose run evaluates by another root than it trained by: a root rule named on
    # the command line is the one played, and the evaluation-only fields can be named too.
    split = SearchConfig(num_simulations=8, eval_root_selection="gumbel", eval_gumbel_value_scale=0.1)
    assert override_search(split, 4).for_evaluation().root_selection == "gumbel"
    played = override_search(split, None, ["search.root_selection=puct"]).for_evaluation()
    assert played.root_selection == "puct"
    played = override_search(split, None, ["search.gumbel_value_scale=1.0"]).for_evaluation()
    assert (played.root_selection, played.gumbel_value_scale) == ("gumbel", 1.0)
    played = override_search(base, None, ["search.eval_root_selection=gumbel",
                                          "search.eval_gumbel_value_scale=0.5"]).for_evaluation()
    assert (played.root_selection, played.gumbel_value_scale) == ("gumbel", 0.5)
    with pytest.raises(ConfigError, match="eval_root_selection='greedy' is invalid"):
        override_search(base, None, ["search.eval_root_selection=greedy"])


def test_evaluation_root_fields_make_the_player_search_by_that_root(tmp_path):
    # A pUCT-trained run that evaluates by Gumbel's root plays, in evaluation, exactly as a
    # Gumbel run at that value scale does, and differs from pUCT's most visited move here.
    from muzero.mcts.config import SearchConfig
    from muzero.algorithms.muzero.evaluator import SavedModelPlayer
    descriptor, stack = MODELS["vector"]
    export_saved_model(make_network(descriptor, TINY, stack, seed=3), str(tmp_path / "m"))
    obs = np.random.default_rng(2).normal(size=(16, 4)).astype(np.float32)
    legal, to_play = np.ones((16, 2), bool), np.zeros(16, np.int8)

    def play(**search):
        player = SavedModelPlayer(str(tmp_path / "m"), SearchConfig(num_simulations=4, **search), num_envs=16)
        return player.act(obs, legal, to_play, np.random.default_rng(0))
    split = play(eval_root_selection="gumbel", eval_gumbel_value_scale=1.0)
    np.testing.assert_array_equal(split, play(root_selection="gumbel", gumbel_value_scale=1.0))
    assert (split != play()).any()


def test_gumbel_root_evaluation_plays_without_gumbel_noise(tmp_path):
    # Evaluation drops the Gumbel draws, so the played actions cannot depend on the rng; with
    # one simulation per considered action the choice is argmax(logits + sigma(completed Q)),
    # which differs from the prior's argmax only through the searched values.
    from muzero.mcts.config import SearchConfig
    from muzero.algorithms.muzero.evaluator import SavedModelPlayer
    descriptor, stack = MODELS["vector"]
    export_saved_model(make_network(descriptor, TINY, stack, seed=3), str(tmp_path / "m"))
    obs = np.random.default_rng(2).normal(size=(16, 4)).astype(np.float32)
    config = SearchConfig(num_simulations=4, root_selection="gumbel", gumbel_scale=1.0)
    player = SavedModelPlayer(str(tmp_path / "m"), config, num_envs=16)
    legal, to_play = np.ones((16, 2), bool), np.zeros(16, np.int8)
    first = player.act(obs, legal, to_play, np.random.default_rng(0))
    for seed in (1, 2, 3):
        np.testing.assert_array_equal(player.act(obs, legal, to_play, np.random.default_rng(seed)), first)
