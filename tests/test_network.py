"""MuZero network: torsos per env kind, output contract, variable parts, input checks."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import NetworkConfig, SupportConfig
from muzero.algorithms.muzero.network import MuZeroNetwork, make_network
from muzero.algorithms.muzero.network.support import np_logits_to_scalar

SMALL = SupportConfig(low=-5.0, high=5.0, num_bins=11, use_transform=False)
TINY = NetworkConfig(value_support=SMALL, reward_support=SupportConfig(num_bins=21, low=-10.0,
                                                                        high=10.0),
                     mlp_hidden_size=16, mlp_num_layers=1, latent_size=8, conv_channels=4,
                     conv_num_blocks=1, conv_downsample_blocks=1, conv_reduced_channels=2,
                     head_hidden_size=8)

CARTPOLE = EnvDescriptor("cartpole", (4,), "float32", 2)
TICTACTOE = EnvDescriptor("tictactoe", (3, 3, 3), "uint8", 9, two_player=True, kind="board",
                          has_legal_mask=True)
ATARI_SMALL = EnvDescriptor("atari", (32, 32, 1), "uint8", 4, kind="image", frame_layout="HWC")

# (descriptor, stack_frames, expected input shape, expected hidden shape)
CASES = {
    "vector": (CARTPOLE, 1, (4,), (8,)),
    "board": (TICTACTOE, 1, (3, 3, 3), (3, 3, 4)),
    # 2 gray frames + 2 action planes; 32 -> 16 -> 8 -> 4 -> 2 after four stride-2 stages.
    "image": (ATARI_SMALL, 2, (32, 32, 4), (2, 2, 4)),
}


@pytest.fixture(scope="module")
def networks():
    return {kind: make_network(d, TINY, sf, seed=1) for kind, (d, sf, _, _) in CASES.items()}


def _observation(net: MuZeroNetwork, batch: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if net.input_dtype == tf.uint8:
        high = 256 if net.kind == "image" else 2
        return rng.integers(0, high, (batch,) + net.input_shape).astype(np.uint8)
    return rng.normal(size=(batch,) + net.input_shape).astype(np.float32)


@pytest.mark.parametrize("kind", list(CASES))
def test_shapes_and_outputs(networks, kind):
    net = networks[kind]
    _, _, input_shape, hidden_shape = CASES[kind]
    assert net.input_shape == input_shape
    assert net.hidden_shape == hidden_shape
    assert net.input_dtype == (tf.float32 if kind == "vector" else tf.uint8)
    batch, num_actions = 3, net.num_actions
    first = net.initial_inference(_observation(net, batch))
    nxt = net.recurrent_inference(first["hidden_state"], np.arange(batch) % num_actions)
    for out in (first, nxt):
        assert out["value"].shape == (batch,)
        assert out["reward"].shape == (batch,)
        assert out["policy_logits"].shape == (batch, num_actions)
        assert out["value_logits"].shape == (batch, 11)
        assert out["reward_logits"].shape == (batch, 21)
        assert out["hidden_state"].shape == (batch,) + hidden_shape
        # Min-max normalised per sample: each sample spans exactly [0, 1].
        flat = out["hidden_state"].numpy().reshape(batch, -1)
        np.testing.assert_allclose(flat.min(axis=1), 0.0, atol=1e-6)
        np.testing.assert_allclose(flat.max(axis=1), 1.0, atol=1e-5)
        # value is the expectation of the value distribution (NumPy reference decoder).
        np.testing.assert_allclose(out["value"].numpy(),
                                   np_logits_to_scalar(out["value_logits"].numpy(), SMALL),
                                   atol=1e-5)
    np.testing.assert_array_equal(first["reward"].numpy(), np.zeros(batch))
    np.testing.assert_allclose(nxt["reward"].numpy(),
                               np_logits_to_scalar(nxt["reward_logits"].numpy(),
                                                   TINY.reward_support), rtol=1e-4, atol=1e-4)


def test_atari_96_hidden_is_6x6():
    descriptor = EnvDescriptor("atari", (96, 96, 1), "uint8", 18, kind="image")
    net = make_network(descriptor, TINY, stack_frames=4, seed=0)
    assert net.input_shape == (96, 96, 8)
    assert net.hidden_shape == (6, 6, 4)
    out = net.initial_inference(np.full((1, 96, 96, 8), 255, np.uint8))
    assert out["hidden_state"].shape == (1, 6, 6, 4)
    assert np.isfinite(out["value"].numpy()).all()


@pytest.mark.parametrize("kind", list(CASES))
def test_actions_change_the_next_state(networks, kind):
    net = networks[kind]
    hidden = net.initial_inference(_observation(net, 1))["hidden_state"]
    a = net.num_actions
    hiddens = tf.repeat(hidden, a, axis=0)
    out = net.recurrent_inference(hiddens, np.arange(a, dtype=np.int32))
    states = out["hidden_state"].numpy().reshape(a, -1)
    # Every pair of distinct actions leads to a distinct next state.
    distances = np.abs(states[:, None] - states[None]).sum(-1) + np.eye(a)
    assert (distances > 1e-6).all()


@pytest.mark.parametrize("kind", list(CASES))
def test_variable_parts_cover_everything_once(networks, kind):
    net = networks[kind]
    parts = net.variables_by_part()
    assert set(parts) == {"representation", "dynamics", "prediction"}
    ids = [id(v) for vs in parts.values() for v in vs]
    assert all(parts.values()), "every part owns variables"
    assert len(ids) == len(set(ids)), "no variable in two parts"
    assert sorted(ids) == sorted(id(v) for v in net.trainable_variables)
    with pytest.raises(ValueError, match="unknown network part"):
        net.variables_of(["representation", "torso"])


def test_seed_determinism_and_part_restore(tmp_path):
    a = make_network(CARTPOLE, TINY, 1, seed=3)
    b = make_network(CARTPOLE, TINY, 1, seed=3)
    c = make_network(CARTPOLE, TINY, 1, seed=4)
    for va, vb in zip(a.trainable_variables, b.trainable_variables):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
    assert any(not np.array_equal(va.numpy(), vc.numpy())
               for va, vc in zip(a.trainable_variables, c.trainable_variables))
    # Restore only the representation of `a` into `c`: it matches, the dynamics do not.
    path = tf.train.Checkpoint(representation=a.representation).save(str(tmp_path / "rep"))
    tf.train.Checkpoint(representation=c.representation).restore(path).assert_consumed()
    for va, vc in zip(a.representation.trainable_variables, c.representation.trainable_variables):
        np.testing.assert_array_equal(va.numpy(), vc.numpy())
    assert not np.array_equal(a.dynamics.torso.hidden[0].w.numpy(), c.dynamics.torso.hidden[0].w.numpy())


def test_init_seed_replaces_the_seed_for_the_initial_weights_only_when_set():
    # init_seed=3 with seed=4 draws seed 3's weights (and the consistency head's); -1 keeps seed.
    a = make_network(CARTPOLE, TINY, 1, seed=3, with_ssl_head=True)
    b = make_network(CARTPOLE, dataclasses.replace(TINY, init_seed=3), 1, seed=4, with_ssl_head=True)
    c = make_network(CARTPOLE, dataclasses.replace(TINY, init_seed=-1), 1, seed=4, with_ssl_head=True)
    assert len(a.trainable_variables) == len(b.trainable_variables) > 0
    for va, vb in zip(a.trainable_variables, b.trainable_variables):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
    assert not np.array_equal(a.representation.torso.hidden[0].w.numpy(), c.representation.torso.hidden[0].w.numpy())


def test_bad_observation_names_shapes_and_dtypes(networks):
    image = networks["image"]
    obs = _observation(image, 2)
    with pytest.raises(ValueError, match=r"expected dtype uint8, received float32"):
        image.initial_inference(obs.astype(np.float32))
    with pytest.raises(ValueError, match=r"expected shape \[None, 32, 32, 4\].*received "
                                         r"\[2, 32, 32, 3\]"):
        image.initial_inference(obs[..., :3])
    with pytest.raises(ValueError, match=r"expected shape \[None, 32, 32, 4\].*received "
                                         r"\[32, 32, 4\]"):
        image.initial_inference(obs[0])
    vector = networks["vector"]
    with pytest.raises(ValueError, match=r"expected dtype float32, received float64"):
        vector.initial_inference(np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"expected shape \[None, 4\].*received \[2, 5\]"):
        vector.initial_inference(np.zeros((2, 5), np.float32))


def test_bad_recurrent_inputs(networks):
    net = networks["vector"]
    hidden = np.zeros((3, 8), np.float32)
    with pytest.raises(ValueError, match=r"hidden_state: expected shape \[None, 8\].*\[3, 7\]"):
        net.recurrent_inference(hidden[:, :7], np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"action: batch size 2 differs.*3"):
        net.recurrent_inference(hidden, np.zeros(2, np.int32))
    with pytest.raises(ValueError, match=r"action: expected dtype int32, received float32"):
        net.recurrent_inference(hidden, np.zeros(3, np.float32))
    # Integer actions of another width are accepted (cast to int32).
    out = net.recurrent_inference(hidden, np.array([0, 1, 1], np.int64))
    assert out["value"].shape == (3,)


def test_make_network_rejects_bad_descriptors():
    with pytest.raises(ValueError, match="kind='graph'"):
        make_network(EnvDescriptor("x", (4,), "float32", 2, kind="graph"), TINY, 1)
    with pytest.raises(ValueError, match="stack_frames=4"):
        make_network(CARTPOLE, TINY, 4)


def test_residual_mlp_dynamics_adds_the_torsos_output_to_the_hidden_state():
    # With the dynamics torso's last layer zeroed its output is 0 for every input, so the
    # residual model's next state is normalise(hidden + 0) = hidden (a normalised state is
    # its own normalisation: min 0, max 1), while the plain model's is normalise(0) = 0.
    # Setting that layer's bias to c = [0, 1, .., L-1] / (L-1) gives normalise(hidden + c).
    from muzero.config import ConfigError
    residual = dataclasses.replace(TINY, mlp_residual_dynamics=True)
    nets = {r: make_network(CARTPOLE, cfg, 1, seed=1) for r, cfg in ((True, residual), (False, TINY))}
    for net in nets.values():
        out = net.dynamics.torso.out
        out.w.assign(tf.zeros_like(out.w))
        out.b.assign(tf.zeros_like(out.b))
    hidden = nets[True].initial_inference(_observation(nets[True], 3))["hidden_state"].numpy()
    assert hidden.min(axis=1) == pytest.approx([0, 0, 0]) and hidden.max(axis=1) == pytest.approx([1, 1, 1])
    actions = np.array([0, 1, 1], np.int32)
    np.testing.assert_allclose(nets[True].recurrent_inference(hidden, actions)["hidden_state"], hidden, atol=1e-6)
    np.testing.assert_allclose(nets[False].recurrent_inference(hidden, actions)["hidden_state"], 0.0, atol=1e-6)
    c = np.arange(8, dtype=np.float32) / 7.0
    nets[True].dynamics.torso.out.b.assign(c)
    moved = hidden + c
    expected = (moved - moved.min(axis=1, keepdims=True)) / (moved.max(axis=1, keepdims=True)
                                                            - moved.min(axis=1, keepdims=True))
    np.testing.assert_allclose(nets[True].recurrent_inference(hidden, actions)["hidden_state"], expected,
                               atol=1e-5)
    with pytest.raises(ConfigError, match="mlp_residual_dynamics=true is invalid for image and board envs"):
        make_network(TICTACTOE, residual, 1)


def test_mlp_hidden_bias_lets_the_representation_see_the_observations_size():
    # Without a bias LayerNorm(o @ w) = LayerNorm((c o) @ w) for every c > 0: the hidden state
    # of o and 2 o is the same. A bias before the LayerNorm breaks that unless it is the same
    # for every feature (LayerNorm removes the mean over the features).
    import dataclasses
    legacy = make_network(CARTPOLE, dataclasses.replace(TINY, mlp_bias=False), 1, seed=1)
    net = make_network(CARTPOLE, TINY, 1, seed=1)
    o = np.array([[1.2, 0.8, 0.04, -0.1], [-0.5, 0.3, -0.1, 0.2]], np.float32)

    def hidden(n, x):
        return n.initial_inference(x)["hidden_state"].numpy()
    np.testing.assert_allclose(hidden(legacy, 2 * o), hidden(legacy, o), atol=1e-5)
    # Same seed, same weights: the biases start at zero, so the new network starts as the old one.
    np.testing.assert_allclose(hidden(net, o), hidden(legacy, o), atol=1e-6)
    dense, norm, out = net.representation.torso.hidden[0], net.representation.torso.norms[0], net.representation.torso.out
    dense.b.assign(np.linspace(-1.0, 1.0, 16).astype(np.float32))
    norm.offset.assign(np.full(16, 0.1, np.float32))
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(hidden(net, 2 * o), hidden(net, o), atol=1e-3)

    def reference(x):   # the torso written out in NumPy: dense, layer norm, relu, dense, min-max
        z = x @ dense.w.numpy() + dense.b.numpy()
        z = (z - z.mean(1, keepdims=True)) / np.sqrt(z.var(1, keepdims=True) + 1e-5)
        z = np.maximum(z * norm.scale.numpy() + norm.offset.numpy(), 0.0) @ out.w.numpy() + out.b.numpy()
        low, high = z.min(1, keepdims=True), z.max(1, keepdims=True)
        return (z - low) / (high - low)
    for x in (o, 2 * o):
        np.testing.assert_allclose(hidden(net, x), reference(x), atol=1e-5)
    # The dynamics and prediction heads get the biases too; the legacy network has none.
    assert all(d.b is not None for m in (net.dynamics.torso, net.dynamics.reward_head, net.prediction.value_head,
                                         net.prediction.policy_head) for d in m.hidden)
    assert all(d.b is None for d in legacy.representation.torso.hidden + legacy.dynamics.torso.hidden)
    # Image and board networks are the same with and without the setting.
    for descriptor, frames in ((TICTACTOE, 1), (ATARI_SMALL, 2)):
        shapes = [[v.shape.as_list() for v in make_network(descriptor, dataclasses.replace(TINY, mlp_bias=b), frames,
                                                            seed=1).trainable_variables] for b in (True, False)]
        assert shapes[0] == shapes[1]


@pytest.mark.parametrize("kind", ["vector", "board"])
def test_training_unroll_gives_what_the_inference_calls_give(networks, kind):
    # The loss runs the prediction once on all K+1 hidden states stacked; each sample's
    # logits must be those of ``initial`` then ``recurrent`` with its own actions.
    from muzero.algorithms.muzero.network.loss import unroll
    net = networks[kind]
    observation = _observation(net, 3, seed=4)
    actions = np.array([[0, 1], [1, 1], [2, 0]], np.int32) % net.num_actions
    value, policy, reward, hiddens = unroll(net, tf.constant(observation), tf.constant(actions), 0.5)
    out = net.initial(tf.constant(observation))
    np.testing.assert_allclose(value[:, 0].numpy(), out["value_logits"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(policy[:, 0].numpy(), out["policy_logits"].numpy(), rtol=1e-5, atol=1e-6)
    for k in range(2):
        out = net.recurrent(out["hidden_state"], tf.constant(actions[:, k]))
        np.testing.assert_allclose(value[:, k + 1].numpy(), out["value_logits"].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(policy[:, k + 1].numpy(), out["policy_logits"].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(reward[:, k].numpy(), out["reward_logits"].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(hiddens[k].numpy(), out["hidden_state"].numpy(), rtol=1e-5, atol=1e-6)
