"""Self-supervised pretraining of the representation: augmentations and objectives.

A pretraining run (``--pretrain``, ``muzero.algorithms.muzero.pretraining``) takes a
batch of observations x [B, *input_shape] from the replay, makes two augmented views
x1, x2 of every observation (``augment_views``), encodes both with the representation
(h = representation(x)) and trains the representation and the network's
``pretrain_head`` (projection g and predictor q of ``muzero.algorithms.muzero.network.ssl``) with one of
two objectives (``PretrainConfig.objective``):

* ``ntxent`` (SimCLR's normalised temperature-scaled cross-entropy, as SEED RL's MuZero
  uses it): with the predictor (``use_predictor``, SEED's recipe),
  loss = (NT-Xent(q(g(h1)), g(h2)) + NT-Xent(q(g(h2)), g(h1))) / 2;
  without it, loss = (NT-Xent(g(h1), g(h2)) + NT-Xent(g(h2), g(h1))) / 2, which equals
  NT-Xent(g(h1), g(h2)) (SimCLR). ``nt_xent`` below is the formula.
* ``simsiam`` (SimSiam / BYOL without a moving-average target): the negative cosine
  between the online branch q(g(h)) of one view and the stop-gradient projection g(h)
  of the other, symmetrised:
  loss = mean_b(-cos(q(g(h1_b)), sg(g(h2_b))) - cos(q(g(h2_b)), sg(g(h1_b)))) / 2.

Augmentations (NumPy, drawn from the caller's generator, so a run is deterministic
under its seed):

* images (uint8 [B, H, W, C]; the first ``frame_channels`` channels are stacked frames,
  the rest action planes, ``muzero.observation``): a random shift (each sample padded
  by ``shift_pixels`` on every side by repeating its edge pixels, then cropped back to
  H x W at a random offset in [-shift_pixels, shift_pixels] per axis) and a brightness
  factor U(1 - brightness, 1 + brightness) per sample, applied to the frame channels
  only (action planes carry actions, not light), rounded and clipped to [0, 255] in
  float32 before going back to uint8, so nothing overflows;
* vectors (float [B, D]): Gaussian noise with standard deviation ``noise_std``.

Imports NumPy, TensorFlow and ``muzero.algorithms.muzero.network.ssl`` (``negative_cosine``) only.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from muzero.algorithms.muzero.network.ssl import negative_cosine

OBJECTIVES = ("ntxent", "simsiam")

# Logit given to each row's similarity with itself in NT-Xent (SEED subtracts 1e9 too):
# exp(-1e9) is exactly 0 in float32, so the self-pair drops out of the softmax.
_SELF_LOGIT = -1e9


# ------------------------------------------------------------------ objectives

def nt_xent(a: tf.Tensor, b: tf.Tensor, temperature: float) -> tf.Tensor:
    """NT-Xent over two views: a [B, P], b [B, P] (row i of a and of b: one observation) -> scalar.

    z = concat(a, b) [2B, P], each row divided by its L2 norm; s_ij = z_i . z_j / temperature
    (cosine similarity over the temperature); the row's similarity with itself is left
    out. Row i's positive is its other view, p(i) = i + B for i < B and i - B otherwise;
    the other 2B - 2 rows are its negatives. The loss is the cross-entropy of picking the
    positive, averaged over the 2B rows:

        loss = mean_i [ -s_{i,p(i)} + log sum_{j != i} exp(s_ij) ].

    (SimCLR's reference code adds the two halves' means instead of averaging them: twice
    this value.)
    """
    z = tf.math.l2_normalize(tf.concat([tf.cast(a, tf.float32), tf.cast(b, tf.float32)], 0),
                             axis=-1, epsilon=1e-24)
    n = tf.shape(z)[0]
    logits = tf.matmul(z, z, transpose_b=True) / temperature              # [2B, 2B]
    logits = tf.where(tf.eye(n, dtype=tf.bool), tf.constant(_SELF_LOGIT, tf.float32), logits)
    half = n // 2
    positives = tf.concat([tf.range(half, n), tf.range(0, half)], 0)     # [2B]
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=positives, logits=logits)
    return tf.reduce_mean(losses)


def contrastive_accuracy(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Fraction of the 2B rows of concat(a, b) whose most similar other row is their other
    view (a [B, P], b [B, P] -> scalar in [0, 1]; chance is 1 / (2B - 1))."""
    z = tf.math.l2_normalize(tf.concat([tf.cast(a, tf.float32), tf.cast(b, tf.float32)], 0),
                             axis=-1, epsilon=1e-24)
    n = tf.shape(z)[0]
    sim = tf.matmul(z, z, transpose_b=True)
    sim = tf.where(tf.eye(n, dtype=tf.bool), tf.constant(-2.0, tf.float32), sim)
    half = n // 2
    positives = tf.concat([tf.range(half, n), tf.range(0, half)], 0)
    best = tf.argmax(sim, axis=1, output_type=tf.int32)
    return tf.reduce_mean(tf.cast(tf.equal(best, positives), tf.float32))


def simsiam_loss(online1: tf.Tensor, projected1: tf.Tensor, online2: tf.Tensor,
                 projected2: tf.Tensor) -> tf.Tensor:
    """Symmetrised negative cosine with a stop-gradient on the target side -> scalar.

    online_k [B, P] = q(g(h_k)) (the predictor's output for view k), projected_k [B, P] =
    g(h_k) (the projection of view k). loss = mean_b(-cos(online1, sg(projected2))
    - cos(online2, sg(projected1))) / 2, in [-1, 1]; no gradient reaches ``projected*``.
    """
    first = negative_cosine(online1, tf.stop_gradient(projected2))
    second = negative_cosine(online2, tf.stop_gradient(projected1))
    return 0.5 * (tf.reduce_mean(first) + tf.reduce_mean(second))


def pretrain_objective(head, hidden1: tf.Tensor, hidden2: tf.Tensor, objective: str,
                       temperature: float, use_predictor: bool) -> tuple:
    """The pretraining loss of two views' hidden states [B, *hidden_shape] -> (loss, metrics).

    ``head`` is the network's ``pretrain_head`` (``project`` and ``predict``). Metrics:
    ``pretrain/<objective>`` (the loss), ``pretrain/accuracy`` (``contrastive_accuracy``
    of the first view's online output -- q(g(h1)), or g(h1) without the predictor --
    against the second view's projection g(h2): the pairing the loss scores) and
    ``pretrain/embedding_std`` (mean over dimensions of the per-dimension standard
    deviation of the L2-normalised projections across the batch; about 1/sqrt(P) when the
    embeddings spread out, 0 when they collapse to one point).
    """
    projected1, projected2 = head.project(hidden1), head.project(hidden2)
    predictor = objective == "simsiam" or use_predictor
    online1 = head.predict(projected1) if predictor else projected1
    online2 = head.predict(projected2) if predictor else projected2
    if objective == "ntxent":
        loss = 0.5 * (nt_xent(online1, projected2, temperature) + nt_xent(online2, projected1, temperature))
    elif objective == "simsiam":
        loss = simsiam_loss(online1, projected1, online2, projected2)
    else:
        raise ValueError(f"unknown pretraining objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
    normalised = tf.math.l2_normalize(projected1, axis=-1, epsilon=1e-24)
    metrics = {f"pretrain/{objective}": loss,
               "pretrain/accuracy": contrastive_accuracy(online1, projected2),
               "pretrain/embedding_std": tf.reduce_mean(tf.math.reduce_std(normalised, axis=0))}
    return loss, metrics


# ---------------------------------------------------------------- augmentations

def shift_images(images: np.ndarray, offsets: np.ndarray, pad: int) -> np.ndarray:
    """Shifts each image by its offset: images [B, H, W, C], offsets [B, 2] int (dy, dx),
    each in [-pad, pad] -> [B, H, W, C], same dtype.

    out[b, y, x] = images[b, clip(y + dy_b, 0, H-1), clip(x + dx_b, 0, W-1)]: the image
    padded by ``pad`` edge-repeated pixels on every side, cropped at (pad + dy, pad + dx).
    Content moves by (-dy, -dx); values are copied, never changed.
    """
    images = np.asarray(images)
    offsets = np.asarray(offsets, np.int64)
    b, h, w = images.shape[:3]
    if offsets.shape != (b, 2) or (b and np.abs(offsets).max() > pad):
        raise ValueError(f"offsets must be [B, 2] = {(b, 2)} within [-{pad}, {pad}], got shape {offsets.shape}")
    rows = np.clip(np.arange(h)[None, :] + offsets[:, :1], 0, h - 1)      # [B, H]
    cols = np.clip(np.arange(w)[None, :] + offsets[:, 1:], 0, w - 1)      # [B, W]
    return images[np.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]


def scale_brightness(images: np.ndarray, factors: np.ndarray, frame_channels: int) -> np.ndarray:
    """Multiplies the first ``frame_channels`` channels of each image by its factor:
    images [B, H, W, C] (uint8 or float), factors [B] -> [B, H, W, C], same dtype.

    uint8 images are scaled in float32, rounded and clipped to [0, 255] (no wrap-around);
    float images are only scaled. The channels from ``frame_channels`` on are copied.
    """
    images = np.asarray(images)
    factors = np.asarray(factors, np.float32).reshape(-1, 1, 1, 1)
    out = images.copy()
    scaled = images[..., :frame_channels].astype(np.float32) * factors
    if images.dtype == np.uint8:
        scaled = np.clip(np.rint(scaled), 0, 255)
    out[..., :frame_channels] = scaled.astype(images.dtype)
    return out


def augment_images(images: np.ndarray, rng: np.random.Generator, shift_pixels: int, brightness: float,
                   frame_channels: int) -> np.ndarray:
    """One random view of each image [B, H, W, C]: a shift by offsets drawn uniformly
    from [-shift_pixels, shift_pixels]^2, then a brightness factor U(1-b, 1+b) on the
    frame channels (module doc). Same shape and dtype."""
    b = images.shape[0]
    out = images
    if shift_pixels > 0:
        out = shift_images(out, rng.integers(-shift_pixels, shift_pixels + 1, size=(b, 2)), shift_pixels)
    if brightness > 0:
        out = scale_brightness(out, rng.uniform(1.0 - brightness, 1.0 + brightness, size=b), frame_channels)
    return out


def add_gaussian_noise(vectors: np.ndarray, rng: np.random.Generator, std: float) -> np.ndarray:
    """vectors [B, D] float -> vectors + N(0, std^2) noise, same dtype."""
    vectors = np.asarray(vectors)
    if std <= 0:
        return vectors.copy()
    return (vectors + rng.normal(0.0, std, size=vectors.shape)).astype(vectors.dtype)


def augment_views(observations: np.ndarray, rng: np.random.Generator, *, is_image: bool,
                  frame_channels: int, shift_pixels: int, brightness: float, noise_std: float) -> tuple:
    """Two independent random views of a batch of network inputs -> (view1, view2), each
    shaped like ``observations``: ``augment_images`` for image inputs [B, H, W, C],
    ``add_gaussian_noise`` for vector inputs [B, D]."""
    if is_image:
        return tuple(augment_images(observations, rng, shift_pixels, brightness, frame_channels)
                     for _ in range(2))
    return tuple(add_gaussian_noise(observations, rng, noise_std) for _ in range(2))
