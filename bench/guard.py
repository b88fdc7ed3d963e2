"""Speed and learning guard: the short benchmarks, side by side with a baseline commit.

    python bench/guard.py --baseline=HEAD~5                 # everything, 5 runs a side
    python bench/guard.py --baseline=12d2bd6 --only=search,serving --runs=7
    make bench-guard BASELINE=12d2bd6

Each benchmark below runs through ``bench/compare.py`` (alternating, each side in its own
worktree and Numba cache) and is judged on one direction per metric. A metric *fell* when
the candidate's median is worse than every baseline run and by more than ``--tolerance``
(default 5 %): on this 2-core machine a single search run spreads by about 30 %, so a
fall inside the baseline's own range is noise. The last lines name what fell, or say
that nothing did; the exit status is 1 when something fell.

    search         NUMBA_NUM_THREADS=1 bench/mcts_bench.py, A=18, S=50, B=256: us_per_node (lower)
    serving        bench/server_bench.py, 4 clients x 256 leaves, latent 64 and 6x6x64: leaves_per_s
    policy         bench/policy_server_bench.py, 4 clients x 256 CartPole envs: env_steps_per_s
    train_step     bench/train_step_bench.py, CartPole and MinAtar Breakout networks: steps_per_s (graph)
    cartpole       bench/learn.py, MuZero CartPole defaults, seed 0, 6 minutes: minutes_to_target (lower)

Run it alone on the machine (a test suite or a training run beside it moves every figure).
It is not part of CI: timings there are noise. With 5 runs a side the whole guard takes
about an hour, most of it the CartPole runs (``--only`` without cartpole: ~15 minutes).
"""
from __future__ import annotations

import argparse
import fnmatch
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare import CompareError, compare, table  # noqa: E402

# name: (environment, command, {metric pattern: "higher" or "lower" is better})
SUITE = {
    "search": ({"NUMBA_NUM_THREADS": "1"},
               ["python", "bench/mcts_bench.py", "--batch=256", "--actions=18", "--simulations=50"],
               {"us_per_node": "lower"}),
    "serving": ({}, ["python", "bench/server_bench.py", "--clients=4", "--leaves=256", "--direct=0"],
                {"leaves_per_s*": "higher"}),
    "policy": ({}, ["python", "bench/policy_server_bench.py", "--clients=4", "--envs=256", "--seconds=10"],
               {"env_steps_per_s": "higher"}),
    "train_step": ({}, ["python", "bench/train_step_bench.py", "--envs=cartpole,minatar:Breakout", "--steps=20",
                        "--repeats=3"],
                   {"steps_per_s_*_graph": "higher"}),
    "cartpole": ({}, ["python", "bench/learn.py", "--env=cartpole", "--seeds=1", "--minutes=6", "--stop_at_target"],
                 {"minutes_to_target": "lower"}),
}


def fell(summary: dict, better: str, tolerance: float) -> bool:
    """True when the candidate's median is worse than every baseline run by more than
    ``tolerance`` (relative to the baseline's median)."""
    base, cand = summary["baseline_median"], summary["candidate_median"]
    if better == "higher":
        worse_than_all = cand < summary["baseline_min"]
        margin = (base - cand) / abs(base) if base else math.inf
    else:
        worse_than_all = cand > summary["baseline_max"]
        margin = (cand - base) / abs(base) if base and math.isfinite(base) else (0.0 if cand == base else math.inf)
    return worse_than_all and margin > tolerance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="commit to guard against (hash, tag, HEAD~N)")
    parser.add_argument("--candidate", default=None, help="commit to check (default: this working tree)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each side per benchmark (default 5, at least 3)")
    parser.add_argument("--only", default=",".join(SUITE), help=f"comma-separated subset of {', '.join(SUITE)}")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="relative fall beyond the baseline's range that counts (default 0.05)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(SUITE)}")
    if args.runs < 3 or args.tolerance < 0:
        parser.error("--runs must be >= 3 (fewer runs give the baseline no spread to judge a fall by) "
                     "and --tolerance >= 0")
    falls = []
    for name in names:
        env, command, directions = SUITE[name]
        print(f"== {name}: {' '.join(command)}", flush=True)
        try:
            results = compare(args.baseline, command, args.runs, args.candidate, list(directions), env,
                              echo=lambda line: print("  " + line, flush=True))
        except CompareError as e:
            raise SystemExit(f"error: {name}: {e}") from None
        print(table(results), flush=True)
        for metric, summary in results.items():
            better = next(d for p, d in directions.items() if fnmatch.fnmatch(metric, p))
            if fell(summary, better, args.tolerance):
                falls.append(f"{name}: {metric} {summary['baseline_median']:.4g} -> {summary['candidate_median']:.4g} "
                             f"(ratio {summary['ratio']:.3f}, {better} is better)")
    if falls:
        print("fell by more than the noise:")
        for line in falls:
            print("  " + line)
        raise SystemExit(1)
    print(f"nothing fell by more than the noise ({', '.join(names)}; {args.runs} runs a side)")


if __name__ == "__main__":
    main()
