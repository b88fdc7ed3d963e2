"""Actor scaling: env steps/s and inference batch sizes as actors are added, per launcher.

    python bench/scale.py [--launcher=ray] [--actors=1,2,4,8] [--seconds=40] [--env=cartpole]
                          [--algo=muzero] [--envs_per_actor=4] [--kills=0]

Runs ``python -m muzero.learner`` once per actor count (no evaluation actors, no export)
with the local launcher and, with --launcher=ray, again with the Ray launcher, and reads
each run's metrics.jsonl: env steps/s over the run after its first third (start-up and
compilation excluded), and the mean rows and requests per inference batch of every batched
server method over the same records. Prints one line per run, then key=value lines:
``<launcher>_env_steps_per_s_<n>=``, ``<launcher>_<method>_rows_<n>=`` and, with both
launchers, ``ray_over_local_<n>=`` (the ratio of env steps/s).

--kills=K (Ray only, on the largest actor count): kills an actor process K times (SIGKILL,
spread over the run once the first actor has joined) and times each from the kill to the
learner's "ray actor i is back" line; prints ``restart_s_median=`` and ``restart_s_max=``
(and ``restarts_seen=`` when fewer came back than were killed).

The learner flags after ``--`` are passed on; to time acting alone, keep training from
starting with a sampling threshold the run cannot reach:
``-- --set=replay.min_steps_to_sample=1000000``.

On a 2-core machine adding actors cannot add speed (the learner and every actor share the
two cores): the figures show each launcher's overhead and how inference batches grow with
actors, not a speed-up.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

from learn import ROOT, records


def run(launcher: str, actors: int, args, logdir: str, kills: int = 0) -> list:
    """One learner run; returns the kill-to-back times (seconds) of the kills made."""
    shutil.rmtree(logdir, ignore_errors=True)
    cmd = [sys.executable, "-m", "muzero.learner", f"--algo={args.algo}", f"--env={args.env}",
           f"--logdir={logdir}", f"--launcher={launcher}", f"--num_actors={actors}", "--num_eval_actors=0",
           f"--envs_per_actor={args.envs_per_actor}", f"--max_seconds={args.seconds:g}", "--export=false",
           *args.extra]
    print("$", " ".join(cmd), flush=True)
    env_vars = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    env_vars.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
    launched = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    pids: dict = {}          # actor index -> current pid
    killed: dict = {}        # actor index -> monotonic time of its kill, until it is back
    times: list = []
    lock = threading.Lock()

    def killer():
        # Kills spread evenly over the time left once the first actor has joined.
        while not pids and proc.poll() is None:
            time.sleep(0.2)
        started = time.monotonic()
        left = max(1.0, args.seconds - (started - launched))
        for k in range(kills):
            time.sleep(max(0.0, started + left * (k + 1) / (kills + 1) - time.monotonic()))
            with lock:
                candidates = [i for i in sorted(pids) if i not in killed]
                if not candidates:
                    continue
                index = candidates[k % len(candidates)]
                killed[index] = time.monotonic()
                pid = pids[index]
            print(f"  killing ray actor {index} (pid {pid})", flush=True)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    if kills:
        threading.Thread(target=killer, daemon=True).start()
    for line in proc.stdout:
        line = line.rstrip("\n")
        if line.startswith(("[", "stopping", "done", "error", "ray actor", "starting")):
            print(f"  {launcher}/{actors}: {line}", flush=True)
        if line.startswith("ray actor ") and (" joined: pid " in line or " as pid " in line):
            index = int(line.split()[2])
            pid = int(line.split(" pid ")[-1].split()[0])
            with lock:
                pids[index] = pid
                if index in killed and " is back" in line:
                    times.append(time.monotonic() - killed.pop(index))
    if proc.wait() != 0:
        raise SystemExit(f"learner failed ({launcher}, {actors} actors, exit {proc.returncode}); see {logdir}")
    return times


def summarise(logdir: str) -> dict:
    recs = [r for r in records(logdir) if "time" in r]
    if len(recs) < 3:
        raise SystemExit(f"{logdir}: too few progress records ({len(recs)}); raise --seconds")
    steady = [r for r in recs if r["time"] >= recs[-1]["time"] / 3] or recs[-2:]
    first, last = steady[0], steady[-1]
    out = {"env_steps_per_s": (last["env_steps"] - first["env_steps"]) / max(last["time"] - first["time"], 1e-9)}
    for key in sorted({k for r in steady for k in r if k.startswith("inference/")}):
        values = [r[key] for r in steady if key in r and r[key] > 0]
        if values:
            method, stat = key[len("inference/"):].rsplit("/", 1)
            out[f"{method}_{stat.replace('mean_batch_', '')}"] = statistics.mean(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launcher", choices=["local", "ray"], default="local",
                        help="ray: measure the Ray launcher beside the local one")
    parser.add_argument("--actors", default="1,2,4,8", help="comma-separated actor counts")
    parser.add_argument("--seconds", type=float, default=40.0, help="wall time of each run")
    parser.add_argument("--env", default="cartpole")
    parser.add_argument("--algo", default="muzero")
    parser.add_argument("--envs_per_actor", type=int, default=4)
    parser.add_argument("--kills", type=int, default=0, help="Ray: actor kills in the largest run")
    parser.add_argument("--root", default=os.path.join("runs", "bench", "scale"))
    parser.add_argument("extra", nargs="*", help="extra learner flags, after --")
    args = parser.parse_args()
    counts = [int(n) for n in args.actors.split(",")]
    if not counts or min(counts) < 1:
        parser.error("--actors must be positive integers, e.g. 1,2,4,8")
    if args.kills and args.launcher != "ray":
        parser.error("--kills needs --launcher=ray")
    launchers = ["local", "ray"] if args.launcher == "ray" else ["local"]
    results: dict = {}
    restart_times: list = []
    for launcher in launchers:
        for n in counts:
            logdir = os.path.join(args.root, f"{launcher}-{n}")
            kills = args.kills if launcher == "ray" and n == max(counts) else 0
            restart_times += run(launcher, n, args, logdir, kills)
            results[launcher, n] = summary = summarise(logdir)
            print(f"launcher={launcher} actors={n} " + " ".join(f"{k}={v:.1f}" for k, v in summary.items()),
                  flush=True)
    for (launcher, n), summary in results.items():
        for key, value in summary.items():
            print(f"{launcher}_{key}_{n}={value:.1f}")
    if len(launchers) == 2:
        for n in counts:
            ratio = results["ray", n]["env_steps_per_s"] / max(results["local", n]["env_steps_per_s"], 1e-9)
            print(f"ray_over_local_{n}={ratio:.2f}")
    if args.kills:
        if len(restart_times) < args.kills:
            print(f"restarts_seen={len(restart_times)}/{args.kills}")
        print(f"restart_s_median={statistics.median(restart_times) if restart_times else float('inf'):.2f}")
        print(f"restart_s_max={max(restart_times) if restart_times else float('inf'):.2f}")


if __name__ == "__main__":
    main()
