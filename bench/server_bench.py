"""Throughput of the inference server: leaves per second and bytes per leaf on the wire.

    python bench/server_bench.py --clients=4 --leaves=256

A trivial TensorFlow model (one dense layer of dynamics, an 18-way policy head,
scalar value and reward heads) is served in this process; ``--clients`` spawned
processes (no TensorFlow) each drive ``--leaves`` search trees, issuing blocking
``recurrent_inference`` calls (as an actor's search does) with random parents,
random actions and new node ids cycling through the tree (``--inflight=2`` splits
each client's trees into two leases with one gRPC future in flight each; the
default 1 measured faster here). One line
per case:

    mode=cache latent=64 leaves_per_s=... bytes_per_leaf=... payload_bytes_per_leaf=... mean_batch=...
    mode=cache latent=6x6x64 ...
    mode=ship latent=6x6x64 ...
    direct_leaves_per_s=... direct_cache_leaves_per_s=...

leaves_per_s: median over ``--repeats`` timed windows of the sum over clients.
bytes_per_leaf: bytes of both directions on the TCP connection (gRPC + HTTP/2
framing included, TCP/IP headers excluded), measured through a byte-counting
loopback proxy on a separate pass; payload_bytes_per_leaf counts message bodies
only. mean_batch: mean rows per server batch. server_cpu_us_per_leaf: CPU time of
the server process (all threads) per leaf served. direct_*: the same model called
in-process on a batch of clients x leaves (with and without the cache gather and
scatter). Only recurrent_inference traffic is measured. All traffic stays on
127.0.0.1.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

NUM_ACTIONS = 18


def build_model(latent: tuple):
    """The trivial model: obs [B, *latent[:-1], 4] float32 -> hidden [B, *latent]."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    channels = latent[-1]

    def var(*shape):
        return tf.Variable(rng.normal(0, 0.1, shape).astype(np.float32))

    class TrivialModel(tf.Module):
        input_shape = (*latent[:-1], 4)
        input_dtype = tf.float32
        hidden_shape = latent
        num_actions = NUM_ACTIONS

        def __init__(self):
            self.w_repr, self.w_dyn = var(4, channels), var(channels, channels)
            self.embed, self.b_dyn = var(NUM_ACTIONS, channels), var(channels)
            self.w_policy, self.w_value, self.w_reward = var(channels, NUM_ACTIONS), var(channels), var(channels)

        def _heads(self, h, reward):
            pooled = tf.reduce_mean(tf.reshape(h, [tf.shape(h)[0], -1, channels]), axis=1)
            return {"value": tf.linalg.matvec(pooled, self.w_value), "reward": reward,
                    "policy_logits": pooled @ self.w_policy, "hidden_state": h}

        @tf.function(input_signature=[tf.TensorSpec([None, *latent[:-1], 4], tf.float32)])
        def initial_inference(self, obs):
            h = tf.tanh(tf.tensordot(obs, self.w_repr, 1))
            return self._heads(h, tf.zeros(tf.shape(obs)[:1]))

        @tf.function(input_signature=[tf.TensorSpec([None, *latent], tf.float32),
                                      tf.TensorSpec([None], tf.int32)])
        def recurrent_inference(self, h, action):
            e = tf.gather(self.embed, action)
            e = tf.reshape(e, [-1] + [1] * (len(latent) - 1) + [channels])
            h2 = tf.tanh(tf.tensordot(h, self.w_dyn, 1) + e + self.b_dyn)
            pooled = tf.reduce_mean(tf.reshape(h2, [tf.shape(h2)[0], -1, channels]), axis=1)
            return self._heads(h2, tf.linalg.matvec(pooled, self.w_reward))

    return TrivialModel()


def client_main(port, index, args, input_shape, start_evt, stop_evt, results):
    from muzero.algorithms.muzero.client import InferenceClient

    nodes = args.simulations + 1
    per = args.leaves // args.inflight
    clients = [InferenceClient(f"127.0.0.1:{port}", actor_id=index * args.inflight + j,
                               mode=args.mode) for j in range(args.inflight)]
    rng = np.random.default_rng(index)
    parents = [rng.integers(0, s + 1, per).astype(np.int32) for s in range(args.simulations)]
    actions = [rng.integers(0, NUM_ACTIONS, per).astype(np.int32) for _ in range(args.simulations)]
    news = [np.full(per, s + 1, np.int32) for s in range(args.simulations)]
    for c in clients:
        c.register(per, nodes)
        c.initial_inference(rng.normal(size=(per, *input_shape)).astype(np.float32))
    start_evt.wait()
    step, leaves, windows = 0, 0, []
    mark, mark_leaves = time.perf_counter(), 0
    if args.inflight == 1:
        # Blocking calls, as an actor's search makes them (client.recurrent_fn). A gRPC
        # future starts a new channel-spin thread whenever its channel has no other call
        # in flight, which with one call at a time means a thread per call (measured).
        (client,) = clients
        while not stop_evt.is_set():
            client.recurrent_inference(parents[step], actions[step], news[step])
            leaves += per
            step = (step + 1) % args.simulations
            now = time.perf_counter()
            if now - mark >= args.window:
                windows.append((leaves - mark_leaves) / (now - mark))
                mark, mark_leaves = now, leaves
    else:
        pending = [c.recurrent_inference_async(parents[0], actions[0], news[0]) for c in clients]
        while not stop_evt.is_set():
            step = (step + 1) % args.simulations
            for j, c in enumerate(clients):
                pending[j].result()
                leaves += per
                pending[j] = c.recurrent_inference_async(parents[step], actions[step], news[step])
            now = time.perf_counter()
            if now - mark >= args.window:
                windows.append((leaves - mark_leaves) / (now - mark))
                mark, mark_leaves = now, leaves
        for p in pending:
            p.result()
    results.put((index, windows, sum(c.bytes_sent + c.bytes_received for c in clients),
                 sum(c.calls for c in clients) * per))
    for c in clients:
        c.close()


class CountingProxy:
    """Forwards one loopback TCP port to another and counts the bytes both ways."""

    def __init__(self, target_port: int):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target_port, self.bytes = target_port, 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.target_port))
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while data := src.recv(1 << 20):
                with self.lock:
                    self.bytes += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def wire_bytes_per_leaf(port: int, args, input_shape) -> float:
    from muzero.algorithms.muzero.client import InferenceClient

    proxy = CountingProxy(port)
    per, calls = args.leaves // args.inflight, 40
    c = InferenceClient(f"127.0.0.1:{proxy.port}", actor_id=10**6, mode=args.mode)
    c.register(per, args.simulations + 1)
    c.initial_inference(np.zeros((per, *input_shape), np.float32))
    zeros, ones = np.zeros(per, np.int32), np.ones(per, np.int32)
    for _ in range(5):  # warm HPACK tables
        c.recurrent_inference(zeros, zeros, ones)
    before = proxy.bytes
    for _ in range(calls):
        c.recurrent_inference(zeros, zeros, ones)
    time.sleep(0.05)
    measured = (proxy.bytes - before) / (calls * per)
    c.close()
    proxy.close()
    return measured


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_case(args, mode: str, latent: tuple) -> dict:
    from muzero.algorithms.muzero.config import CacheServiceConfig
    from muzero.rpc.config import ServerConfig
    from muzero.algorithms.muzero.service import serve

    model = build_model(latent)
    total = args.clients * args.leaves
    cfg = CacheServiceConfig(cache_slots=total + args.leaves, max_nodes=args.simulations + 1,
                             recurrent_max_batch=max(total, 1), recurrent_max_wait_ms=args.max_wait_ms,
                             initial_max_batch=max(total, 1),
                             close_when_all_leases_waiting=bool(args.close_early))
    server, service = serve(model, cfg, server_config=ServerConfig(max_workers=64))
    ctx = mp.get_context("spawn")
    start_evt, stop_evt, results = ctx.Event(), ctx.Event(), ctx.Queue()
    case = argparse.Namespace(**{**vars(args), "mode": mode})
    procs = [ctx.Process(target=client_main, daemon=True,
                         args=(server.port, i, case, model.input_shape, start_evt, stop_evt, results))
             for i in range(args.clients)]
    for p in procs:
        p.start()
    deadline = time.time() + 120
    while service.leases.num_active < args.clients * args.inflight and time.time() < deadline:
        time.sleep(0.05)
    start_evt.set()
    time.sleep(args.warmup)
    service.stats(reset=True)
    cpu0 = _cpu_seconds()
    time.sleep(args.window * args.repeats)
    cpu = _cpu_seconds() - cpu0
    stats = service.stats()
    stop_evt.set()
    out = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    # Windows overlapping the warm-up are dropped; the rest are summed across clients.
    skip = max(int(args.warmup / args.window), 0)
    per_client = [w[skip:] for _, w, _, _ in out]
    n = min(len(w) for w in per_client)
    rates = [sum(w[k] for w in per_client) for k in range(n)] or [0.0]
    payload = sum(b for _, _, b, _ in out) / max(sum(l for _, _, _, l in out), 1)
    name = "recurrent_inference" if mode == "cache" else "recurrent_inference_ship"
    wire = wire_bytes_per_leaf(server.port, case, model.input_shape)
    server.stop()
    rows = stats[f"{name}/rows"]
    return {"leaves_per_s": statistics.median(rates),
            "server_cpu_us_per_leaf": cpu / max(rows, 1) * 1e6, "bytes_per_leaf": wire,
            "payload_bytes_per_leaf": payload, "mean_batch": stats[f"{name}/mean_batch_rows"],
            "mean_batch_requests": stats[f"{name}/mean_batch_requests"],
            "latency_ms_p50": stats[f"{name}/latency_ms_p50"]}


def direct(args, latent: tuple) -> tuple:
    """In-process leaves/s: model only, and model plus cache gather/scatter."""
    import tensorflow as tf
    from muzero.algorithms.muzero.latent_cache import TFLatentCache

    model = build_model(latent)
    b, nodes = args.clients * args.leaves, args.simulations + 1
    rng = np.random.default_rng(0)
    hidden = tf.constant(rng.normal(size=(b, *latent)).astype(np.float32))
    action = rng.integers(0, NUM_ACTIONS, b).astype(np.int32)
    cache = TFLatentCache(b, nodes, latent, np.float32)
    rows = np.arange(b, dtype=np.int64) * nodes

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([None], tf.int64)])
    def cached(parent, act, new):
        out = model.recurrent_inference(cache.gather(parent), act)
        cache.scatter(new, out["hidden_state"])
        return out["reward"], out["value"], out["policy_logits"]

    def plain():
        out = model.recurrent_inference(hidden, action)
        return out["reward"].numpy(), out["value"].numpy(), out["policy_logits"].numpy()

    def with_cache():
        return [t.numpy() for t in cached(rows, action, rows + 1)]

    rates = []
    for fn in (plain, with_cache):
        fn()
        samples = []
        for _ in range(args.repeats):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.5:
                fn()
                n += 1
            samples.append(n * b / (time.perf_counter() - t0))
        rates.append(statistics.median(samples))
    return tuple(rates)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--leaves", type=int, default=256, help="search trees per client")
    p.add_argument("--simulations", type=int, default=50)
    p.add_argument("--inflight", type=int, default=1, choices=(1, 2, 4),
                   help="leases (calls in flight) per client process")
    p.add_argument("--max_wait_ms", type=float, default=2.0)
    p.add_argument("--close_early", type=int, default=1)
    p.add_argument("--warmup", type=float, default=1.5)
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cases", default="cache:64,cache:6x6x64,ship:6x6x64")
    p.add_argument("--tf_threads", type=int, default=0,
                   help="TensorFlow intra- and inter-op threads in the server (0: TF default)")
    p.add_argument("--direct", type=int, default=1, help="0 skips the in-process figures")
    args = p.parse_args(argv)
    if args.tf_threads:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(args.tf_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.tf_threads)
    if args.leaves % args.inflight:
        p.error(f"--leaves={args.leaves} must be a multiple of --inflight={args.inflight}")
    for case in filter(None, args.cases.split(",")):
        mode, latent_name = case.split(":")
        latent = tuple(int(d) for d in latent_name.split("x"))
        r = run_case(args, mode, latent)
        print(f"mode={mode} latent={latent_name} leaves_per_s={r['leaves_per_s']:.0f} "
              f"bytes_per_leaf={r['bytes_per_leaf']:.1f} "
              f"payload_bytes_per_leaf={r['payload_bytes_per_leaf']:.1f} "
              f"mean_batch={r['mean_batch']:.1f} mean_batch_requests={r['mean_batch_requests']:.2f} "
              f"latency_ms_p50={r['latency_ms_p50']:.2f} "
              f"server_cpu_us_per_leaf={r['server_cpu_us_per_leaf']:.2f}", flush=True)
    if not args.direct:
        return
    plain, cached = direct(args, (64,))
    plain6, cached6 = direct(args, (6, 6, 64))
    print(f"direct_leaves_per_s={plain:.0f} direct_cache_leaves_per_s={cached:.0f} "
          f"direct_leaves_per_s_6x6x64={plain6:.0f} direct_cache_leaves_per_s_6x6x64={cached6:.0f}",
          flush=True)


if __name__ == "__main__":
    main()
