"""Throughput of step streaming: env steps per second through the policy server.

    python bench/policy_server_bench.py --clients=4 --envs=256 --seconds=20

This process serves ``StepStreamingService`` on a ``BatchingServer`` (127.0.0.1) with a
small TensorFlow MLP policy (CartPole observations, 2 hidden layers of 64, categorical
sampling on the server, one concrete tf.function per call) and a sink that counts and
drops unrolls; no training. ``--clients`` spawned processes (no TensorFlow) each step
``--envs`` vectorised CartPole envs in lockstep with a thin-actor loop (``StreamingClient``
+ ``envs.make_batch``: send reward/done/observation, get actions, step). Progress lines
every ~2 s, then:

    env_steps_per_s=...      training env steps the server received per second, over the
                             timed window (after --warmup seconds)
    mean_batch_rows=...      rows per server batch (max_batch = clients x envs)
    clients=...
    envs=...

Also printed: server batches/s, unrolls/s, p50 batch run time and call latency, and the
CPU seconds of this (server) process per 1,000 env steps.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

OBS_SIZE, NUM_ACTIONS, HIDDEN = 4, 2, 64


def build_policy(seed: int = 0):
    """The MLP policy (a ``StreamingPolicy``): obs [B, 4] -> logits [B, 2], baseline [B]."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def var(*shape):
        return tf.Variable(rng.normal(0, 1 / np.sqrt(shape[0]), shape).astype(np.float32))

    class MLPPolicy(tf.Module):
        observation_shape = (OBS_SIZE,)
        observation_dtype = np.dtype(np.float32)
        action_shape = ()
        action_dtype = np.dtype(np.int32)
        num_actions = NUM_ACTIONS

        def __init__(self):
            super().__init__()
            self.w1, self.b1 = var(OBS_SIZE, HIDDEN), tf.Variable(tf.zeros(HIDDEN))
            self.w2, self.b2 = var(HIDDEN, HIDDEN), tf.Variable(tf.zeros(HIDDEN))
            self.wp, self.wv = var(HIDDEN, NUM_ACTIONS), var(HIDDEN, 1)
            self.sampler = tf.random.Generator.from_seed(seed)
            obs = tf.TensorSpec([None, OBS_SIZE], tf.float32)
            # Concrete functions: a tf.function call re-binds its arguments and looks up
            # its trace every time; the concrete function skips both.
            self._act = tf.function(self._act_graph).get_concrete_function(
                obs, tf.TensorSpec([None], tf.bool))
            self._value = tf.function(self._value_graph).get_concrete_function(obs)

        def _torso(self, obs):
            h = tf.nn.relu(obs @ self.w1 + self.b1)
            return tf.nn.relu(h @ self.w2 + self.b2)

        def _act_graph(self, obs, evaluation):
            h = self._torso(obs)
            logits = h @ self.wp
            baseline = tf.squeeze(h @ self.wv, -1)
            sampled = tf.random.stateless_categorical(logits, 1, self.sampler.make_seeds(1)[:, 0],
                                                      dtype=tf.int32)[:, 0]
            greedy = tf.argmax(logits, -1, output_type=tf.int32)
            return tf.where(evaluation, greedy, sampled), logits, baseline

        def _value_graph(self, obs):
            return tf.squeeze(self._torso(obs) @ self.wv, -1)

        def initial_state(self, num_envs):
            return {}

        def act(self, observation, prev_action, prev_reward, state, evaluation, env_ids):
            action, logits, baseline = self._act(tf.constant(observation), tf.constant(evaluation))
            return action.numpy(), {"policy_logits": logits.numpy(), "baseline": baseline.numpy()}, {}

        def value(self, observation):
            return self._value(tf.constant(observation)).numpy()

    return MLPPolicy()


def client_main(address: str, index: int, num_envs: int, ready, start, stop, out) -> None:
    """One thin actor: ``num_envs`` CartPole envs, one inference call per step."""
    import envs
    from muzero.algorithms.streaming_actor import StreamingClient, new_run_id
    from muzero.rpc.config import ClientConfig

    client = StreamingClient(address, config=ClientConfig(connect_timeout_s=60))
    client.info()
    batch = envs.make_batch("cartpole", num_envs, seed=index)
    env_ids = (index * num_envs + np.arange(num_envs)).astype(np.int32)
    run_id = new_run_id()
    step = batch.reset()
    zeros_f, zeros_b = np.zeros(num_envs, np.float32), np.zeros(num_envs, bool)
    ready.set()
    start.wait()
    actions, _ = client.inference(env_ids, run_id, zeros_f, zeros_b, zeros_b, step.observation)
    steps = 0
    env_time = 0.0
    t_start = time.perf_counter()
    while not stop.is_set():
        t0 = time.perf_counter()
        step = batch.step(actions)
        env_time += time.perf_counter() - t0
        final = step.final_observation if step.truncated.any() else None
        actions, _ = client.inference(env_ids, run_id, step.reward, step.terminated, step.truncated,
                                      step.observation, final)
        steps += num_envs
    out.put((index, steps, env_time, time.perf_counter() - t_start, client.calls))
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the timed window")
    parser.add_argument("--unroll_length", type=int, default=20)
    parser.add_argument("--max_wait_ms", type=float, default=2.0)
    parser.add_argument("--profile", default=None, help="write a cProfile of the server process here")
    args = parser.parse_args()

    from muzero import core
    from muzero.algorithms.streaming import StepStreamingService
    from muzero.rpc.config import ServerConfig
    from muzero.rpc.server import BatchingServer

    total = args.clients * args.envs
    policy = build_policy()
    context = core.RunContext()
    unrolls = [0]

    def sink(unroll):
        unrolls[0] += 1
        return True

    service = StepStreamingService(policy, num_train_envs=total, num_eval_envs=0,
                                   unroll_length=args.unroll_length, overlap=0, sink=sink,
                                   context=context, max_batch=total, max_wait_ms=args.max_wait_ms)
    server = BatchingServer(ServerConfig(max_workers=max(8, 2 * args.clients + 4)))
    service.bind(server)
    port = server.start()
    address = f"127.0.0.1:{port}"
    ctx = mp.get_context("spawn")
    start, stop = ctx.Event(), ctx.Event()
    out = ctx.Queue()
    readies = [ctx.Event() for _ in range(args.clients)]
    procs = [ctx.Process(target=client_main, args=(address, i, args.envs, readies[i], start, stop, out),
                         daemon=True) for i in range(args.clients)]
    for p in procs:
        p.start()
    for r in readies:
        if not r.wait(120):
            raise SystemExit("a client did not start within 120 s")
    print(f"serving {address}: {args.clients} clients x {args.envs} CartPole envs, "
          f"MLP {HIDDEN}x2, unroll_length={args.unroll_length}", flush=True)
    profiler = None
    start.set()
    time.sleep(args.warmup)
    service.stats(reset=True)
    steps0, unrolls0 = context.env_steps, unrolls[0]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    if args.profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    t0 = last = time.monotonic()
    last_steps = steps0
    while time.monotonic() - t0 < args.seconds:
        time.sleep(min(2.0, max(0.0, args.seconds - (time.monotonic() - t0))))
        now, steps = time.monotonic(), context.env_steps
        print(f"  t={now - t0:5.1f}s env_steps/s={(steps - last_steps) / (now - last):,.0f}", flush=True)
        last, last_steps = now, steps
    elapsed = time.monotonic() - t0
    steps, n_unrolls = context.env_steps - steps0, unrolls[0] - unrolls0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    stats = service.stats()
    stop.set()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(10)
    server.stop()
    key = "muzero.Streaming/inference"
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    env_share = np.mean([r[2] / r[3] for r in results])
    print(f"batches_per_s={stats[f'{key}/batches'] / elapsed:,.0f} unrolls_per_s={n_unrolls / elapsed:,.0f} "
          f"run_ms_p50={stats[f'{key}/run_ms_p50']:.2f} latency_ms_p50={stats[f'{key}/latency_ms_p50']:.2f} "
          f"server_cpu_s_per_1k_steps={1000 * cpu / max(steps, 1):.4f} "
          f"client_env_step_share={env_share:.2f}")
    print(f"env_steps_per_s={steps / elapsed:.0f}")
    print(f"mean_batch_rows={stats[f'{key}/mean_batch_rows']:.1f}")
    print(f"clients={args.clients}")
    print(f"envs={args.envs}")


if __name__ == "__main__":
    main()
