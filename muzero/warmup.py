"""``python -m muzero.warmup``: compiles the package's Numba kernels into the on-disk cache.

Numba compiles a kernel the first time it is called and, with ``cache=True``, stores the
machine code under ``NUMBA_CACHE_DIR`` (``make`` sets ``.numba_cache/``); later processes
load it in a fraction of a second. On a fresh clone nothing is cached, and the first
processes to search or sample pay the compile instead: about a minute of one core for
the search kernels (pUCT and Gumbel, serial and the ``prange`` variants) and the replay's
target kernels, paid in each actor process that starts before the cache is written.

This module does that work once, up front, one process per group of kernels and as many
processes at a time as ``--jobs`` (default: the CPU cores), so a 2-core machine compiles
in about half the time. Each group is compiled by calling the public code paths
(``search``; an algorithm's replay sampling) on tiny inputs with the argument types those paths
always pass, so the cached signatures are the ones training uses. ``make test`` and
``make train`` run it first; with a warm cache it takes about a second.

Prints one line per group (``compiled <group> in <s> s``) and a last line
``warmup_s=<total>``. Imports NumPy and Numba, never TensorFlow.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import multiprocessing
import os
import sys
import time

import numpy as np

# The search kit's groups in the order their compile is longest first (measured on a cold
# cache), so that a pool hands the long ones out first and the short ones fill in beside
# them; then each algorithm's own (``Builder.numba_warmups``), as ``<algo>_<group>``.
SEARCH_GROUPS = ("puct_serial", "gumbel_parallel", "gumbel_serial", "puct_parallel")


def _algorithm_groups() -> dict:
    """{"<algo>_<group>": "module:function"} of every algorithm's Numba warm-ups."""
    from muzero import algorithms
    return {f"{name}_{group}": target for name in algorithms.names()
            for group, target in algorithms.get(name).numba_warmups.items()}


GROUPS = SEARCH_GROUPS + tuple(_algorithm_groups())


def _search(root_selection: str, parallel: bool, readonly: bool) -> None:
    """One small search. ``readonly``: the network outputs are read-only arrays, as an actor's
    are (the gRPC client decodes them as ``np.frombuffer`` views), which Numba compiles as
    other argument types than the writable arrays of in-process callers."""
    from muzero.mcts.config import SearchConfig
    from muzero.mcts import RootOutputs, search

    batch, actions, sims = 2, 3, 4
    config = SearchConfig(num_simulations=sims, root_selection=root_selection, max_num_considered_actions=2)

    def outputs(*shapes):
        arrays = [np.zeros(shape, np.float32) for shape in shapes]
        for array in arrays:
            array.flags.writeable = not readonly
        return arrays
    value, logits = outputs(batch, (batch, actions))
    root = RootOutputs(value=value, policy_logits=logits, legal_mask=np.ones((batch, actions), bool),
                       to_play=np.zeros(batch, np.int32))

    def recurrent_fn(parent, action, node):
        return (*outputs(batch, batch, (batch, actions)), np.ones((batch, actions), bool))
    search(root, recurrent_fn, config, np.random.default_rng(0), parallel=parallel)


def compile_group(group: str) -> float:
    """Compiles (or loads from the cache) one group of kernels; returns the seconds it took."""
    start = time.perf_counter()
    algorithm_groups = _algorithm_groups()
    if group in algorithm_groups:
        module, function = algorithm_groups[group].split(":")
        getattr(importlib.import_module(module), function)()
    elif group in SEARCH_GROUPS:
        root_selection, mode = group.split("_")
        # Actors (read-only outputs) search serially; in-process callers pass writable arrays.
        for readonly in ((False,) if mode == "parallel" else (False, True)):
            _search(root_selection, mode == "parallel", readonly)
    else:
        raise ValueError(f"unknown kernel group {group!r}; known: {', '.join(GROUPS)}")
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m muzero.warmup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes compiling at once (default: the CPU cores)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs={args.jobs} must be >= 1")
    start = time.perf_counter()
    cache = os.environ.get("NUMBA_CACHE_DIR", "__pycache__ beside each source file")
    print(f"compiling Numba kernels into {cache} ({args.jobs} process(es))", flush=True)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(args.jobs, len(GROUPS)),
                                                mp_context=context) as pool:
        futures = {pool.submit(compile_group, group): group for group in GROUPS}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            print(f"compiled {futures[future]} in {future.result():.1f} s ({done}/{len(GROUPS)})", flush=True)
    print(f"warmup_s={time.perf_counter() - start:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
