"""Offline pretraining on a recorded dataset, then fine-tuning, against training from scratch.

    python bench/offline_finetune.py --env=cartpole --export_dir=runs/weak --episodes=50 --epsilon=0.25 \\
        --offline_steps=3000 --seeds=3 --minutes=6 --target=475 [--root=runs/bench/offline]
    python bench/offline_finetune.py --env=minatar:Breakout --export_dir=runs/weak_breakout --steps=100000 \\
        --epsilon=0.25 --offline_steps=3000 --seeds=1 --minutes=30 --target=10 --goal_ratio=0.5 --live

1. **dataset**: ``python -m muzero.record`` plays ``--export_dir`` (a policy weaker than the
   target) for ``--episodes`` episodes (or ``--steps`` env steps of complete episodes) with
   ``--epsilon`` random moves into a Minari dataset under ``<root>/minari``; its mean
   return is the dataset's.
2. **offline**: ``python -m muzero.learner --dataset=<it> --preset=offline
   --max_train_steps=<offline_steps>`` (no env steps); its export is played for 20 greedy
   episodes: ``offline_return``.
3. per seed, **scratch**: the env's defaults until the evaluation mean reaches ``--target``
   (at most ``--minutes``), and **fine-tune**: the same command with
   ``--init_checkpoint=<the offline run> --dataset=<it> --set=targets.reanalyse_fraction=0.5``
   (the recorded actions are a weaker policy's: without reanalysis their one-hot targets pull
   the policy back toward it). With ``--live`` a run's figure is the env steps at which its
   live evaluation mean (20 episodes) first reaches the target. Otherwise both export a
   snapshot every ``--snapshot_every_env_steps`` env steps; each snapshot plays 10 greedy episodes afterwards, and a run's figure is the
   env steps of its first snapshot whose mean reaches the target. (The live evaluation
   actor cannot time this: for a policy that already plays 500-step episodes, its first
   20-episode mean arrives only after tens of thousands of training env steps.)

Last lines: ``dataset_return=``, ``offline_return=``, ``offline_minutes=`` (the offline
run's wall time), per seed ``scratch_env_steps=``, ``finetune_env_steps=``, ``ratio=`` and
the minutes each run's live evaluation mean (20 episodes) first reached the target, then
``median_ratio=`` and ``goal_seeds=<k>/<n>`` (seeds whose ratio is <= ``--goal_ratio``,
default 0.3). Run it alone on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learn import ROOT, first_snapshot, reached, records, snapshot_returns, train  # noqa: E402


def _run(module: str, args: list, env: dict) -> str:
    cmd = [sys.executable, "-m", module, *args]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{module} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def _mean_return(stdout: str) -> float:
    return float(re.findall(r"mean_return=([-\d.]+)", stdout)[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="cartpole")
    parser.add_argument("--export_dir", required=True, help="the (weaker) policy that plays the dataset")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--steps", type=int, default=0, help="if > 0: record this many env steps instead")
    parser.add_argument("--epsilon", type=float, default=0.25)
    parser.add_argument("--offline_steps", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first_seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--goal_ratio", type=float, default=0.3)
    parser.add_argument("--snapshot_every_env_steps", type=int, default=5000)
    parser.add_argument("--live", action="store_true",
                        help="a run's figure is the env steps at which its live evaluation mean first reaches "
                             "the target (no snapshots); for envs with short episodes such as MinAtar")
    parser.add_argument("--root", default=os.path.join("runs", "bench", "offline"))
    parser.add_argument("--reuse", action="store_true",
                        help="keep --root's dataset and offline run from an earlier call (its summary.json) and run "
                             "only the seeds")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    summary_path = os.path.join(root, "summary.json")
    if args.reuse and not os.path.isfile(summary_path):
        raise SystemExit(f"--reuse: {summary_path} not found (run once without --reuse)")
    if not args.reuse:
        shutil.rmtree(root, ignore_errors=True)
    env = dict(os.environ, MINARI_DATASETS_PATH=os.path.join(root, "minari"), TF_CPP_MIN_LOG_LEVEL="2")
    os.environ["MINARI_DATASETS_PATH"] = env["MINARI_DATASETS_PATH"]   # for the learner runs below
    dataset_id = "bench/recorded-v0"
    offline = os.path.join(root, "offline")
    if args.reuse:
        with open(summary_path) as f:
            summary = json.load(f)
        dataset_return, offline_return, offline_minutes = (summary["dataset_return"], summary["offline_return"],
                                                           summary["offline_minutes"])
    else:
        out = _run("muzero.record", [f"--export_dir={args.export_dir}", f"--episodes={args.episodes}",
                                     f"--steps={args.steps}", f"--epsilon={args.epsilon}", f"--out={dataset_id}"], env)
        dataset_return = _mean_return(out)
        print(out.strip().splitlines()[-1], flush=True)
        start = time.time()
        _run("muzero.learner", [f"--env={args.env}", f"--dataset={dataset_id}", "--preset=offline",
                                f"--max_train_steps={args.offline_steps}", f"--logdir={offline}"], env)
        offline_minutes = (time.time() - start) / 60.0
        offline_return = _mean_return(_run("muzero.eval", [f"--export_dir={offline}", "--episodes=20"], env))
        with open(summary_path, "w") as f:
            json.dump({"dataset_return": dataset_return, "offline_return": offline_return,
                       "offline_minutes": offline_minutes}, f)
    print(f"dataset_return={dataset_return:.1f} offline_return={offline_return:.1f} "
          f"offline_minutes={offline_minutes:.1f}", flush=True)
    ratios = []
    snapshots = [] if args.live else [f"--export_every_env_steps={args.snapshot_every_env_steps}", "--keep_exports=0"]
    finetune_flags = [f"--init_checkpoint={offline}", f"--dataset={dataset_id}", "--set=targets.reanalyse_fraction=0.5"]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        steps, minutes = {}, {}
        for name, extra in (("scratch", []), ("finetune", finetune_flags)):
            logdir = os.path.join(root, f"{name}_seed{seed}")
            train(args.env, logdir, seed, args.minutes, extra + snapshots, stop_at=args.target)
            minutes[name], steps[name] = reached(records(logdir), args.target)
            if not args.live:
                played = snapshot_returns(logdir, episodes=10, seed=seed)
                print(f"seed={seed} {name} snapshots (env steps, return): "
                      + " ".join(f"{n}:{r:.0f}" for n, _, r in played), flush=True)
                steps[name] = first_snapshot(played, args.target)
        s_steps, f_steps = steps["scratch"], steps["finetune"]
        ratio = f_steps / s_steps if s_steps < float("inf") else float("nan")
        ratios.append(ratio)
        print(f"seed={seed} scratch_env_steps={s_steps} finetune_env_steps={f_steps} ratio={ratio:.3f} "
              f"scratch_minutes={minutes['scratch']:.1f} finetune_minutes={minutes['finetune']:.1f}", flush=True)
    print(f"dataset_return={dataset_return:.1f}")
    print(f"offline_return={offline_return:.1f}")
    print(f"offline_minutes={offline_minutes:.1f}")
    print(f"median_ratio={statistics.median(ratios):.3f}")
    print(f"goal_seeds={sum(r <= args.goal_ratio for r in ratios)}/{len(ratios)}")


if __name__ == "__main__":
    main()
