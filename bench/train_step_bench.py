"""MuZero training steps/s with the step compiled by XLA (``training.jit_compile``) and without.

    python bench/train_step_bench.py                                   # cartpole, MinAtar Breakout, Atari
    python bench/train_step_bench.py --envs=gym:LunarLander-v3         # needs the box2d extra
    python bench/train_step_bench.py --envs=cartpole,minatar:Breakout --steps=20 --repeats=5
    python bench/train_step_bench.py --envs=atari --preset=small_network   # a preset's network

For each env the network, batch size, unroll length and stacked frames are the learner's
defaults for it (``muzero.algorithms.muzero.defaults``; a ``gym:`` id gets its defaults
fitted to the env as the learner does, and ``atari`` is described without an ALE install
as 96 x 96 gray frames with 18 actions). One synthetic batch with valid targets is trained
on over and over by ``make_train_step`` with Adam, as ``Trainer.train`` does. Each setting
is traced and warmed up with three steps, then timed ``--repeats`` times over ``--steps``
steps, alternating with the other setting (and which goes first) so that drifts of the
machine's speed hit both alike; medians are reported. A step's loss is read back each time
(``float``), as the trainer does for its progress records.

Last lines (machine-readable), per env E (``:`` and ``-`` in the name become ``_``):
    steps_per_s_<E>_graph=<float>           tf.function without XLA (the default today)
    steps_per_s_<E>_xla=<float>             tf.function(jit_compile=True)
    speedup_<E>=<float>                     xla / graph
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import envs  # noqa: E402
from muzero.algorithms.muzero import defaults  # noqa: E402
from muzero.algorithms.muzero.learning import make_optimizer  # noqa: E402
from muzero.algorithms.muzero.network import make_network, make_train_step  # noqa: E402
from muzero.settings import replace_sections  # noqa: E402
from layer_skip_bench import ATARI, alternating_medians, synthetic_batch  # noqa: E402

def settings_for(env: str, preset: str = ""):
    """(descriptor, run settings) as the learner would use them, with ``preset``'s sections
    (``--preset``) over the defaults when one is named."""
    settings = defaults.run_defaults(env)
    descriptor = ATARI if env == "atari" else envs.describe(env)
    settings, _ = defaults.fit_run_defaults(settings, descriptor, {})
    if preset:
        reason = defaults.PRESETS[preset].refusal(descriptor)
        if reason:
            raise SystemExit(f"--preset={preset} {reason}; {env} is a {descriptor.kind} env")
        settings = replace_sections(settings, defaults.PRESETS[preset].sections)
    return descriptor, settings


def make_stepper(env: str, jit: bool, preset: str = ""):
    """A function running one training step of ``env``'s MuZero (its defaults, under
    ``preset`` when one is named) and returning its loss."""
    descriptor, settings = settings_for(env, preset)
    config = settings.config
    net = make_network(descriptor, config.network, config.targets.stack_frames, seed=0)
    optimizer = make_optimizer(config.training)
    optimizer.build(net.trainable_variables)
    train_step = make_train_step(net, optimizer, config.training, jit_compile=jit)
    rng = np.random.default_rng(0)
    batch = {k: tf.constant(v) for k, v in
             synthetic_batch(net, config.training.batch_size, rng, config.targets.num_unroll_steps).items()}

    def one():
        return float(train_step(batch)[0])

    for _ in range(3):   # trace (and compile) and warm up
        one()
    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default="cartpole,minatar:Breakout,atari",
                        help="comma-separated env names with MuZero defaults (the default ones need no extra "
                             "beyond make test's)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--preset", default="", help="time the network of this MuZero preset (of: "
                        f"{', '.join(sorted(defaults.PRESETS))}) instead of the env's default one")
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1")
    if args.preset and args.preset not in defaults.PRESETS:
        parser.error(f"--preset={args.preset!r}: known presets are {', '.join(sorted(defaults.PRESETS))}")
    results = []
    for env in [e for e in args.envs.split(",") if e]:
        start = time.perf_counter()
        graph, xla = alternating_medians(make_stepper(env, False, args.preset), make_stepper(env, True, args.preset),
                                         args.steps, args.repeats)
        results.append((re.sub(r"[^0-9A-Za-z]+", "_", env), graph, xla))
        print(f"{env}: graph {graph:.2f} steps/s, xla {xla:.2f} steps/s ({time.perf_counter() - start:.0f} s)",
              flush=True)
    for name, graph, xla in results:
        print(f"steps_per_s_{name}_graph={graph:.3f}")
        print(f"steps_per_s_{name}_xla={xla:.3f}")
        print(f"speedup_{name}={xla / graph:.3f}")


if __name__ == "__main__":
    main()
