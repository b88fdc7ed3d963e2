"""Training steps/s with layer skipping on and off (NetworkConfig.skip_fraction).

    python bench/layer_skip_bench.py                      # Atari torso settings, 1 and 4 blocks
    python bench/layer_skip_bench.py --blocks=1,4,8 --steps=10 --repeats=5

The network is the Atari default's (96x96 gray frames, ``--stack`` frames plus action
planes, 18 actions, 32 channels, one downsampling block per stage; ``conv_num_blocks``
from ``--blocks``), trained with the default loss and Adam on one synthetic batch of
``--batch`` samples and K = 5 unroll steps, as ``Trainer.train`` does: one
``draw_n_forward`` per step (no warm-up), passed in as a float32 scalar. Each setting
is timed ``--repeats`` times over ``--steps`` steps after two warm-up steps (tracing),
alternating with the other setting; the median is reported. With one block nothing can be skipped (block 0 always runs).

Last lines (machine-readable), per block count N:
    steps_per_s_blocks<N>_skip0=<float>
    steps_per_s_blocks<N>_skip<f>=<float>
    speedup_blocks<N>=<float>              skip / no-skip
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from envs.base import EnvDescriptor  # noqa: E402
from muzero.algorithms.muzero.config import NetworkConfig, TrainingConfig  # noqa: E402
from muzero.algorithms.muzero.network import make_network, make_train_step  # noqa: E402
from muzero.algorithms.muzero.network.networks import draw_n_forward  # noqa: E402

ATARI = EnvDescriptor("atari", (96, 96, 1), "uint8", 18, kind="image", frame_layout="HWC")
K = 5


def synthetic_batch(net, batch: int, rng: np.random.Generator, unroll: int = K) -> dict:
    """Random inputs of the network's dtype, targets inside small supports, every mask on."""
    a, k = net.num_actions, unroll
    if net.input_dtype == tf.uint8:
        obs = rng.integers(0, 256, (batch, *net.input_shape), dtype=np.uint8)
    else:
        obs = rng.standard_normal((batch, *net.input_shape)).astype(net.input_dtype.as_numpy_dtype)
    policy = rng.random((batch, k + 1, a)).astype(np.float32)
    ones = np.ones((batch, k + 1), np.float32)
    return {
        "observation": obs,
        "actions": rng.integers(0, a, (batch, k)).astype(np.int32),
        "target_value": rng.uniform(-5, 5, (batch, k + 1)).astype(np.float32),
        "target_reward": rng.uniform(-1, 1, (batch, k + 1)).astype(np.float32),
        "target_policy": policy / policy.sum(-1, keepdims=True),
        "value_mask": ones, "reward_mask": ones.copy(), "policy_mask": ones.copy(),
        "importance_weight": np.ones(batch, np.float32),
    }


def make_stepper(blocks: int, skip_fraction: float, args):
    """A function running one training step (and returning its loss) for this setting."""
    config = NetworkConfig(conv_channels=32, conv_num_blocks=blocks, conv_downsample_blocks=1,
                           skip_fraction=skip_fraction)
    net = make_network(ATARI, config, args.stack, seed=0)
    optimizer = tf.keras.optimizers.Adam(1e-4)
    optimizer.build(net.trainable_variables)
    train_step = make_train_step(net, optimizer, TrainingConfig())
    batch = {k: tf.constant(v) for k, v in synthetic_batch(net, args.batch, np.random.default_rng(0)).items()}
    step = 0

    def one():
        nonlocal step
        if skip_fraction > 0:
            n = tf.constant(draw_n_forward(0, step, blocks, skip_fraction, 0), tf.float32)
            out = train_step(batch, n)
        else:
            out = train_step(batch)
        step += 1
        return float(out[0])

    one(), one()                                   # trace and warm up
    return one


def timed(one, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        one()
    return steps / (time.perf_counter() - start)


def alternating_medians(first, second, steps: int, repeats: int) -> tuple:
    """Median steps/s of two steppers over ``repeats`` timings of ``steps`` steps each; the
    repeats alternate between them (and which goes first) so that drifts of the machine's
    speed hit both alike."""
    rates = {first: [], second: []}
    for r in range(repeats):
        for fn in ((first, second) if r % 2 == 0 else (second, first)):
            rates[fn].append(timed(fn, steps))
    return statistics.median(rates[first]), statistics.median(rates[second])


def compare(blocks: int, args) -> tuple:
    """Median steps/s (off, on)."""
    return alternating_medians(make_stepper(blocks, 0.0, args), make_stepper(blocks, args.skip_fraction, args),
                               args.steps, args.repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", default="1,4", help="comma-separated conv_num_blocks values")
    parser.add_argument("--skip_fraction", type=float, default=0.5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--stack", type=int, default=8, help="stacked frames (Atari default: 8)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = []
    for blocks in [int(b) for b in args.blocks.split(",")]:
        off, on = compare(blocks, args)
        results.append((blocks, off, on))
        print(f"blocks={blocks} skip0={off:.3f} steps/s skip{args.skip_fraction:g}={on:.3f} steps/s",
              flush=True)
    for blocks, off, on in results:
        print(f"steps_per_s_blocks{blocks}_skip0={off:.4f}")
        print(f"steps_per_s_blocks{blocks}_skip{args.skip_fraction:g}={on:.4f}")
        print(f"speedup_blocks{blocks}={on / off:.4f}")


if __name__ == "__main__":
    main()
