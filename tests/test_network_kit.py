"""The network kit's shared pieces: schedules, optimisers, torso choice and the checks of
the fields the model-free configs share."""
import dataclasses

import pytest

from muzero.config import ConfigError
from muzero.network.options import check_optimizer, check_torso


def test_schedules_by_hand():
    from muzero.network.optimizers import learning_rate_schedule, rate_at
    assert learning_rate_schedule(0.1, "constant") == 0.1
    assert float(rate_at(0.1, 7)) == pytest.approx(0.1)
    linear = learning_rate_schedule(1.0, "linear", decay_steps=4)
    # 1 - step / 4, and 0 from step 4 on.
    assert [round(float(rate_at(linear, s)), 6) for s in (0, 1, 2, 4, 9)] == [1.0, 0.75, 0.5, 0.0, 0.0]
    cosine = learning_rate_schedule(1.0, "cosine", decay_steps=4, alpha=0.2)
    # alpha + (1 - alpha) * (1 + cos(pi * step / 4)) / 2: 1, 0.6 at the half, 0.2 at the end.
    assert [round(float(rate_at(cosine, s)), 6) for s in (0, 2, 4)] == [1.0, 0.6, 0.2]
    with pytest.raises(ValueError, match="schedule='step'"):
        learning_rate_schedule(1.0, "step")


def test_optimizers_take_their_settings():
    from muzero.network.optimizers import make_optimizer
    adam = make_optimizer(1e-3, beta_1=0.5, epsilon=1e-5)
    assert (adam.__class__.__name__, adam.beta_1, adam.epsilon) == ("Adam", 0.5, 1e-5)
    sgd = make_optimizer(0.1, "sgd", momentum=0.9)
    assert (sgd.__class__.__name__, sgd.momentum) == ("SGD", 0.9)
    with pytest.raises(ValueError, match="'rmsprop'"):
        make_optimizer(0.1, "rmsprop")


def test_choose_torso():
    from muzero.network.torsos import choose_torso
    assert choose_torso("auto", (84, 84, 4), True) == "atari"
    assert choose_torso("auto", (4,), False) == "mlp"
    with pytest.raises(ConfigError, match=r"network.torso=atari needs \[H, W, C\] observations; got shape \(4,\)"):
        choose_torso("atari", (4,), False)


@dataclasses.dataclass(frozen=True)
class _Net:
    torso: str = "auto"
    activation: str = "relu"
    mlp_hidden_sizes: tuple = (8,)
    atari_dense_size: int = 16


@dataclasses.dataclass(frozen=True)
class _Training:
    learning_rate: float = 1e-3
    lr_schedule: str = "constant"
    lr_decay_steps: int = 10
    adam_epsilon: float = 1e-7
    gradient_clip_norm: float = 0.0


@pytest.mark.parametrize("field,value,needle", [
    ("torso", "resnet", "_Net.torso='resnet' is invalid"),
    ("activation", "gelu", "_Net.activation='gelu' is invalid"),
    ("mlp_hidden_sizes", (), "_Net.mlp_hidden_sizes=()"),
    ("atari_dense_size", 0, "_Net.atari_dense_size=0"),
])
def test_check_torso_names_the_bad_field(field, value, needle):
    check_torso(_Net())
    with pytest.raises(ConfigError) as err:
        check_torso(dataclasses.replace(_Net(), **{field: value}))
    assert needle in str(err.value)


@pytest.mark.parametrize("field,value,needle", [
    ("learning_rate", 0.0, "_Training.learning_rate=0.0"),
    ("lr_schedule", "cosine", "_Training.lr_schedule='cosine'"),
    ("lr_decay_steps", 0, "_Training.lr_decay_steps=0"),
    ("adam_epsilon", 2.0, "_Training.adam_epsilon=2.0"),
    ("gradient_clip_norm", -1.0, "_Training.gradient_clip_norm=-1.0"),
])
def test_check_optimizer_names_the_bad_field(field, value, needle):
    check_optimizer(_Training(), schedules=("constant", "linear"))
    with pytest.raises(ConfigError) as err:
        check_optimizer(dataclasses.replace(_Training(), **{field: value}), schedules=("constant", "linear"))
    assert needle in str(err.value)


def test_layer_norm_gradient_by_hand():
    # x = [0, 1, 2]: mean 1, variance 2/3, so x_hat = [-1, 0, 1] * sqrt(3/2). For the loss
    # y[1] (the middle output) the incoming gradient is g = [0, 1, 0]: <g> = 1/3 and
    # <g x_hat> = 0, so dx = sqrt(3/2) * ([0, 1, 0] - 1/3) = [-1, 2, -1] * sqrt(3/2) / 3;
    # dscale = g * x_hat = [0, 0, 0] and doffset = g.
    import numpy as np
    import tensorflow as tf
    from muzero.network.layers import layer_norm
    x = tf.constant([[0.0, 1.0, 2.0]])
    scale, offset = tf.Variable([1.0, 1.0, 1.0]), tf.Variable([0.0, 0.0, 0.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = layer_norm(x, scale, offset, 0.0)
        loss = y[0, 1]
    np.testing.assert_allclose(y.numpy(), [[-np.sqrt(1.5), 0.0, np.sqrt(1.5)]], rtol=1e-6)
    dx, dscale, doffset = tape.gradient(loss, [x, scale, offset])
    np.testing.assert_allclose(dx.numpy(), [[-np.sqrt(1.5) / 3, 2 * np.sqrt(1.5) / 3, -np.sqrt(1.5) / 3]],
                               rtol=1e-6)
    np.testing.assert_allclose(dscale.numpy(), [0.0, 0.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(doffset.numpy(), [0.0, 1.0, 0.0])


def test_layer_norm_gradient_matches_the_plain_formula():
    # The hand-written gradient against TensorFlow's autodiff of the plain expression, on a
    # rank-4 input with a random scale and offset and a random downstream weighting.
    import numpy as np
    import tensorflow as tf
    from muzero.network.layers import layer_norm
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 3, 3, 5)).astype(np.float32))
    scale = tf.Variable(rng.normal(size=5).astype(np.float32))
    offset = tf.Variable(rng.normal(size=5).astype(np.float32))
    weights = tf.constant(rng.normal(size=(2, 3, 3, 5)).astype(np.float32))

    def plain(x):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-5) * scale + offset

    grads = []
    for fn in (plain, lambda x: layer_norm(x, scale, offset, 1e-5)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(weights * fn(x))
        grads.append(tape.gradient(loss, [x, scale, offset]))
    for reference, written in zip(*grads):
        np.testing.assert_allclose(written.numpy(), reference.numpy(), rtol=1e-4, atol=1e-5)
