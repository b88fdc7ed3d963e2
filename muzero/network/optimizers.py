"""Optimisers and learning-rate schedules every learner builds its training step with.

    schedule = learning_rate_schedule(1e-3, "linear", decay_steps=10_000)
    optimizer = make_optimizer(schedule, epsilon=1e-5)
    rate_at(schedule, step)      # the rate the optimiser uses at that step

Imports TensorFlow.
"""
from __future__ import annotations

import tensorflow as tf

from muzero.network.options import LR_SCHEDULES


def learning_rate_schedule(learning_rate: float, schedule: str = "constant", decay_steps: int = 1,
                           alpha: float = 0.0):
    """``learning_rate`` itself ("constant"), or a Keras schedule over training steps:
    "linear" decays to 0 at ``decay_steps`` and stays there; "cosine" decays to ``alpha``
    times the rate at ``decay_steps``; "cosine_restarts" does so with warm restarts (the
    first period ``decay_steps``)."""
    if schedule == "constant":
        return learning_rate
    if schedule == "linear":
        return tf.keras.optimizers.schedules.PolynomialDecay(learning_rate, decay_steps,
                                                             end_learning_rate=0.0, power=1.0)
    if schedule == "cosine":
        return tf.keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps, alpha=alpha)
    if schedule == "cosine_restarts":
        return tf.keras.optimizers.schedules.CosineDecayRestarts(learning_rate, decay_steps, alpha=alpha)
    raise ValueError(f"schedule={schedule!r} is not one of {', '.join(LR_SCHEDULES)}")


def make_optimizer(learning_rate, kind: str = "adam", *, beta_1: float = 0.9, epsilon: float = 1e-7,
                   momentum: float = 0.0):
    """Adam (``beta_1``, ``epsilon``) or SGD (``momentum``) at ``learning_rate``: a number or
    a schedule from :func:`learning_rate_schedule`."""
    if kind == "sgd":
        return tf.keras.optimizers.SGD(learning_rate, momentum=momentum)
    if kind == "adam":
        return tf.keras.optimizers.Adam(learning_rate, beta_1=beta_1, epsilon=epsilon)
    raise ValueError(f"optimizer kind={kind!r} is not 'adam' or 'sgd'")


def rate_at(schedule, step) -> tf.Tensor:
    """The float32 rate a schedule from :func:`learning_rate_schedule` gives at ``step``."""
    rate = schedule(step) if callable(schedule) else schedule
    return tf.cast(rate, tf.float32)
