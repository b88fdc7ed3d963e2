"""How a run's frozen exports play with more or less search.

    python bench/snapshot_search.py --logdir=runs/bench/few19_vl025/muzero-cartpole-seed2 --variants=max_depth=1,max_depth=2,num_simulations=200 --no_tree
        Every export under <logdir>/export (``--export_every_secs``; bench/learn.py
        --snapshot_every_s writes them) plays --episodes greedy episodes with the run's own
        search settings ("run") and with each variant: search fields replaced, several in one
        variant joined by '+' (max_depth=2+num_simulations=16). --no_tree adds two players
        without a tree (one-player vector envs): "prior" plays the policy head's argmax and
        "lookahead" the argmax over actions of the model's reward plus the search discount
        times its value of the next hidden state (a one-step lookahead). Every player starts
        from the same states (the same env seed). Prints one line per export, by env steps,
        then mean_<player>= (the mean over exports) as the last lines.

It tells whether a run's greedy snapshots are held back by the search or by the model
(docs/RESULTS.md, "Learning: few_env_steps preset").
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_variants(text: str, base) -> list:
    """'a=1+b=2,c=3' -> [(name, SearchConfig)]: ``base`` with each variant's fields replaced,
    checked as ``python -m muzero.eval --set`` checks them."""
    from muzero.algorithms.muzero.evaluator import override_search
    out = []
    for variant in filter(None, text.split(",")):
        try:
            out.append((variant, override_search(base, items=[f"search.{item}" for item in variant.split("+")])))
        except ValueError as err:   # ConfigError is a ValueError
            raise SystemExit(f"--variants: {variant!r}: {err}")
    return out


def play_without_tree(export_dir: str, run: dict, mode: str, episodes: int, seed: int, discount: float) -> float:
    """Mean return of ``episodes`` episodes played by the export's policy head ("prior") or a
    one-step lookahead on its model ("lookahead"), envs seeded as muzero.eval seeds them;
    ``run`` is the export's run.json."""
    import tensorflow as tf
    import envs
    from muzero.algorithms.muzero.evaluator import load_saved_model
    descriptor = envs.describe(run["env"], **run.get("env_options", {}))
    if descriptor.is_image or descriptor.two_player:
        raise SystemExit("--no_tree plays one-player vector envs only")
    model = load_saved_model(export_dir)
    initial, recurrent = model.signatures["initial_inference"], model.signatures["recurrent_inference"]
    num_envs, num_actions = min(episodes, 10), descriptor.num_actions
    batch = envs.make_batch(run["env"], num_envs, seed=seed, **run.get("env_options", {}))
    step, returns = batch.reset(), []
    while len(returns) < episodes:
        root = initial(observation=tf.constant(step.observation.astype(np.float32)))
        if mode == "prior":
            scores = root["policy_logits"].numpy()
        else:   # every env's hidden state once per action: [E * A]
            hidden = tf.repeat(root["hidden_state"], num_actions, axis=0)
            actions = tf.constant(np.tile(np.arange(num_actions, dtype=np.int32), num_envs))
            out = recurrent(hidden_state=hidden, action=actions)
            scores = (out["reward"].numpy() + discount * out["value"].numpy()).reshape(num_envs, num_actions)
        scores = np.where(step.legal_mask, scores, -np.inf)
        step = batch.step(np.argmax(scores, axis=1).astype(np.int32))
        returns += [float(step.episode_return[i]) for i in np.flatnonzero(step.episode_length >= 0)]
    batch.close()
    return float(np.mean(returns[:episodes]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", required=True, help="a run's --logdir (holds export/step-*)")
    parser.add_argument("--variants", default="", help="comma-separated search variants, e.g. max_depth=1,num_simulations=16")
    parser.add_argument("--no_tree", action="store_true", help="also play the prior's argmax and a one-step lookahead")
    parser.add_argument("--episodes", type=int, default=10, help="greedy episodes per export and player (default 10)")
    parser.add_argument("--seed", type=int, default=20_000, help="env seed (default 20000, as bench/learn.py's seed 0)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be >= 1")
    from muzero.algorithms.muzero.evaluator import evaluate, load_run, search_config_from_run
    root = os.path.join(args.logdir, "export")
    if not os.path.isdir(root):
        parser.error(f"{root} does not exist: train with --export_every_secs (bench/learn.py --snapshot_every_s)")
    exports = []
    for name in os.listdir(root):
        run = load_run(os.path.join(root, name)) if name.startswith("step-") else None
        if run and "env_steps" in run and "search" in run:
            exports.append((int(run["env_steps"]), int(run["training_step"]), os.path.join(root, name), run))
    if not exports:
        parser.error(f"no export under {root} records its env steps and search settings")
    exports.sort()
    parse_variants(args.variants, search_config_from_run(exports[0][3]))   # bad variants fail before any play
    results: dict = {}
    for env_steps, training_step, path, run in exports:
        base = search_config_from_run(run)
        row = {"run": evaluate(path, episodes=args.episodes, num_envs=min(args.episodes, 10),
                               seed=args.seed)["mean_return"]}
        for name, config in parse_variants(args.variants, base):
            row[name] = evaluate(path, episodes=args.episodes, num_envs=min(args.episodes, 10), seed=args.seed,
                                 search_config=config)["mean_return"]
        if args.no_tree:
            for mode in ("prior", "lookahead"):
                row[mode] = play_without_tree(path, run, mode, args.episodes, args.seed, base.discount)
        for name, value in row.items():
            results.setdefault(name, []).append(value)
        print(f"env_steps {env_steps} (training step {training_step}): "
              + "  ".join(f"{name} {value:.1f}" for name, value in row.items()), flush=True)
    for name, values in results.items():
        print(f"mean_{name}={statistics.mean(values):.1f}")


if __name__ == "__main__":
    main()
