"""Small layers built directly from ``tf.Variable`` inside ``tf.Module``.

Keras 3 layers held by a ``tf.Module`` are not tracked (its ``trainable_variables``
stays empty), so the MuZero networks are assembled from these instead. Every layer
takes a NumPy ``Generator`` for its initial weights, so a network is a pure function
of its seed. All tensors are float32, channels last (NHWC).

Imports NumPy and TensorFlow only.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf


def _glorot(rng: np.random.Generator, shape: tuple, fan_in: int, fan_out: int,
            scale: float = 1.0) -> np.ndarray:
    limit = scale * np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


class Dense(tf.Module):
    """y = x @ w + b.  x: [..., in_size] -> [..., out_size]."""

    def __init__(self, in_size: int, out_size: int, rng: np.random.Generator,
                 use_bias: bool = True, init_scale: float = 1.0, name: Optional[str] = None):
        super().__init__(name=name)
        with self.name_scope:
            self.w = tf.Variable(_glorot(rng, (in_size, out_size), in_size, out_size, init_scale),
                                 name="w")
            self.b = tf.Variable(tf.zeros([out_size]), name="b") if use_bias else None

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        y = tf.matmul(x, self.w) if x.shape.rank == 2 else tf.tensordot(x, self.w, 1)
        return y + self.b if self.b is not None else y


class Conv2D(tf.Module):
    """SAME-padded 2-D convolution.  x: [B, H, W, in_channels] -> [B, H/stride, W/stride, out]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 rng: np.random.Generator, stride: int = 1, use_bias: bool = True,
                 name: Optional[str] = None):
        super().__init__(name=name)
        k = kernel_size
        self.stride = stride
        with self.name_scope:
            self.w = tf.Variable(_glorot(rng, (k, k, in_channels, out_channels),
                                         k * k * in_channels, k * k * out_channels), name="w")
            self.b = tf.Variable(tf.zeros([out_channels]), name="b") if use_bias else None

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        y = tf.nn.conv2d(x, self.w, strides=self.stride, padding="SAME")
        return y + self.b if self.b is not None else y


def layer_norm(x: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor, epsilon: float) -> tf.Tensor:
    """y = (x - mean) / sqrt(var + epsilon) * scale + offset over the last axis of ``x``.

    The gradient is written out rather than left to autodiff, which builds about twice as
    many ops for it (the training step of MinAtar's conv network runs 18 of these per
    step): with x_hat the normalised input, inv = 1 / sqrt(var + epsilon), g the incoming
    gradient, s = g * scale and <.> the mean over the last axis,

        dx = inv * (s - <s> - x_hat * <s * x_hat>),  dscale = sum(g * x_hat),  doffset = sum(g)

    (sums over every axis but the last).
    """
    @tf.custom_gradient
    def forward(x, scale, offset):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inv = tf.math.rsqrt(variance + epsilon)
        x_hat = (x - mean) * inv

        def gradient(g):
            s = g * scale
            dx = inv * (s - tf.reduce_mean(s, axis=-1, keepdims=True)
                        - x_hat * tf.reduce_mean(s * x_hat, axis=-1, keepdims=True))
            axes = list(range(x.shape.rank - 1))
            return dx, tf.reduce_sum(g * x_hat, axis=axes), tf.reduce_sum(g, axis=axes)

        return x_hat * scale + offset, gradient

    return forward(x, scale, offset)


class LayerNorm(tf.Module):
    """Normalises the last axis to zero mean, unit variance, then scales and shifts
    (``layer_norm``)."""

    def __init__(self, size: int, epsilon: float = 1e-5, name: Optional[str] = None):
        super().__init__(name=name)
        self.epsilon = epsilon
        with self.name_scope:
            self.scale = tf.Variable(tf.ones([size]), name="scale")
            self.offset = tf.Variable(tf.zeros([size]), name="offset")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return layer_norm(x, self.scale, self.offset, self.epsilon)


class MLP(tf.Module):
    """[Dense -> LayerNorm -> ReLU] per hidden size, then a final Dense (no activation).

    x: [B, in_size] -> [B, out_size].

    ``hidden_bias``: the hidden Dense layers add a bias before the LayerNorm. Without it
    LayerNorm(x @ w) is the same for x and c * x (any c > 0): the MLP sees only the direction
    of its input, not its size (a CartPole state at x = 1.2 looks like one at x = 2.4 with
    all other features doubled). Unlike with BatchNorm, the bias is not redundant here:
    LayerNorm removes its mean over the features, not the bias itself.
    """

    def __init__(self, in_size: int, hidden_sizes: Sequence[int], out_size: int,
                 rng: np.random.Generator, final_init_scale: float = 1.0,
                 hidden_bias: bool = True, name: Optional[str] = None):
        super().__init__(name=name)
        with self.name_scope:
            self.hidden = []
            self.norms = []
            size = in_size
            for i, width in enumerate(hidden_sizes):
                self.hidden.append(Dense(size, width, rng, use_bias=hidden_bias, name=f"dense_{i}"))
                self.norms.append(LayerNorm(width, name=f"norm_{i}"))
                size = width
            self.out = Dense(size, out_size, rng, init_scale=final_init_scale, name="out")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        for dense, norm in zip(self.hidden, self.norms):
            x = tf.nn.relu(norm(dense(x)))
        return self.out(x)


class ResidualBlock(tf.Module):
    """x -> conv3x3 -> LN -> ReLU -> conv3x3 -> LN -> + x -> ReLU.  [B, H, W, C] -> same."""

    def __init__(self, channels: int, rng: np.random.Generator, name: Optional[str] = None):
        super().__init__(name=name)
        with self.name_scope:
            self.conv1 = Conv2D(channels, channels, 3, rng, use_bias=False, name="conv1")
            self.norm1 = LayerNorm(channels, name="norm1")
            self.conv2 = Conv2D(channels, channels, 3, rng, use_bias=False, name="conv2")
            self.norm2 = LayerNorm(channels, name="norm2")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        y = tf.nn.relu(self.norm1(self.conv1(x)))
        y = self.norm2(self.conv2(y))
        return tf.nn.relu(x + y)


class ConvStem(tf.Module):
    """Conv3x3 (stride s, no bias) -> LN -> ReLU -> ``num_blocks`` residual blocks.

    [B, H, W, in_channels] -> [B, ceil(H/s), ceil(W/s), channels].
    """

    def __init__(self, in_channels: int, channels: int, num_blocks: int,
                 rng: np.random.Generator, stride: int = 1, input_scale: float = 1.0,
                 name: Optional[str] = None):
        super().__init__(name=name)
        # Scaling the input by s equals scaling the (bias-free) convolution's output by s,
        # which is cheaper when the convolution shrinks the tensor.
        self.input_scale = input_scale
        with self.name_scope:
            self.conv = Conv2D(in_channels, channels, 3, rng, stride=stride, use_bias=False,
                               name="conv")
            self.norm = LayerNorm(channels, name="norm")
            self.blocks = [ResidualBlock(channels, rng, name=f"block_{i}")
                           for i in range(num_blocks)]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        x = self.conv(x)
        if self.input_scale != 1.0:
            x = x * self.input_scale
        x = tf.nn.relu(self.norm(x))
        for block in self.blocks:
            x = block(x)
        return x


def min_max_normalise(hidden: tf.Tensor) -> tf.Tensor:
    """Rescales each sample's hidden state to [0, 1] over all its features.

    hidden: [B, ...] -> [B, ...]. A constant sample maps to zeros (its range is
    floored at 1e-5 so no division by zero happens).
    """
    axes = list(range(1, hidden.shape.rank))
    low = tf.reduce_min(hidden, axis=axes, keepdims=True)
    high = tf.reduce_max(hidden, axis=axes, keepdims=True)
    return (hidden - low) / tf.maximum(high - low, 1e-5)


def variable_copier(sources, targets):
    """A ``tf.function`` that assigns every variable of ``sources`` to the matching one of
    ``targets`` in one graph call: how a learner copies its trained weights into the copy
    that serves inference. Raises RuntimeError when the two structures differ."""
    sources, targets = list(sources), list(targets)
    if [v.shape for v in sources] != [v.shape for v in targets]:
        raise RuntimeError("trained and served networks differ in structure")

    @tf.function
    def copy():
        for target, source in zip(targets, sources):
            target.assign(source)
    return copy


def variable_averager(sources, averages, decay: float):
    """A ``tf.function`` ``update(step)`` that moves every variable of ``averages`` towards
    the matching one of ``sources`` in one graph call: average <- d average + (1 - d) source
    with d = min(decay, (1 + step) / (10 + step)), so that the average follows the first
    updates closely instead of staying near its starting weights (the ``num_updates``
    warm-up of ``tf.train.ExponentialMovingAverage``). ``step`` counts updates from 0.
    Raises RuntimeError when the two structures differ."""
    sources, averages = list(sources), list(averages)
    if [v.shape for v in sources] != [v.shape for v in averages]:
        raise RuntimeError("trained and averaged networks differ in structure")
    if not 0.0 < decay < 1.0:
        raise ValueError(f"decay {decay} must be in (0, 1)")

    @tf.function
    def update(step):
        step = tf.cast(step, tf.float32)
        d = tf.minimum(tf.constant(decay, tf.float32), (1.0 + step) / (10.0 + step))
        for average, source in zip(averages, sources):
            average.assign(d * average + (1.0 - d) * tf.cast(source, average.dtype))
    return update
