"""Replay benchmark: stored bytes per env step and batch-building time.

Fills a replay with synthetic segments (no emulator: an image descriptor is built
directly) and prints, for each frame stack, the storage cost per env step over the
bytes of one uint8 frame and the median time to sample a batch and build its
targets. The last lines are machine-readable ``key=value`` pairs; the figures for
the largest stack (the paper's 32 by default) come last, unsuffixed.

    python bench/replay_bench.py --env=atari [--stacks=4,32] [--batch=256] [--unroll=5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))

import numpy as np  # noqa: E402

from envs.base import EnvDescriptor  # noqa: E402
from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig  # noqa: E402
from muzero.algorithms.muzero.replay import Replay  # noqa: E402

DESCRIPTORS = {
    "atari": EnvDescriptor("atari", (96, 96, 1), "uint8", 18, kind="image", frame_layout="HWC"),
    "cartpole": EnvDescriptor("cartpole", (4,), "float32", 2),
}


def make_segment(descriptor, rng, episode_id, start, length, done):
    a = descriptor.num_actions
    policies = rng.random((length, a)).astype(np.float32)
    policies /= policies.sum(axis=1, keepdims=True)
    if descriptor.observation_dtype == "uint8":
        obs = rng.integers(0, 256, (length,) + descriptor.observation_shape, dtype=np.uint8)
    else:
        obs = rng.standard_normal((length,) + descriptor.observation_shape).astype(np.float32)
    return dict(episode_id=np.int64(episode_id), start=np.int64(start), observations=obs,
                actions=rng.integers(0, a, length).astype(np.int32),
                rewards=rng.standard_normal(length).astype(np.float32),
                root_values=rng.standard_normal(length).astype(np.float32),
                policies=policies, to_play=np.zeros(length, np.int8),
                terminated=np.bool_(done), truncated=np.bool_(False))


def fill(replay, descriptor, capacity, segment_length, episode_segments, seed):
    """Inserts segments until the replay has wrapped once (full, with evictions)."""
    rng = np.random.default_rng(seed)
    inserted, episode, k = 0, 0, 0
    while inserted < capacity + 5 * segment_length:
        done = k == episode_segments - 1
        replay.insert(make_segment(descriptor, rng, episode, k * segment_length, segment_length, done))
        inserted += segment_length
        k += 1
        if done:
            episode, k = episode + 1, 0


def run(env, stack, capacity, batch, unroll, td_steps, repeats, seed):
    descriptor = DESCRIPTORS[env]
    rc = ReplayConfig(capacity_steps=capacity, segment_length=200, min_steps_to_sample=1)
    tc = TargetConfig(num_unroll_steps=unroll, td_steps=td_steps, stack_frames=stack)
    replay = Replay(descriptor, rc, tc, seed, discount=0.997)
    fill(replay, descriptor, capacity, 200, episode_segments=10, seed=seed)
    frame_bytes = int(np.prod(descriptor.observation_shape)) * np.dtype(descriptor.observation_dtype).itemsize
    allocated_ratio = replay.bytes_allocated / capacity / frame_bytes
    used_ratio = replay.bytes_used / replay.num_steps / frame_bytes
    replay.sample(batch)  # compile / warm caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        replay.sample(batch)
        times.append((time.perf_counter() - t0) * 1e3)
    # Baseline in the same process: copying a buffer the size of the batch's observations.
    obs = replay.sample(batch)["observation"]
    copies = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        obs.copy()
        copies.append((time.perf_counter() - t0) * 1e3)
    return allocated_ratio, used_ratio, statistics.median(times), statistics.median(copies)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="atari", choices=sorted(DESCRIPTORS))
    parser.add_argument("--stacks", default="4,32", help="comma-separated frame stacks (image envs)")
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--unroll", type=int, default=5)
    parser.add_argument("--td_steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    stacks = sorted(int(s) for s in args.stacks.split(",")) if DESCRIPTORS[args.env].is_image else [1]
    results = []
    for stack in stacks:
        alloc, used, ms, copy_ms = run(args.env, stack, args.capacity, args.batch, args.unroll,
                                       args.td_steps, args.repeats, args.seed)
        results.append((stack, alloc, used, ms, copy_ms))
        print(f"stack={stack} bytes_per_step_over_frame={alloc:.4f} (live rows only: {used:.4f}) "
              f"batch_ms={ms:.1f} (B={args.batch}, K={args.unroll}); copying the observation "
              f"batch alone: {copy_ms:.1f} ms", flush=True)
    for stack, alloc, used, ms, copy_ms in results:
        print(f"batch_ms_stack{stack}={ms:.2f}")
        print(f"batch_over_obs_copy_stack{stack}={ms / copy_ms:.2f}")
    stack, alloc, used, ms, copy_ms = results[-1]
    print(f"stack_frames={stack}")
    print(f"bytes_per_step_over_frame={alloc:.4f}")
    print(f"batch_ms={ms:.2f}")


if __name__ == "__main__":
    main()
