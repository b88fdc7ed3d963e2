"""Gymnasium's classic control tasks and LunarLander with the fitted defaults, nothing else.

    python bench/control_suite.py [--seeds=3] [--tasks=gym:Acrobot-v1,gym:CartPole-v1] [--root=runs/bench/control]

Runs ``python -m muzero.learner --env=<id>`` with no flag beyond the env id (and the bench's
own logdir, seed and time limit) for each task and seed, stopping a run when its evaluation
mean (20 greedy episodes) reaches the task's target or its minutes run out. Prints per run
``task= seed= minutes_to_target= env_steps_to_target= best_eval=`` and then one table row
per task: seeds that reached the target within its minutes, the median minutes and env
steps, and the reference figure beside it. Run it alone on the machine; the whole suite
with three seeds takes up to about four hours on two cores (each task stops early once
its target is reached).

Targets and minutes are the goals the package holds itself to; the reference column is
rl-baselines3-zoo's published result for the task (its benchmark table), where one is known.
"""
import argparse
import math
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learn import reached, records, train  # noqa: E402

# task: (target evaluation mean, minutes, reference)
TASKS = {
    "gym:CartPole-v1": (475.0, 5.0, "rl-zoo DQN / PPO: 500 at 50k / 100k env steps"),
    "gym:Acrobot-v1": (-100.0, 10.0, "rl-zoo DQN-family: about -75 within 100k env steps"),
    "gym:LunarLander-v3": (200.0, 30.0, "rl-zoo DQN 154 +- 79 at 100k; PPO 242 +- 32 at 1M"),
    "gym:MountainCar-v0": (-120.0, 30.0, "rl-zoo DQN: -103 +- 7 at 120k env steps"),
}


def best_eval(recs: list) -> float:
    values = [r["return_eval"] for r in recs if r.get("return_eval") is not None and r.get("episodes_eval", 0) >= 20]
    return max(values) if values else float("nan")


def median(values: list) -> float:
    return statistics.median(values) if values else math.inf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated task ids (of: %(default)s)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first_seed", type=int, default=0)
    parser.add_argument("--root", default=os.path.join("runs", "bench", "control"))
    args = parser.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"--tasks: unknown {', '.join(unknown)}; known: {', '.join(TASKS)}")
    rows = []
    for task in tasks:
        target, minutes, reference = TASKS[task]
        results = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            logdir = os.path.join(args.root, f"{task.replace(':', '_').replace('/', '_')}-seed{seed}")
            shutil.rmtree(logdir, ignore_errors=True)
            train(task, logdir, seed, minutes, [], stop_at=target)
            recs = records(logdir)
            m, n = reached(recs, target)
            results.append((m, n))
            print(f"task={task} seed={seed} minutes_to_target={m:.2f} env_steps_to_target={n:.0f} "
                  f"best_eval={best_eval(recs):.1f}", flush=True)
        solved = [(m, n) for m, n in results if m <= minutes]
        rows.append(f"| {task} | {target:g} in {minutes:g} min | {len(solved)} of {len(results)} | "
                    f"{median([m for m, _ in results]):.1f} | {median([n for _, n in results]):,.0f} | {reference} |")
    print("| task | goal | seeds reaching it | median minutes | median env steps | reference |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
