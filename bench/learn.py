"""Learning benchmarks: full training runs of ``python -m muzero.learner``, any algorithm and env.

    python bench/learn.py [--algo=muzero|vtrace|ppo] --env=cartpole --seeds=3 [--minutes=10] [--target=475]
        One run per seed with a greedy evaluation actor; the evaluation return is the mean
        of the last 20 evaluation episodes. Per seed and then overall (medians) it prints
        minutes_to_target=, env_steps_to_target=, final_eval_return= (the evaluation
        return at the end of the budget) and solved_seeds=<k>/<n> as the last lines (a seed
        that never gets there counts as inf). For CartPole also minutes_to_195= and
        env_steps_to_195= and minutes_to_solve= (475). --target defaults per env: cartpole and
        gym:CartPole-v1 475, minatar:Breakout 10; other envs need --target. --stop_at_target ends a
        run as soon as it reaches the target (the time-to-target figures are unchanged).

    python bench/learn.py --env=cartpole --seeds=3 --minutes=6 --snapshot_every_s=15 -- --preset=few_env_steps --max_env_steps=2500
        Also exports the network every 15 s and, after each run, plays --snapshot_episodes
        greedy episodes with every export (a frozen snapshot, as LightZero's evaluator plays
        its policy between collections): snapshot_env_steps_to_target= (and for CartPole
        snapshot_env_steps_to_195=) is the env-step count of the first snapshot whose mean
        reaches it. --snapshot_every_env_steps=N (alone or with it) also exports each time the
        env-step count passes a multiple of N, so snapshots lie about N env steps apart whatever
        the pace (15 s is about 360 env steps at few_env_steps' pace). The progress line's
        evaluation mean (last 20 episodes of an actor playing the live network) trails the
        network: a 200-step episode credits its return to the moment it ends, and 20 of them
        are averaged.

    python bench/learn.py --algo=sac --env=reach --seeds=3 --minutes=5 [-- --set=training.her_relabels=0]
        Goal envs (hindsight relabelling): trains each seed for the whole budget, then plays
        100 episodes with the export and prints success_rate= (median) and
        success_seeds=<k>/<n> (seeds at >= 0.9) as the last lines.

    python bench/learn.py --env=tictactoe [--minutes=15]
        Trains, then plays 100 games against the perfect minimax player (50 as each side)
        with the exported SavedModel and prints losses=<n> (and wins, draws); also
        losing_lines=<lost>/<all>: the same model against every line the perfect player
        can choose (bench/ttt_exhaustive.py), which the 100 games sample from.

Each run writes its logdir under --root (default runs/bench); progress lines are echoed.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# minatar:Breakout: the MinAtar paper's DQN final training return, read from its curves
# (docs/MINATAR.md "Published baselines").
TARGETS = {"cartpole": 475.0, "gym:CartPole-v1": 475.0, "gym:Pendulum-v1": -200.0, "minatar:Breakout": 10.0}
SUCCESS_TARGET = 0.9       # goal envs: success rate of the exported policy over 100 episodes


def train(env: str, logdir: str, seed: int, minutes: float, extra: list, algo: str = "muzero",
          stop_at: float = None) -> None:
    """One learner run. With stop_at, the run is stopped (SIGINT: the learner checkpoints and
    exits cleanly) as soon as metrics.jsonl shows the evaluation mean reaching stop_at."""
    cmd = [sys.executable, "-m", "muzero.learner", f"--algo={algo}", f"--env={env}", f"--logdir={logdir}",
           f"--seed={seed}", f"--max_seconds={minutes * 60:g}", *extra]
    print("$", " ".join(cmd), flush=True)
    env_vars = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    env_vars.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    stopping = False
    for line in proc.stdout:
        if line.startswith(("[", "stopping", "done", "error", "resumed")):
            print(f"  seed {seed}: {line.rstrip()}", flush=True)
        if stop_at is not None and not stopping and line.startswith("["):
            metrics = os.path.join(logdir, "metrics.jsonl")
            if os.path.exists(metrics) and reached(records(logdir), stop_at)[0] < float("inf"):
                print(f"  seed {seed}: reached {stop_at:g}; stopping the run", flush=True)
                proc.send_signal(signal.SIGINT)
                stopping = True
    if proc.wait() != 0:
        raise SystemExit(f"learner failed for seed {seed} (exit {proc.returncode}); see {logdir}")


def records(logdir: str) -> list:
    """Parsed metrics.jsonl records; a line being written while we read is skipped."""
    out = []
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def reached(recs: list, threshold: float) -> tuple:
    """(minutes, env steps) of the first record whose evaluation mean (>= 20 episodes) is >=
    threshold; (inf, inf) if none."""
    for r in recs:
        if r.get("return_eval") is not None and r.get("episodes_eval", 0) >= 20 and r["return_eval"] >= threshold:
            return r["time"] / 60.0, float(r["env_steps"])
    return float("inf"), float("inf")


def minutes_to(recs: list, threshold: float) -> float:
    return reached(recs, threshold)[0]


def snapshot_returns(logdir: str, episodes: int, seed: int) -> list:
    """[(env_steps, training_step, mean_return)] of every export in ``logdir``, by env steps:
    each export (a frozen network) plays ``episodes`` greedy episodes."""
    from muzero.algorithms.policy_export import evaluate_policy, is_policy_export
    from muzero.algorithms.muzero.evaluator import evaluate, load_run
    root = os.path.join(logdir, "export")
    out = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if not name.startswith("step-"):
            continue
        path = os.path.join(root, name)
        run = load_run(path) or {}
        if "env_steps" not in run:
            continue
        play = evaluate_policy if is_policy_export(path) else evaluate
        result = play(path, episodes=episodes, num_envs=min(episodes, 10), seed=20_000 + seed)
        out.append((int(run["env_steps"]), int(run["training_step"]), float(result["mean_return"])))
    return sorted(out)


def first_snapshot(snapshots: list, threshold: float) -> float:
    """Env steps of the first snapshot whose mean return is >= threshold; inf if none."""
    return next((float(n) for n, _, r in snapshots if r >= threshold), float("inf"))


def learn(args) -> None:
    name = args.env.replace(":", "_").replace("/", "_")
    minutes, steps, to_195, steps_195, finals = [], [], [], [], []
    snap_target, snap_195 = [], []
    snapshots_on = bool(args.snapshot_every_s or args.snapshot_every_env_steps)
    exports = ["--export=false"] if not snapshots_on else ["--keep_exports=0"]
    if args.snapshot_every_s:
        exports.append(f"--export_every_secs={args.snapshot_every_s:g}")
    if args.snapshot_every_env_steps:
        exports.append(f"--export_every_env_steps={args.snapshot_every_env_steps}")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        logdir = os.path.join(args.root, f"{args.algo}-{name}-seed{seed}")
        shutil.rmtree(logdir, ignore_errors=True)
        train(args.env, logdir, seed, args.minutes, ["--num_eval_actors=1", *exports, *args.extra],
              algo=args.algo, stop_at=args.target if args.stop_at_target else None)
        if snapshots_on:
            start = time.time()
            snapshots = snapshot_returns(logdir, args.snapshot_episodes, seed)
            print(f"  seed {seed}: {len(snapshots)} snapshots played in {time.time() - start:.0f} s: " +
                  ", ".join(f"{r:.1f} at {n}" for n, _, r in snapshots), flush=True)
            snap_target.append(first_snapshot(snapshots, args.target))
            print(f"seed={seed} snapshot_env_steps_to_target={snap_target[-1]:.0f}", flush=True)
            if args.cartpole:
                snap_195.append(first_snapshot(snapshots, 195.0))
                print(f"seed={seed} snapshot_env_steps_to_195={snap_195[-1]:.0f}", flush=True)
        recs = records(logdir)
        m, n = reached(recs, args.target)
        minutes.append(m)
        steps.append(n)
        line = f"seed={seed} minutes_to_target={m:.2f} env_steps_to_target={n:.0f}"
        if args.cartpole:
            to_195.append(minutes_to(recs, 195.0))
            steps_195.append(reached(recs, 195.0)[1])
            line += f" minutes_to_195={to_195[-1]:.2f} env_steps_to_195={steps_195[-1]:.0f} minutes_to_solve={m:.2f}"
        finals.append(recs[-1].get("return_eval"))
        print(f"{line} final_eval_return={finals[-1]}", flush=True)
    solved = sum(m <= args.minutes for m in minutes)
    if args.cartpole:
        print(f"minutes_to_195={statistics.median(to_195):.2f}")
        print(f"env_steps_to_195={statistics.median(steps_195):.0f}")
        print(f"minutes_to_solve={statistics.median(minutes):.2f}")
    if snapshots_on:
        if args.cartpole:
            print(f"snapshot_env_steps_to_195={statistics.median(snap_195):.0f}")
        print(f"snapshot_env_steps_to_target={statistics.median(snap_target):.0f}")
    print(f"target={args.target:g}")
    print(f"minutes_to_target={statistics.median(minutes):.2f}")
    print(f"env_steps_to_target={statistics.median(steps):.0f}")
    known = [f for f in finals if f is not None]
    print(f"final_eval_return={statistics.median(known) if known else float('nan'):.2f}")
    print(f"solved_seeds={solved}/{args.seeds}")


def goal(args) -> None:
    """Goal envs: success rate of each seed's exported policy after the whole budget."""
    from muzero.algorithms.policy_export import evaluate_policy
    name = args.env.replace(":", "_").replace("/", "_")
    rates = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        logdir = os.path.join(args.root, f"{args.algo}-{name}-seed{seed}")
        shutil.rmtree(logdir, ignore_errors=True)
        train(args.env, logdir, seed, args.minutes, ["--num_eval_actors=1", *args.extra], algo=args.algo)
        with open(os.path.join(logdir, "checkpoints", "latest")) as f:
            step = f.read().strip().split("-")[1]
        result = evaluate_policy(os.path.join(logdir, "export", f"step-{step}"), episodes=100, num_envs=10,
                                 seed=10_000 + seed)
        rates.append(result["success_rate"])
        recs = records(logdir)
        print(f"seed={seed} success_rate={rates[-1]:.3f} mean_return={result['mean_return']:.2f} "
              f"env_steps={recs[-1]['env_steps']} training_step={recs[-1]['training_step']}", flush=True)
    print(f"success_rate={statistics.median(rates):.3f}")
    print(f"success_seeds={sum(r >= SUCCESS_TARGET for r in rates)}/{args.seeds}")


def tictactoe(args) -> None:
    logdir = os.path.join(args.root, "tictactoe")
    shutil.rmtree(logdir, ignore_errors=True)
    train("tictactoe", logdir, 0, args.minutes, list(args.extra))
    with open(os.path.join(logdir, "checkpoints", "latest")) as f:
        step = f.read().strip().split("-")[1]
    export_dir = os.path.join(logdir, "export", f"step-{step}")
    from muzero.algorithms.muzero.evaluator import evaluate
    from envs.tictactoe import MinimaxPlayer
    start = time.time()
    result = evaluate(export_dir, 100, num_envs=10, seed=0, opponent=MinimaxPlayer(seed=0).act)
    print(f"played 100 games in {time.time() - start:.0f}s: wins={result['wins']} draws={result['draws']} "
          f"losses={result['losses']} (as first player {result['losses_as_first']}, "
          f"as second {result['losses_as_second']})")
    from ttt_exhaustive import Agent, losing_lines
    agent = Agent(export_dir, None)
    lines = [losing_lines(agent, side)[:2] for side in (0, 1)]
    print(f"every perfect-player line: lost {lines[0][0]} of {lines[0][1]} as first player, "
          f"{lines[1][0]} of {lines[1][1]} as second (bench/ttt_exhaustive.py)")
    print(f"losing_lines={lines[0][0] + lines[1][0]}/{lines[0][1] + lines[1][1]}")
    print(f"losses={result['losses']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="muzero",
                        help="any registered algorithm: muzero, ppo, r2d2, sac, vtrace (default muzero)")
    parser.add_argument("--env", default="cartpole", help="any env the learner accepts (default cartpole); "
                        "tictactoe is judged against the perfect player instead")
    parser.add_argument("--target", type=float, default=None,
                        help=f"evaluation return to reach (defaults: {TARGETS}; required for other envs)")
    parser.add_argument("--seeds", type=int, default=3, help="training runs (default 3)")
    parser.add_argument("--first_seed", type=int, default=0, help="seeds first_seed, first_seed + 1, ...")
    parser.add_argument("--minutes", type=float, default=None,
                        help="wall-clock budget per run (default 10; 15 for tictactoe)")
    parser.add_argument("--stop_at_target", action="store_true",
                        help="end each run once it reaches --target (saves time; the final return is then "
                             "the return at the target, not after the whole budget)")
    parser.add_argument("--snapshot_every_s", type=float, default=0.0,
                        help="export every this many seconds and play each export afterwards "
                             "(snapshot_env_steps_to_* lines); 0 = off (default)")
    parser.add_argument("--snapshot_every_env_steps", type=int, default=0,
                        help="also export each time the env-step count passes a multiple of this and play "
                             "those exports too (snapshots at fixed env steps, as an evaluator run every N "
                             "collected steps); 0 = off (default)")
    parser.add_argument("--snapshot_episodes", type=int, default=10,
                        help="greedy episodes per snapshot (default 10)")
    parser.add_argument("--root", default=os.path.join(ROOT, "runs", "bench"), help="where logdirs go")
    parser.add_argument("extra", nargs="*", help="extra learner flags, after --, e.g. -- --simulations=50")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    if args.snapshot_every_s < 0 or args.snapshot_every_env_steps < 0 or args.snapshot_episodes < 1:
        parser.error("--snapshot_every_s and --snapshot_every_env_steps must be >= 0 and --snapshot_episodes >= 1")
    args.minutes = args.minutes or (15.0 if args.env == "tictactoe" else 10.0)
    sys.path.insert(0, ROOT)
    if args.env == "tictactoe":
        if args.algo != "muzero":
            parser.error("tictactoe is a two-player game: only --algo=muzero plays it")
        tictactoe(args)
        return
    import envs
    if envs.describe(args.env).goal_layout is not None:
        goal(args)
        return
    args.target = args.target if args.target is not None else TARGETS.get(args.env)
    if args.target is None:
        parser.error(f"--target is required for --env={args.env} (defaults exist for {', '.join(TARGETS)})")
    args.cartpole = args.env in TARGETS and TARGETS[args.env] == 475.0
    learn(args)


if __name__ == "__main__":
    main()
