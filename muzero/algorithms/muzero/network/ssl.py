"""Self-supervised heads on the MuZero hidden state: projection, predictor, negative cosine.

EfficientZero (Ye et al. 2021) trains the dynamics to agree with the representation:
the hidden state the dynamics predicts for step t+k, projected and passed through a
predictor, should point the same way as the projection of the representation of the
real observation at t+k (SimSiam-style, the target side under a stop-gradient). The
heads here are the two small MLPs that comparison needs; the MuZero loss
(``TrainingConfig.consistency_loss_weight``) and the pretraining code both use them
through ``MuZeroNetwork.pretrain_head``.

Contract (``SSLHead``, a ``tf.Module`` named ``pretrain_head``; P = ``projection_size``):

    head.project(hidden [B, *hidden_shape] f32) -> [B, P] f32     the projection
    head.predict(projected [B, P] f32)          -> [B, P] f32     the predictor
    head.online(hidden)  = head.predict(head.project(hidden))     the online branch
    head.target(hidden)  = tf.stop_gradient(head.project(hidden)) the target branch
    head.projection / head.predictor                              the two sub-modules

``negative_cosine(a [B, P], b [B, P]) -> [B]`` is -cos(a_b, b_b) per row, in [-1, 1].

Shapes of the layers (``NetworkConfig``; every layer from ``muzero.network.layers``):

    projection: flatten [B, prod(hidden_shape)]
                -> Dense(projection_hidden) -> LayerNorm -> ReLU
                -> Dense(projection_hidden) -> LayerNorm -> ReLU
                -> Dense(projection_size)   -> LayerNorm                    [B, P]
    predictor:  [B, P] -> Dense(predictor_hidden) -> LayerNorm -> ReLU
                -> Dense(projection_size)                                  [B, P]

EfficientZero uses 1024 / 1024 for the projection and 512 for the predictor on Atari,
with BatchNorm; this package uses LayerNorm everywhere (one model serves training and
inference) and CPU-sized defaults (``NetworkConfig``: 256 / 256 / 128).

Imports NumPy, TensorFlow, ``muzero.config`` and ``muzero.network.layers`` only.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from muzero.algorithms.muzero.config import NetworkConfig
from muzero.network import layers

# Seeds of the head's own generator: the head's weights are a pure function of the
# network seed, and adding a head never changes the other parts' weights.
_SEED_SALT = 0x55_31


def negative_cosine(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """-cos(a, b) per row: [B, P], [B, P] -> [B].

    Each row is divided by its L2 norm (floored at 1e-12, so a zero row gives 0, not NaN)
    before the dot product.
    """
    a = tf.math.l2_normalize(tf.cast(a, tf.float32), axis=-1, epsilon=1e-24)
    b = tf.math.l2_normalize(tf.cast(b, tf.float32), axis=-1, epsilon=1e-24)
    return -tf.reduce_sum(a * b, axis=-1)


class ProjectionHead(tf.Module):
    """hidden [B, *hidden_shape] -> [B, projection_size] (see the module doc for the layers)."""

    def __init__(self, in_size: int, hidden_size: int, out_size: int, rng: np.random.Generator,
                 name: str = "projection"):
        super().__init__(name=name)
        with self.name_scope:
            self.dense1 = layers.Dense(in_size, hidden_size, rng, use_bias=False, name="dense1")
            self.norm1 = layers.LayerNorm(hidden_size, name="norm1")
            self.dense2 = layers.Dense(hidden_size, hidden_size, rng, use_bias=False, name="dense2")
            self.norm2 = layers.LayerNorm(hidden_size, name="norm2")
            self.dense3 = layers.Dense(hidden_size, out_size, rng, use_bias=False, name="dense3")
            self.norm3 = layers.LayerNorm(out_size, name="norm3")

    def __call__(self, hidden: tf.Tensor) -> tf.Tensor:
        x = tf.reshape(hidden, [tf.shape(hidden)[0], -1])
        x = tf.nn.relu(self.norm1(self.dense1(x)))
        x = tf.nn.relu(self.norm2(self.dense2(x)))
        return self.norm3(self.dense3(x))


class PredictorHead(tf.Module):
    """projected [B, P] -> [B, P] (see the module doc for the layers)."""

    def __init__(self, size: int, hidden_size: int, rng: np.random.Generator,
                 name: str = "predictor"):
        super().__init__(name=name)
        with self.name_scope:
            self.dense1 = layers.Dense(size, hidden_size, rng, use_bias=False, name="dense1")
            self.norm1 = layers.LayerNorm(hidden_size, name="norm1")
            self.dense2 = layers.Dense(hidden_size, size, rng, name="dense2")

    def __call__(self, projected: tf.Tensor) -> tf.Tensor:
        return self.dense2(tf.nn.relu(self.norm1(self.dense1(projected))))


class SSLHead(tf.Module):
    """Projection + predictor as one part, ``MuZeroNetwork.pretrain_head`` (module doc)."""

    def __init__(self, hidden_shape: tuple, config: NetworkConfig, seed: int):
        super().__init__(name="pretrain_head")
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, _SEED_SALT])
        self.hidden_shape = tuple(int(d) for d in hidden_shape)
        self.projection_size = int(config.projection_size)
        with self.name_scope:
            self.projection = ProjectionHead(int(np.prod(self.hidden_shape)), config.projection_hidden,
                                             config.projection_size, rng)
            self.predictor = PredictorHead(config.projection_size, config.predictor_hidden, rng)

    def project(self, hidden: tf.Tensor) -> tf.Tensor:
        """hidden [B, *hidden_shape] -> [B, P]."""
        return self.projection(hidden)

    def predict(self, projected: tf.Tensor) -> tf.Tensor:
        """[B, P] -> [B, P]."""
        return self.predictor(projected)

    def online(self, hidden: tf.Tensor) -> tf.Tensor:
        """predict(project(hidden)): the branch the gradient flows through. [B, P]."""
        return self.predict(self.project(hidden))

    def target(self, hidden: tf.Tensor) -> tf.Tensor:
        """stop_gradient(project(hidden)): the branch compared against. [B, P]."""
        return tf.stop_gradient(self.project(hidden))
