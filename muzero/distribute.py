"""Devices, strategy and seeds of a data-parallel (multi-device) MuZero learner.

``configure_devices(N)`` picks the devices ``--learner_devices=N`` trains on: ``None``
for N = 1 (the single-device path), the first N GPUs, or, on a machine without GPUs, N
logical CPU devices (for testing the multi-device path; they share the same cores, so
they bring no speed-up). ``make_strategy(devices)`` is the ``tf.distribute.MirroredStrategy``
over them: one copy of every variable per device, kept identical because every copy
receives the same update.

One training step on R replicas (``muzero.algorithms.muzero.network.loss.make_distributed_train_step``)
splits the batch of B samples into R contiguous slices of B / R; replica r computes the
loss L_r on its slice and the gradient of L_r / R; the gradients are summed over the
replicas onto the first device, clipped there and applied once to every copy. Because the
loss is a mean over the batch plus a weight-decay term D,

    L = (1/B) sum_b l_b + D = (1/R) sum_r [ (R/B) sum_{b in r} l_b + D ] = (1/R) sum_r L_r,

so sum_r grad(L_r / R) = grad(L): the same gradient as one device on the whole batch.

Seeds, in the spirit of Trax's host/device initialisation: ``host_seed(seed, h)`` folds a
host index into the run seed for the host's data randomness (replay sampling,
augmentation); host 0 gets ``seed`` itself, so a single-host run is unchanged. The
replicas need no seeds of their own: the MuZero train step draws no random numbers inside
the graph (all copies take one update, so any draw must be the same on every replica).
The one random number of a step, layer skipping's ``n_forward``
(``NetworkConfig.skip_fraction``), is drawn on the host from (run seed, training step) by
``muzero.algorithms.muzero.network.networks.draw_n_forward`` and handed to every replica as the same scalar
tensor. The network's initial weights are a function of the run seed alone (every host
and replica starts from the same weights). Today there is one learner host,
index 0.

Imports NumPy and ``muzero.config`` at import time, TensorFlow inside the functions.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from muzero.config import ConfigError


def configure_devices(count: int) -> Optional[list]:
    """The device names a learner with ``count`` devices trains on, or None for 1.

    ``count`` > 1: the first ``count`` GPUs when the machine has that many; on a machine
    without GPUs the CPU is split into ``count`` logical devices (``/device:CPU:0``, ...),
    which must happen before TensorFlow initialises its runtime. Calling this again with
    the same ``count`` returns the same devices. Raises ``ConfigError`` for a machine with
    some GPUs but fewer than ``count``, or when the CPU can no longer be split.
    """
    if count == 1:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"learner_devices={count!r} is invalid: must be an integer >= 1")
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < count:
            raise ConfigError(f"--learner_devices={count} asks for {count} GPUs but this machine has "
                              f"{len(gpus)}: pass --learner_devices={len(gpus)} or fewer")
        return [d.name for d in tf.config.list_logical_devices("GPU")[:count]]
    cpu = tf.config.list_physical_devices("CPU")[0]
    if len(tf.config.get_logical_device_configuration(cpu) or []) < count:
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
        except RuntimeError:
            have = len(tf.config.list_logical_devices("CPU"))
            raise ConfigError(f"--learner_devices={count} needs {count} logical CPU devices (this machine has no "
                              f"GPU) but TensorFlow is already initialised with {have}: configure the devices "
                              "before any TensorFlow work in this process") from None
    return [d.name for d in tf.config.list_logical_devices("CPU")[:count]]


def make_strategy(devices: Sequence[str]):
    """A ``tf.distribute.MirroredStrategy`` over ``devices`` (from ``configure_devices``).
    CPU devices reduce through one device (``ReductionToOneDevice``; NCCL needs GPUs);
    GPUs keep the strategy's default cross-device ops."""
    import tensorflow as tf
    devices = list(devices)
    on_cpu = any(tf.DeviceSpec.from_string(d).device_type == "CPU" for d in devices)
    cross_device_ops = tf.distribute.ReductionToOneDevice() if on_cpu else None
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device_ops)


def host_seed(seed: int, host_index: int) -> int:
    """The seed of host ``host_index``'s data randomness (replay sampling, augmentation):
    ``seed`` itself for host 0; for host h > 0 a 31-bit hash of (seed, h) (NumPy's
    ``SeedSequence(seed, spawn_key=(h,))``, the seed of ``SeedSequence(seed).spawn``'s
    child h), so hosts draw independent streams and a run is reproducible."""
    if host_index < 0:
        raise ValueError(f"host_index={host_index} must be >= 0")
    if host_index == 0:
        return int(seed)
    state = np.random.SeedSequence(int(seed), spawn_key=(int(host_index),)).generate_state(1, np.uint32)
    return int(state[0] >> 1)
