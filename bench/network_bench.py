"""Inference throughput of the MuZero networks (samples per second).

    python bench/network_bench.py --env=atari      # 96x96 gray, 32 stacked frames + action planes
    python bench/network_bench.py --env=cartpole   # 4 floats

For batch sizes 1, 64 and 256, with and without XLA (``jit_compile``), times
``initial_inference`` and ``recurrent_inference`` on NumPy inputs (the inference
server's path, argument checks included) and reports the median of ``--repeats`` runs of
at least ``--min_seconds`` each. Networks use the default ``NetworkConfig`` (except
``jit_compile``); descriptors are built here, so ALE is not needed.

Last lines (machine-readable):
    faster_jit_setting=0|1          by summed samples/s at the batch sizes >= 64
    best_initial_sps=<float>        best over batch sizes and jit settings
    best_recurrent_sps=<float>
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from envs.base import EnvDescriptor  # noqa: E402
from muzero.algorithms.muzero.config import NetworkConfig, TargetConfig  # noqa: E402
from muzero.algorithms.muzero.network import make_network  # noqa: E402


def descriptor_for(env: str) -> tuple:
    """(descriptor, stack_frames) for a benchmark env name."""
    if env == "atari":
        return (EnvDescriptor("atari", (96, 96, 1), "uint8", 18, kind="image",
                              frame_layout="HWC"), TargetConfig().stack_frames)
    if env == "cartpole":
        return EnvDescriptor("cartpole", (4,), "float32", 2), 1
    raise SystemExit(f"--env={env!r}: expected one of ['atari', 'cartpole']")


def throughput(fn, args: tuple, batch: int, min_seconds: float, repeats: int) -> float:
    """Median samples/s of ``fn(*args)`` over ``repeats`` timed runs (after one warm-up)."""
    fn(*args)["value"].numpy()  # trace / compile for this batch size
    rates = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn(*args)["value"].numpy()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds and calls >= 3:
                break
        rates.append(calls * batch / elapsed)
    return statistics.median(rates)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="atari", help="atari or cartpole")
    parser.add_argument("--batch_sizes", default="1,64,256")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min_seconds", type=float, default=0.5)
    args = parser.parse_args(argv)
    descriptor, stack_frames = descriptor_for(args.env)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    rng = np.random.default_rng(0)
    results = {}
    print(f"env={args.env} threads={tf.config.threading.get_inter_op_parallelism_threads()} "
          f"cpus={os.cpu_count()}")
    for jit in (False, True):
        config = dataclasses.replace(NetworkConfig(), jit_compile=jit)
        net = make_network(descriptor, config, stack_frames, seed=0)
        if not jit:
            print(f"input_shape={net.input_shape} hidden_shape={net.hidden_shape} "
                  f"params={net.num_parameters()}")
        for batch in batch_sizes:
            shape = (batch,) + net.input_shape
            if net.input_dtype == tf.uint8:
                obs = rng.integers(0, 256, shape).astype(np.uint8)
            else:
                obs = rng.normal(size=shape).astype(np.float32)
            hidden = net.initial_inference(obs)["hidden_state"].numpy()
            actions = rng.integers(0, net.num_actions, batch).astype(np.int32)
            initial = throughput(net.initial_inference, (obs,), batch, args.min_seconds,
                                 args.repeats)
            recurrent = throughput(net.recurrent_inference, (hidden, actions), batch,
                                   args.min_seconds, args.repeats)
            results[(jit, batch)] = (initial, recurrent)
            print(f"env={args.env} jit={int(jit)} batch={batch} initial_sps={initial:.1f} "
                  f"recurrent_sps={recurrent:.1f}", flush=True)
    large = [b for b in batch_sizes if b >= 64] or batch_sizes
    score = {jit: sum(sum(results[(jit, b)]) for b in large) for jit in (False, True)}
    print(f"faster_jit_setting={int(score[True] > score[False])}")
    print(f"best_initial_sps={max(r[0] for r in results.values()):.1f}")
    print(f"best_recurrent_sps={max(r[1] for r in results.values()):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
