"""Sustained load on a MuZero learner's server: errors, server memory growth, call latency.

    python bench/load.py --clients=64 --seconds=300      # smoke: --clients=8 --seconds=20

Starts ``python -m muzero.learner --env=cartpole --num_actors=0 --num_eval_actors=0``
(replay.min_steps_to_sample=200, the replay's rate limiter off so pushes never wait on
training), pushes 400 steps and waits for the first training steps, then ``--clients`` InferenceClients on loopback, ``--clients_per_process`` threads
per process. Each client loops: register (same actor id and run id every time, so each
register supersedes the client's previous lease at once) -> initial_inference of
``--envs`` envs -> ``--recurrent`` recurrent_inference calls -> with probability
``--push_prob`` push one small valid CartPole segment and call learner_info.

Measures: errors (any exception a client sees, each followed by a fresh client), the
learner's resident memory (VmRSS of /proc/<pid>/status) at the end of the warm-up (the
first ``--warmup_frac`` of the time) and at the end, and the per-call latency (every call,
after the warm-up) p50 / p99. Last lines: per-method call counts and latencies, the
learner's training step, then ``errors=0 rss_growth_pct=... p99_ms=... calls=...``.
Goal: no errors, RSS growth under 5 % after the warm-up.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

METHODS = ("register", "initial_inference", "recurrent_inference", "push_segments", "learner_info")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def segment(rng, t: int, num_actions: int, obs_shape: tuple) -> dict:
    p = np.full((t, num_actions), 1.0 / num_actions, np.float32)
    return {"episode_id": np.int64(rng.integers(1, 2**62)), "start": np.int64(0),
            "observations": (rng.normal(size=(t, *obs_shape)) * 0.1).astype(np.float32),
            "actions": rng.integers(0, num_actions, t).astype(np.int32),
            "rewards": np.ones(t, np.float32), "root_values": rng.uniform(0, 20, t).astype(np.float32),
            "policies": p, "to_play": np.zeros(t, np.int8),
            "terminated": np.bool_(True), "truncated": np.bool_(False)}


def client_loop(address, actor_id, args, t_start, t_warm, t_end, out):
    """One client thread; appends (method, start time, seconds) to out["lat"], errors to out["err"]."""
    from muzero.algorithms.muzero.client import InferenceClient
    from muzero.rpc.config import ClientConfig

    rng = np.random.default_rng(actor_id)
    e, sims = args.envs, args.recurrent
    lat = out["lat"]
    client = None
    while time.time() < t_end:
        try:
            if client is None:
                client = InferenceClient(address, actor_id=actor_id, config=ClientConfig(connect_timeout_s=60))
                obs_shape = tuple(int(d) for d in client.info["input_shape"])
                num_actions = int(client.info["num_actions"])
            t0 = time.time()
            client.register(e, sims + 1)
            t1 = time.time()
            lat.append((0, t0, t1 - t0))
            client.initial_inference((rng.normal(size=(e, *obs_shape)) * 0.1).astype(np.float32))
            t2 = time.time()
            lat.append((1, t1, t2 - t1))
            for s in range(sims):
                parent = rng.integers(0, s + 1, e).astype(np.int32)
                action = rng.integers(0, num_actions, e).astype(np.int32)
                t0 = time.time()
                client.recurrent_inference(parent, action, np.full(e, s + 1, np.int32))
                lat.append((2, t0, time.time() - t0))
            if rng.random() < args.push_prob:
                t0 = time.time()
                client.push_segments([segment(rng, args.segment_steps, num_actions, obs_shape)])
                t1 = time.time()
                client.learner_info()
                t2 = time.time()
                lat.append((3, t0, t1 - t0))
                lat.append((4, t1, t2 - t1))
        except Exception as ex:  # noqa: BLE001 - every exception is an error of the run
            out["err"].append(f"actor {actor_id} at {time.time() - t_start:.1f}s: "
                              f"{type(ex).__name__}: {str(ex)[:300]}")
            if len(out["err"]) < 3:
                traceback.print_exc()
            try:
                if client is not None:
                    client._channel.close()
            except Exception:  # noqa: BLE001
                pass
            client = None
            time.sleep(0.1)
    if client is not None:
        client.close()


def worker(address, first_actor, n, args, ready, go, result_q):
    out = {"lat": [], "err": []}
    ready.put(first_actor)
    t_start, t_warm, t_end = go.get()
    threads = [threading.Thread(target=client_loop, args=(address, first_actor + i, args, t_start, t_warm,
                                                          t_end, out), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = np.array(out["lat"], np.float64).reshape(-1, 3)
    result_q.put((first_actor, lat, out["err"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--clients_per_process", type=int, default=8)
    parser.add_argument("--envs", type=int, default=2, help="envs (rows) per client call")
    parser.add_argument("--recurrent", type=int, default=4, help="recurrent_inference calls per search")
    parser.add_argument("--push_prob", type=float, default=0.05)
    parser.add_argument("--segment_steps", type=int, default=8)
    parser.add_argument("--warmup_frac", type=float, default=0.2)
    parser.add_argument("--logdir", default=None)
    args = parser.parse_args()

    root = args.logdir or tempfile.mkdtemp(prefix="load_")
    logdir = os.path.join(root, "muzero")
    os.makedirs(logdir, exist_ok=True)
    log_path = os.path.join(logdir, "learner.log")
    cmd = [sys.executable, "-m", "muzero.learner", "--env=cartpole", "--num_actors=0", "--num_eval_actors=0",
           f"--logdir={logdir}", "--checkpoint_every_secs=1e9", f"--max_seconds={args.seconds + 600}",
           "--set=replay.min_steps_to_sample=200", "--set=replay.samples_per_insert=0"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
    log = open(log_path, "w")
    learner = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    procs = []
    try:
        path = os.path.join(logdir, "server_address.txt")
        deadline = time.monotonic() + 300
        address = None
        while time.monotonic() < deadline and address is None:
            if learner.poll() is not None:
                raise SystemExit(f"learner exited with code {learner.returncode}; see {log_path}")
            if os.path.exists(path):
                address = open(path).read().strip() or None
            time.sleep(0.2)
        if address is None:
            raise SystemExit("the learner wrote no server address within 300 s")
        print(f"learner pid {learner.pid} serving on {address}; logdir {logdir}", flush=True)
        # Fill the replay past min_steps_to_sample and wait for the first training steps, so
        # the trainer's one-off allocations (tracing, optimizer slots) precede the warm-up.
        from muzero.algorithms.muzero.client import InferenceClient
        with InferenceClient(address, actor_id=10**9 + 1) as c:
            rng = np.random.default_rng(0)
            shape, na = tuple(int(d) for d in c.info["input_shape"]), int(c.info["num_actions"])
            c.push_segments([segment(rng, 50, na, shape) for _ in range(8)])
            wait_until = time.monotonic() + 300
            while int(c.learner_info()["training_step"]) < 5 and time.monotonic() < wait_until:
                time.sleep(0.5)
            print(f"replay pre-filled; training_step={int(c.learner_info()['training_step'])}", flush=True)

        ctx = mp.get_context("spawn")
        ready, result_q = ctx.Queue(), ctx.Queue()
        per = max(1, args.clients_per_process)
        counts = [min(per, args.clients - i) for i in range(0, args.clients, per)]
        gos = []
        for k, n in enumerate(counts):
            go = ctx.Queue()
            p = ctx.Process(target=worker, args=(address, 1000 + k * per, n, args, ready, go, result_q),
                            daemon=True)
            p.start()
            procs.append(p)
            gos.append(go)
        for _ in procs:
            ready.get(timeout=300)
        t_start = time.time() + 1.0
        t_warm = t_start + args.warmup_frac * args.seconds
        t_end = t_start + args.seconds
        for go in gos:
            go.put((t_start, t_warm, t_end))
        print(f"{args.clients} clients in {len(procs)} processes; running {args.seconds:.0f} s "
              f"(warm-up {args.warmup_frac * args.seconds:.0f} s)", flush=True)
        rss_warm = None
        next_print = t_start + 10
        while time.time() < t_end:
            time.sleep(0.5)
            now = time.time()
            if learner.poll() is not None:
                print(f"learner died (exit {learner.returncode})", flush=True)
                break
            if rss_warm is None and now >= t_warm:
                rss_warm = rss_kib(learner.pid)
                print(f"[{now - t_start:4.0f}s] warm-up over: learner VmRSS {rss_warm / 1024:.1f} MiB", flush=True)
            if now >= next_print:
                next_print += 10
                print(f"[{now - t_start:4.0f}s] learner VmRSS {rss_kib(learner.pid) / 1024:.1f} MiB", flush=True)
        alive = learner.poll() is None
        rss_end = rss_kib(learner.pid) if alive else 0
        if rss_warm is None:
            rss_warm = rss_end
        results = [result_q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        training_step = -1
        if alive:
            from muzero.algorithms.muzero.client import InferenceClient
            with InferenceClient(address, actor_id=10**9) as c:
                training_step = int(c.learner_info()["training_step"])
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        if learner.poll() is None:
            learner.send_signal(signal.SIGINT)
            try:
                learner.wait(120)
            except subprocess.TimeoutExpired:
                learner.kill()
                learner.wait()
        log.close()

    lat = np.concatenate([r[1] for r in results]) if results else np.zeros((0, 3))
    errors = [e for r in results for e in r[2]]
    calls = len(lat)
    measured = lat[lat[:, 1] >= t_warm]
    for i, m in enumerate(METHODS):
        ms = measured[measured[:, 0] == i][:, 2] * 1e3
        if len(ms):
            print(f"method={m} calls={int((lat[:, 0] == i).sum())} p50_ms={np.percentile(ms, 50):.2f} "
                  f"p99_ms={np.percentile(ms, 99):.2f}")
    with open(log_path, errors="replace") as f:
        tracebacks = f.read().count("Traceback")
    for e in errors[:10]:
        print(f"error: {e}")
    all_ms = measured[:, 2] * 1e3
    p50 = float(np.percentile(all_ms, 50)) if len(all_ms) else float("nan")
    p99 = float(np.percentile(all_ms, 99)) if len(all_ms) else float("nan")
    growth = 100.0 * (rss_end - rss_warm) / rss_warm if rss_warm else float("nan")
    print(f"clients={args.clients} seconds={args.seconds:.0f} calls_per_s={len(measured) / (args.seconds * (1 - args.warmup_frac)):.0f} "
          f"training_step={training_step} learner_alive={int(alive)} learner_exit={learner.returncode} "
          f"learner_tracebacks={tracebacks} rss_warm_mib={rss_warm / 1024:.1f} rss_end_mib={rss_end / 1024:.1f} "
          f"p50_ms={p50:.2f}")
    print(f"errors={len(errors)} rss_growth_pct={growth:.2f} p99_ms={p99:.2f} calls={calls}")
    if not args.logdir and not errors and alive:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if (not errors and alive and tracebacks == 0) else 1


if __name__ == "__main__":
    sys.exit(main())
