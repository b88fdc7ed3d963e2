"""Batching across 8 client processes (spawned): batches hold several callers' requests
and every client gets exactly its own results, equal to a direct model call and to
the plain-Python formulas of ToyModel."""
import multiprocessing as mp

import numpy as np

from muzero.algorithms.muzero.config import CacheServiceConfig
from muzero.algorithms.muzero.service import serve
from muzero.rpc.testing import ToyModel

NUM_CLIENTS, NUM_ENVS, NUM_SIMS = 8, 3, 5


def _client(port: int, index: int, barrier, results) -> None:
    # Runs in a spawned process: numpy + grpc only, no TensorFlow.
    from muzero.algorithms.muzero.client import InferenceClient
    from muzero.rpc.testing import toy_path

    try:
        client = InferenceClient(f"127.0.0.1:{port}", actor_id=index)
        client.register(NUM_ENVS, NUM_SIMS + 1)
        obs = np.array([[index, 10 * index + e] for e in range(NUM_ENVS)], np.float32)  # [E, 2]
        model = ToyModel()
        direct = model.initial_inference(obs)
        hidden = {0: direct["hidden_state"]}      # node -> [E, 2], the client's own reference
        paths = {0: [[] for _ in range(NUM_ENVS)]}
        barrier.wait()
        root = client.initial_inference(obs)
        problems = []
        if not np.array_equal(root["value"], direct["value"]):
            problems.append(f"root value {root['value']} != {direct['value']}")
        for s in range(NUM_SIMS):
            parent = np.array([(s * (e + 1) + index) % (s + 1) for e in range(NUM_ENVS)], np.int32)
            action = np.array([(index + s + e) % 3 for e in range(NUM_ENVS)], np.int32)
            new = np.full(NUM_ENVS, s + 1, np.int32)
            reward, value, logits = client.recurrent_fn(parent, action, new)
            parent_hidden = np.stack([hidden[p][e] for e, p in enumerate(parent)])
            want = model.recurrent_inference(parent_hidden, action)
            hidden[s + 1] = want["hidden_state"]
            paths[s + 1] = [paths[p][e] + [int(action[e])] for e, p in enumerate(parent)]
            for got, key in ((reward, "reward"), (value, "value"), (logits, "policy_logits")):
                if not np.array_equal(got, want[key]):
                    problems.append(f"sim {s} {key}: {got} != direct {want[key]}")
            for e in range(NUM_ENVS):
                _, r, v, lg = toy_path(obs[e], paths[s + 1][e])
                if (reward[e], value[e], list(logits[e])) != (r, v, lg):
                    problems.append(f"sim {s} env {e}: {value[e]} != formula {v}")
        client.close()
        results.put((index, problems))
    except Exception as e:  # reported to the parent, which fails the test
        results.put((index, [f"{type(e).__name__}: {e}"]))


def test_batching_across_eight_client_processes():
    # A long deadline so that concurrent callers are batched together; batches also
    # close as soon as every live lease has a request waiting.
    server, service = serve(ToyModel(), CacheServiceConfig(
        cache_slots=NUM_CLIENTS * NUM_ENVS, max_nodes=NUM_SIMS + 1,
        initial_max_wait_ms=200, recurrent_max_wait_ms=200))
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(NUM_CLIENTS), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(server.port, i, barrier, results), daemon=True)
             for i in range(NUM_CLIENTS)]
    try:
        for p in procs:
            p.start()
        reports = dict(results.get(timeout=90) for _ in procs)
        for p in procs:
            p.join(timeout=30)
        assert sorted(reports) == list(range(NUM_CLIENTS))
        assert all(not problems for problems in reports.values()), reports
        stats = service.stats()
        assert stats["recurrent_inference/rows"] == NUM_CLIENTS * NUM_ENVS * NUM_SIMS
        assert stats["recurrent_inference/max_batch_requests"] > 1
        assert stats["recurrent_inference/mean_batch_rows"] > NUM_ENVS
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        server.stop()
