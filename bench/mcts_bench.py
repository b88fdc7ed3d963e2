"""Speed of the batched search per expanded node, driver included, against the reference.

    NUMBA_NUM_THREADS=1 python bench/mcts_bench.py --batch=256 --actions=18 --simulations=50
    NUMBA_NUM_THREADS=2 python bench/mcts_bench.py --batch=256 --parallel
    NUMBA_NUM_THREADS=1 python bench/mcts_bench.py --root=gumbel   # also times pUCT: gumbel_over_puct=

The fake ``recurrent_fn`` returns rows of arrays drawn once before timing (rewards,
values and logits ~ N(0, 1); ``--value_scale=0`` makes rewards and values 0), so only
tree work and the Python driver are timed. Random values under min-max normalisation
make deep trees (mean node depth about 7.4 at S=50); flat values make shallow ones. One
expanded node is one (tree, simulation) pair: a run costs batch * simulations nodes.
Reports the median over ``--runs`` searches of wall-clock time (and of process CPU time,
which is steadier on a shared machine; with ``--root=gumbel`` the Gumbel and pUCT searches
alternate and ``gumbel_over_puct`` is the median of the per-pair ratios), then times the
plain-Python reference on ``--reference_batch`` trees with the same outputs and compares
per node.
Last line: ``us_per_node=<median wall> speedup_vs_reference=<x>``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("NUMBA_CACHE_DIR",
                      os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                   ".numba_cache"))

from muzero.mcts.config import SearchConfig  # noqa: E402
from muzero.mcts import RootOutputs, allocate_tree, search  # noqa: E402
from muzero.mcts.reference import run_gumbel_mcts, run_mcts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--actions", type=int, default=18)
    parser.add_argument("--simulations", type=int, default=50)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--parallel", action="store_true", help="prange over trees")
    parser.add_argument("--reference_batch", type=int, default=4)
    parser.add_argument("--reference_runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", choices=["puct", "gumbel"], default="puct",
                        help="root_selection; gumbel also times pUCT in the same run and prints "
                             "gumbel_over_puct=")
    parser.add_argument("--value_scale", type=float, default=1.0,
                        help="scale of the fake rewards and values; 0 gives flat values, "
                             "hence shallow, exploration-driven trees")
    args = parser.parse_args()
    batch, num_actions, sims = args.batch, args.actions, args.simulations

    rng = np.random.default_rng(args.seed)
    scale = args.value_scale
    rewards = (scale * rng.normal(size=(sims, batch))).astype(np.float32)     # [S, B]
    values = (scale * rng.normal(size=(sims, batch))).astype(np.float32)      # [S, B]
    logits = rng.normal(size=(sims, batch, num_actions)).astype(np.float32)   # [S, B, A]
    root = RootOutputs(rng.normal(size=batch).astype(np.float32),
                       rng.normal(size=(batch, num_actions)).astype(np.float32))

    def recurrent_fn(parent, action, new_node):
        row = new_node[0] - 1
        return rewards[row], values[row], logits[row]

    def searcher(config):
        """A function timing one search of ``config`` -> (wall s, CPU s, result); its first
        (compiling) call is made and reported here."""
        workspace = allocate_tree(batch, sims + 1, num_actions)
        started = time.perf_counter()
        search(root, recurrent_fn, config, rng, parallel=args.parallel, workspace=workspace)
        print(f"first_call_s={time.perf_counter() - started:.2f} root={config.root_selection}")

        def one():
            w0, c0 = time.perf_counter(), time.process_time()
            result = search(root, recurrent_fn, config, rng, parallel=args.parallel, workspace=workspace)
            return time.perf_counter() - w0, time.process_time() - c0, result
        return one

    nodes = batch * sims
    config = SearchConfig(num_simulations=sims, root_selection=args.root)
    runs = [searcher(config)]
    if args.root == "gumbel":   # pUCT in the same process, as the baseline
        runs.append(searcher(SearchConfig(num_simulations=sims)))
    # The searches alternate (Gumbel, pUCT, Gumbel, ...), so a change in the machine's speed
    # during the run reaches both; the ratio is the median of the per-pair ratios.
    times = [[] for _ in runs]
    for _ in range(args.runs):
        for one, out in zip(runs, times):
            out.append(one())
    wall = [np.array([t[0] for t in out]) / nodes * 1e6 for out in times]
    cpu = [np.array([t[1] for t in out]) / nodes * 1e6 for out in times]
    depths = [float(out[-1][2].tree.node_depth[:, 1:].mean()) for out in times]
    us_wall, us_cpu, depth = float(np.median(wall[0])), float(np.median(cpu[0])), depths[0]
    if args.root == "gumbel":
        puct_wall, puct_cpu, puct_depth = float(np.median(wall[1])), float(np.median(cpu[1])), depths[1]
        ratio_wall, ratio_cpu = float(np.median(wall[0] / wall[1])), float(np.median(cpu[0] / cpu[1]))

    # Reference: same outputs for its first trees, one tree at a time.
    ref_batch = min(args.reference_batch, batch)
    ref_times = []
    for _ in range(args.reference_runs):
        t0 = time.perf_counter()
        for b in range(ref_batch):
            def network(parent, action, new, b=b):
                return rewards[new - 1, b], values[new - 1, b], logits[new - 1, b], None
            if args.root == "gumbel":
                run_gumbel_mcts(config, float(root.value[b]), root.policy_logits[b], None, 0, network,
                                gumbel=rng.gumbel(size=num_actions))
            else:
                run_mcts(config, float(root.value[b]), root.policy_logits[b], None, 0, network,
                         noise=np.full(num_actions, 1.0 / num_actions))
        ref_times.append(time.perf_counter() - t0)
    us_ref = float(np.median(ref_times)) / (ref_batch * sims) * 1e6

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"batch={batch} actions={num_actions} simulations={sims} parallel={int(args.parallel)} "
          f"threads={os.environ.get('NUMBA_NUM_THREADS', 'default')} runs={args.runs}")
    print(f"mean_node_depth={depth:.2f} load_average_1min={load:.2f}")
    print(f"us_per_node_cpu={us_cpu:.3f} reference_us_per_node={us_ref:.2f}")
    if args.root == "gumbel":
        print(f"puct_us_per_node={puct_wall:.3f} puct_us_per_node_cpu={puct_cpu:.3f} "
              f"puct_mean_node_depth={puct_depth:.2f}")
        print(f"gumbel_over_puct={ratio_wall:.2f} gumbel_over_puct_cpu={ratio_cpu:.2f}")
    print(f"us_per_node={us_wall:.3f} speedup_vs_reference={us_ref / us_wall:.1f}")


if __name__ == "__main__":
    main()
