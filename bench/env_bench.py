"""Environment stepping speed: env steps per second for an EnvBatch with random legal actions.

    python bench/env_bench.py --env=atari --envs=16 [--steps=300] [--runs=5]

For Atari it times both batch implementations in the same run: ale-py's C++ vector env
(``vectorized=True``) and a Python loop over single ``AtariEnv``s, and prints the ratio.
The last line is ``env_steps_per_s=<median>`` of the default implementation.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import envs  # noqa: E402


def steps_per_second(batch, steps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    step = batch.reset()
    e = batch.num_envs
    start = time.perf_counter()
    for _ in range(steps):
        # Random legal action per env: uniform over the mask (vectorised).
        scores = rng.random(step.legal_mask.shape) * step.legal_mask
        step = batch.step(scores.argmax(axis=1))
    return e * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="atari", help="registry name (default atari)")
    parser.add_argument("--envs", type=int, default=16, help="envs per batch (default 16)")
    parser.add_argument("--steps", type=int, default=300, help="batch steps per run (default 300)")
    parser.add_argument("--runs", type=int, default=5, help="runs; the median is reported (default 5)")
    args = parser.parse_args()
    if args.envs < 1 or args.steps < 1 or args.runs < 1:
        parser.error("--envs, --steps and --runs must be >= 1")

    variants = {"default": {}}
    if args.env == "atari":
        variants = {"vectorized": {"vectorized": True}, "loop": {"vectorized": False}}
    medians = {}
    for label, options in variants.items():
        batch = envs.make_batch(args.env, args.envs, seed=0, **options)
        steps_per_second(batch, 10, 0)  # warm up
        figures = [steps_per_second(batch, args.steps, run) for run in range(args.runs)]
        batch.close()
        medians[label] = statistics.median(figures)
        print(f"variant={label} env={args.env} envs={args.envs} "
              f"runs={' '.join(f'{f:.0f}' for f in figures)} median={medians[label]:.0f}", flush=True)
    if args.env == "atari":
        print(f"vectorized_over_loop={medians['vectorized'] / medians['loop']:.2f}")
    default = medians.get("vectorized", medians.get("default"))
    print(f"env_steps_per_s={default:.0f}")


if __name__ == "__main__":
    main()
