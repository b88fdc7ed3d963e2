"""Layer skipping of the residual torso blocks (NetworkConfig.skip_fraction; Trax's SkippingSerial).

Facts checked against hand-worked numbers and a plain NumPy forward pass of the torso:
block i is skipped with probability i * skip_fraction / n after warm-up, warm-up bounds,
the draw is a function of (seed, step), evaluation and inference run every block, and a
training forward with n_forward = k runs exactly the first k blocks.
"""
import numpy as np
import pytest
import tensorflow as tf

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import NetworkConfig, SupportConfig
from muzero.config import ConfigError
from muzero.algorithms.muzero.network import make_network
from muzero.algorithms.muzero.network.networks import draw_n_forward, skip_bounds

BOARD = EnvDescriptor("board", (3, 3, 3), "uint8", 9, kind="board")
BLOCKS = 3


def _config(**kw):
    base = dict(value_support=SupportConfig(-1.0, 1.0, 3, False),
                reward_support=SupportConfig(-1.0, 1.0, 3, False),
                conv_channels=4, conv_num_blocks=BLOCKS, conv_reduced_channels=2,
                head_hidden_size=4, skip_fraction=0.5)
    base.update(kw)
    return NetworkConfig(**base)


@pytest.fixture(scope="module")
def net():
    network = make_network(BOARD, _config(), 1, seed=11)
    # Push the blocks' weights far from the small initial scale so that every block
    # changes the hidden state visibly (the tests below must be able to fail).
    rng = np.random.default_rng(0)
    for part in (network.representation, network.dynamics):
        for block in part.torso.blocks:
            for conv in (block.conv1, block.conv2):
                conv.w.assign(rng.normal(0, 0.6, conv.w.shape).astype(np.float32))
            block.norm2.offset.assign(rng.normal(0, 1.0, block.norm2.offset.shape).astype(np.float32))
    return network


# ----------------------------------------------------------------- the draw

def test_block_skip_frequencies_match_the_formula():
    # 4 blocks, skip_fraction 0.5, no warm-up: n ~ U(0, 8); block i skipped iff n <= i,
    # so with probability i * 0.5 / 4 = 0, 0.125, 0.25, 0.375.
    draws = np.array([draw_n_forward(3, step, 4, 0.5, 0) for step in range(20_000)])
    skipped = [(draws <= i).mean() for i in range(4)]
    np.testing.assert_allclose(skipped, [0.0, 0.125, 0.25, 0.375], atol=0.012)
    assert draws.min() >= 0.0 and draws.max() <= 8.0


def test_warmup_bounds_and_no_skipping_at_the_start():
    assert skip_bounds(0, 4, 0.5, 100) == (4.0, 8.0)        # warmup 1: low = n
    assert skip_bounds(50, 4, 0.5, 100) == (2.0, 8.0)       # halfway: low = n / 2
    assert skip_bounds(100, 4, 0.5, 100) == (0.0, 8.0)
    assert skip_bounds(1000, 4, 0.5, 100) == (0.0, 8.0)
    assert skip_bounds(0, 4, 0.25, 0) == (0.0, 16.0)        # no warm-up
    at_start = [draw_n_forward(seed, 0, 4, 0.5, 100) for seed in range(500)]
    assert min(at_start) >= 4.0                             # every block of 4 runs
    halfway = np.array([draw_n_forward(seed, 50, 4, 0.5, 100) for seed in range(2000)])
    assert halfway.min() >= 2.0 and (halfway < 3.0).mean() == pytest.approx(1 / 6, abs=0.03)


def test_draw_is_a_function_of_seed_and_step():
    a = draw_n_forward(7, 123, 4, 0.5, 10)
    assert a == draw_n_forward(7, 123, 4, 0.5, 10)
    assert a != draw_n_forward(7, 124, 4, 0.5, 10)
    assert a != draw_n_forward(8, 123, 4, 0.5, 10)


def test_config_validation():
    with pytest.raises(ConfigError, match="skip_fraction"):
        NetworkConfig(skip_fraction=1.5)
    with pytest.raises(ConfigError, match="skip_fraction"):
        NetworkConfig(skip_fraction=-0.1)
    with pytest.raises(ConfigError, match="skip_warmup_steps"):
        NetworkConfig(skip_warmup_steps=-1)
    with pytest.raises(ConfigError, match="conv_num_blocks"):
        NetworkConfig(skip_fraction=0.5, conv_num_blocks=0)
    NetworkConfig(skip_fraction=1.0)                       # Trax allows 1
    vector = EnvDescriptor("vec", (4,), "float32", 2)
    with pytest.raises(ConfigError, match="vector"):
        make_network(vector, NetworkConfig(skip_fraction=0.5), 1)


# ------------------------------------------------------- NumPy forward of the torso

def _conv3x3(x, w):
    """SAME 3x3 convolution, stride 1: x [B, H, W, Ci], w [3, 3, Ci, Co]."""
    b, h, wd, _ = x.shape
    pad = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((b, h, wd, w.shape[3]))
    for dy in range(3):
        for dx in range(3):
            out += pad[:, dy:dy + h, dx:dx + wd, :] @ w[dy, dx]
    return out


def _norm(x, ln):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * ln.scale.numpy() + ln.offset.numpy()


def _relu(x):
    return np.maximum(x, 0.0)


def _np_stem(stem, x, blocks_run):
    x = _relu(_norm(_conv3x3(x, stem.conv.w.numpy()), stem.norm))
    for block in stem.blocks[:blocks_run]:
        y = _relu(_norm(_conv3x3(x, block.conv1.w.numpy()), block.norm1))
        y = _norm(_conv3x3(y, block.conv2.w.numpy()), block.norm2)
        x = _relu(x + y)
    return x


def _min_max(x):
    low = x.min(axis=(1, 2, 3), keepdims=True)
    high = x.max(axis=(1, 2, 3), keepdims=True)
    return (x - low) / np.maximum(high - low, 1e-5)


def _np_hidden(net, obs, blocks_run):
    return _min_max(_np_stem(net.representation.torso, obs.astype(np.float64), blocks_run))


def _np_next_hidden(net, hidden, action, blocks_run):
    plane = np.zeros(hidden.shape[:3] + (1,))
    for b, a in enumerate(action):          # cell actions: a 1 on row a // 3, column a % 3
        plane[b, a // 3, a % 3, 0] = 1.0
    return _min_max(_np_stem(net.dynamics.torso, np.concatenate([hidden, plane], -1), blocks_run))


OBS = np.random.default_rng(5).integers(0, 2, (4, 3, 3, 3)).astype(np.uint8)
ACTION = np.array([0, 4, 8, 2], np.int32)


def test_inference_runs_every_block(net):
    full = _np_hidden(net, OBS, BLOCKS)
    assert np.abs(full - _np_hidden(net, OBS, 1)).max() > 0.05  # later blocks matter
    out = net.initial_inference(OBS)
    np.testing.assert_allclose(out["hidden_state"].numpy(), full, atol=2e-5)
    np.testing.assert_allclose(net.initial(tf.constant(OBS))["hidden_state"].numpy(), full, atol=2e-5)
    nxt = net.recurrent_inference(out["hidden_state"], ACTION)
    np.testing.assert_allclose(nxt["hidden_state"].numpy(),
                               _np_next_hidden(net, full, ACTION, BLOCKS), atol=2e-5)


@pytest.mark.parametrize("n_forward,blocks_run", [(0.3, 1), (1.0, 1), (1.7, 2), (5.0, 3)])
def test_training_forward_runs_the_first_blocks(net, n_forward, blocks_run):
    n = tf.constant(n_forward, tf.float32)
    out = net.initial(tf.constant(OBS), n_forward=n)
    hidden = _np_hidden(net, OBS, blocks_run)
    np.testing.assert_allclose(out["hidden_state"].numpy(), hidden, atol=2e-5)
    policy, value = net.prediction(tf.constant(hidden, tf.float32))
    np.testing.assert_allclose(out["policy_logits"].numpy(), policy.numpy(), atol=1e-4)
    np.testing.assert_allclose(out["value_logits"].numpy(), value.numpy(), atol=1e-4)
    nxt = net.recurrent(out["hidden_state"], tf.constant(ACTION), n_forward=n)
    np.testing.assert_allclose(nxt["hidden_state"].numpy(),
                               _np_next_hidden(net, hidden, ACTION, blocks_run), atol=2e-5)


def test_skipped_blocks_get_no_gradient(net):
    n = tf.constant(1.0, tf.float32)                        # block 0 runs (0 < 1), 1 and 2 are skipped
    with tf.GradientTape() as tape:
        out = net.initial(tf.constant(OBS), n_forward=n)
        loss = tf.reduce_sum(out["value_logits"] ** 2)
    blocks = net.representation.torso.blocks
    grads = tape.gradient(loss, [blocks[0].conv1.w, blocks[1].conv1.w, blocks[2].conv1.w])
    assert grads[0] is not None and float(tf.reduce_max(tf.abs(grads[0]))) > 0
    for g in grads[1:]:
        assert g is None or float(tf.reduce_max(tf.abs(g))) == 0.0


def test_trainer_draws_per_step():
    from muzero.algorithms.muzero.learning import Trainer
    from muzero.algorithms.muzero.config import MuZeroConfig, TargetConfig, TrainingConfig
    config = MuZeroConfig(targets=TargetConfig(num_unroll_steps=1, stack_frames=1),
                          network=_config(skip_warmup_steps=10),
                          training=TrainingConfig(batch_size=2))
    trainer = Trainer(BOARD, config, seed=4)
    assert trainer.n_forward(0) == draw_n_forward(4, 0, BLOCKS, 0.5, 10) >= BLOCKS
    assert trainer.n_forward(20) == draw_n_forward(4, 20, BLOCKS, 0.5, 10)
    # Training steps with the draw, on one and on two devices, and the serving copy's
    # full forward pass: tests/test_consistency.py::test_two_devices_equal_one_with_skipping_and_consistency.
