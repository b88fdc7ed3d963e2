"""Fuzzes every method of every gRPC service of two real learner processes.

    python bench/fuzz_rpc.py --requests=20000        # smoke: --requests=2000 --train_steps=50

Starts two learners as subprocesses on loopback:

* MuZero (``muzero.MuZero``): ``python -m muzero.learner --env=cartpole --num_actors=0
  --num_eval_actors=0 --set=replay.min_steps_to_sample=200``: no actors, so the only
  traffic is the fuzzer's.
* PPO (``muzero.Streaming``): ``--algo=ppo --num_actors=1 --envs_per_actor=1
  --num_eval_actors=1 --eval_envs_per_actor=1`` (PPO needs a training actor): env id 0 is
  a training env, 1 an evaluation env, each streamed by a real thin actor.

Then sends ``--requests`` requests from ``--threads`` threads, spread over every method
of both services (model_info, register, release, initial_inference, recurrent_inference,
*_ship, push_segments, learner_info, server_stats; stream_info, inference), plus calls
of each service's methods on the other learner and of unknown methods (UNIMPLEMENTED).
Each request is one of:

* ``garbage``: random bytes, or a tensor-message header with a random body;
* ``mutated``: a valid request with flipped bytes, cut short or with bytes appended;
* ``structural``: valid wire messages with a wrong dtype or shape, a missing, unknown or
  renamed field (always INVALID_ARGUMENT);
* ``values``: well-formed requests with non-finite or extreme values (NaN / inf / 3e38
  observations, rewards, values, priorities; huge or negative ids and sizes; repeated
  slots and env ids; truncated rows without final observations; segments with NaN
  observations, bad policies, broken chains, ...);
* ``valid``: well-formed requests (leases of the fuzzer's own actor ids; env ids of the
  PPO learner's actors, so fuzzed steps collide with real ones).

Each case carries the status codes that are legitimate for it; anything else (INTERNAL,
UNKNOWN, DEADLINE_EXCEEDED, a code not expected for that input) counts as
``unexpected_status``, a learner that dies or stops answering as a crash. After the
fuzzing it checks that a push mixing valid and poisoned segments stores nothing, then
pushes valid CartPole segments until the MuZero learner has taken ``--train_steps``
training steps more, checks both learners are alive, stops them (SIGINT, clean exit)
and scans their logs for "Traceback". Tracebacks of actor processes (a thin actor
that the fuzzer's colliding requests made fail; the learner restarts it) are counted
separately as ``actor_crashes``. Last lines: per-method counts of status codes, then
``requests=... crashes=0 unexpected_status=0 learner_alive=1``.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from muzero.rpc import wire  # noqa: E402

SC = grpc.StatusCode
OK, INV, FP, RES, UNAV, UNIMP = (SC.OK, SC.INVALID_ARGUMENT, SC.FAILED_PRECONDITION,
                                 SC.RESOURCE_EXHAUSTED, SC.UNAVAILABLE, SC.UNIMPLEMENTED)
MZ = "muzero.MuZero"
ST = "muzero.Streaming"
MZ_METHODS = ("model_info", "register", "release", "initial_inference", "recurrent_inference",
              "initial_inference_ship", "recurrent_inference_ship", "push_segments",
              "learner_info", "server_stats")
ST_METHODS = ("stream_info", "inference")
# The codes a method may legitimately answer to any input (used for mutated requests,
# whose meaning is unknown). UNAVAILABLE: register while the actor id's lease of another
# run is in use. RESOURCE_EXHAUSTED: register without free slots, push_segments held back
# by the replay's rate limiter. FAILED_PRECONDITION: a lease that is not live.
METHOD_CODES = {
    "model_info": {OK, INV}, "register": {OK, INV, RES, UNAV}, "release": {OK, INV},
    "initial_inference": {OK, INV, FP}, "recurrent_inference": {OK, INV, FP},
    "initial_inference_ship": {OK, INV}, "recurrent_inference_ship": {OK, INV},
    "push_segments": {OK, INV, RES}, "learner_info": {OK, INV}, "server_stats": {OK, INV},
    "stream_info": {OK, INV}, "inference": {OK, INV},
}
EXTREME_F = (np.nan, np.inf, -np.inf, 3e38, -3e38, 1e30)
CALL_TIMEOUT_S = 60.0


# -- learner processes ---------------------------------------------------------------------------

class Learner:
    def __init__(self, name: str, root: str, flags: list, max_seconds: float):
        self.name = name
        self.logdir = os.path.join(root, name)
        os.makedirs(self.logdir, exist_ok=True)
        self.log_path = os.path.join(self.logdir, "learner.log")
        cmd = [sys.executable, "-m", "muzero.learner", "--env=cartpole", f"--logdir={self.logdir}",
               "--checkpoint_every_secs=1e9", f"--max_seconds={max_seconds}", *flags]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        env.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.address = None

    def wait_address(self, timeout: float) -> str:
        path = os.path.join(self.logdir, "server_address.txt")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} learner exited with code {self.proc.returncode} before "
                                 f"serving; log {self.log_path}:\n{self.log_tail()}")
            if os.path.exists(path):
                with open(path) as f:
                    text = f.read().strip()
                if text:
                    self.address = text
                    return text
            time.sleep(0.2)
        raise SystemExit(f"{self.name} learner wrote no server address within {timeout:.0f} s")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def log_text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def log_tail(self, n: int = 3000) -> str:
        return self.log_text()[-n:]


def tracebacks(text: str) -> tuple:
    """(learner tracebacks, actor tracebacks), each summarised by its exception line: a
    traceback through multiprocessing's process bootstrap is an actor process's."""
    lines = text.splitlines()
    learner, actor = [], []
    for i, line in enumerate(lines):
        if not line.startswith("Traceback"):
            continue
        end = i + 1
        while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
            end += 1
        summary = lines[end] if end < len(lines) else "?"
        in_actor = any("multiprocessing/process.py" in l for l in lines[i:end])
        (actor if in_actor else learner).append(summary)
    return learner, actor


# -- request building ----------------------------------------------------------------------------

class Case:
    __slots__ = ("service", "method", "kind", "payload", "expect", "on_result")

    def __init__(self, service, method, kind, payload, expect, on_result=None):
        self.service, self.method, self.kind = service, method, kind
        self.payload, self.expect, self.on_result = payload, set(expect), on_result


def enc(tensors: dict) -> bytes:
    return wire.encode(tensors)


class Fuzzer:
    def __init__(self, mz_address: str, st_address: str, threads: int, seed: int):
        opts = [("grpc.max_receive_message_length", 256 * 2**20),
                ("grpc.max_send_message_length", 256 * 2**20), ("grpc.enable_retries", 0)]
        self.channels = {"mz": grpc.insecure_channel(mz_address, opts),
                         "st": grpc.insecure_channel(st_address, opts)}
        self._stubs: dict = {}
        self.seed = seed
        self.lock = threading.Lock()
        self.counts: dict = collections.defaultdict(collections.Counter)   # method -> code -> n
        self.unexpected: list = []
        self.unexpected_n = 0
        self.sent = 0
        info = self.call_ok("mz", MZ, "model_info", {})
        self.obs_shape = tuple(int(d) for d in info["input_shape"])
        self.obs_dtype = wire.DTYPE_CODES[int(info["input_dtype"])]
        self.hidden_shape = tuple(int(d) for d in info["hidden_shape"])
        self.hidden_dtype = wire.DTYPE_CODES[int(info["hidden_dtype"])]
        self.num_actions = int(info["num_actions"])
        self.max_envs, self.max_nodes = int(info["max_envs"]), int(info["max_nodes"])
        sinfo = self.call_ok("st", ST, "stream_info", {})
        self.st_obs_shape = tuple(int(d) for d in sinfo["observation_shape"])
        self.st_obs_dtype = wire.DTYPE_CODES[int(sinfo["observation_dtype"])]
        self.st_num_envs = int(sinfo["num_train_envs"]) + int(sinfo["num_eval_envs"])
        self.st_max_batch = int(sinfo["max_batch"])
        self.st_num_actions = int(sinfo["num_actions"])
        # A pool of the fuzzer's own leases (actor ids 10_000 + i), re-registered when lost.
        self.pool_size = max(4, threads)
        self.leases: list = [None] * self.pool_size    # (lease_id, num_envs, num_nodes) or None
        self.run_ids = [int(np.random.default_rng(seed + i).integers(1, 2**62)) for i in range(self.pool_size)]

    # -- transport --
    def stub(self, server: str, service: str, method: str):
        key = (server, service, method)
        s = self._stubs.get(key)
        if s is None:
            s = self._stubs[key] = self.channels[server].unary_unary(f"/{service}/{method}")
        return s

    def call(self, server, service, method, payload: bytes):
        """-> (code, response tensors or None, details)."""
        try:
            resp = self.stub(server, service, method)(payload, timeout=CALL_TIMEOUT_S)
            try:
                return OK, wire.decode(resp), ""
            except wire.WireError as e:
                return SC.UNKNOWN, None, f"undecodable response: {e}"
        except grpc.RpcError as e:
            return e.code(), None, e.details() or ""

    def call_ok(self, server, service, method, tensors: dict) -> dict:
        code, out, details = self.call(server, service, method, enc(tensors))
        if code != OK:
            raise RuntimeError(f"{service}/{method}: {code.name}: {details}")
        return out

    # -- leases of the fuzzer's own actor ids --
    def lease(self, rng, i=None):
        i = int(rng.integers(self.pool_size)) if i is None else i
        with self.lock:
            got = self.leases[i]
        if got is not None:
            return i, got
        e, n = int(rng.integers(1, 5)), int(rng.integers(2, self.max_nodes + 1))
        code, out, details = self.call("mz", MZ, "register", enc({
            "actor_id": np.int64(10_000 + i), "run_id": np.int64(self.run_ids[i]),
            "num_envs": np.int64(e), "num_nodes": np.int64(n)}))
        self.record("register", "valid", code, {OK, RES, UNAV}, details)
        if code != OK:
            return i, None
        got = (int(out["lease"]), e, n)
        with self.lock:
            self.leases[i] = got
        return i, got

    def forget(self, i, lease_id):
        with self.lock:
            if self.leases[i] is not None and self.leases[i][0] == lease_id:
                self.leases[i] = None

    # -- bookkeeping --
    def record(self, method, kind, code, expect, details):
        with self.lock:
            self.sent += 1
            self.counts[method][code.name] += 1
            if code not in expect:
                self.unexpected_n += 1
                if len(self.unexpected) < 40:
                    self.unexpected.append(f"{method} [{kind}]: {code.name}: {details[:300]}")

    def run_case(self, case: Case):
        server = "st" if case.service == ST else "mz"
        if case.service == "cross":
            server = case.on_result        # which learner to call (the other one)
            service = ST if server == "mz" else MZ
            code, out, details = self.call(server, service, case.method, case.payload)
        else:
            service = case.service
            code, out, details = self.call(server, service, case.method, case.payload)
            if case.on_result is not None:
                case.on_result(code)
        self.record(case.method, case.kind, code, case.expect, details)
        return code

    # -- case generation --
    def make_case(self, rng) -> Case:
        r = rng.random()
        if r < 0.03:
            name = rng.choice(["nope", "Register", "model_info/", "a" * 200, "inference2"])
            service = MZ if rng.random() < 0.5 else ST
            return Case(service, str(name), "unknown", self.garbage(rng) if rng.random() < 0.5 else enc({}),
                        {UNIMP})
        if r < 0.06:
            if rng.random() < 0.5:
                method = str(rng.choice(MZ_METHODS))
                return Case("cross", method, "cross", enc({}), {UNIMP}, on_result="st")
            method = str(rng.choice(ST_METHODS))
            return Case("cross", method, "cross", enc({}), {UNIMP}, on_result="mz")
        methods = [(MZ, m) for m in MZ_METHODS] + [(ST, m) for m in ST_METHODS] * 3
        service, method = methods[int(rng.integers(len(methods)))]
        kind = rng.choice(["garbage", "mutated", "structural", "values", "valid"],
                          p=[0.12, 0.18, 0.2, 0.3, 0.2])
        build = getattr(self, f"c_{method}")
        if kind == "garbage":
            return Case(service, method, kind, self.garbage(rng), {INV})
        case = build(rng, "valid" if kind == "mutated" else kind)
        if kind == "mutated":
            case.payload = self.mutate(rng, case.payload)
            case.expect = METHOD_CODES[method]
            case.kind, case.on_result = "mutated", None
        return case

    def garbage(self, rng) -> bytes:
        # At least one byte: a header announcing 0 tensors followed by nothing is a valid empty
        # message, which methods without fields rightly answer OK.
        n = int(rng.integers(1, 300))
        body = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        if rng.random() < 0.4:
            count = int(rng.choice([0, 1, 2, 7, 4096, 4097, 2**31, 2**32 - 1]))
            body = b"MZ\x01\x00" + count.to_bytes(4, "little") + body
        return body

    def mutate(self, rng, payload: bytes) -> bytes:
        buf = bytearray(payload)
        for _ in range(int(rng.integers(1, 5))):
            op = rng.random()
            if op < 0.6 and buf:
                pos = int(rng.integers(len(buf)))
                buf[pos] = int(rng.integers(256))
            elif op < 0.8 and buf:
                del buf[int(rng.integers(len(buf))):]
            else:
                buf += rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8).tobytes()
        return bytes(buf)

    def structural(self, rng, fields: dict, scalar_ints: tuple = (),
                   optional: tuple = ("slots", "final_observations")) -> dict:
        """A definitely invalid variant of a valid request: wrong dtype or shape, a missing
        (required) or unknown field."""
        fields = dict(fields)
        names = list(fields)
        required = [k for k in names if k not in optional]
        op = int(rng.integers(4)) if names else 3
        if op == 0 and required:                     # drop a required field
            del fields[required[int(rng.integers(len(required)))]]
        elif op == 0:
            fields["junk"] = np.zeros(1, np.float32)
        elif op == 1:                                # wrong dtype
            k = names[int(rng.integers(len(names)))]
            a = np.asarray(fields[k])
            if k in scalar_ints:
                fields[k] = a.astype(rng.choice([np.float32, np.float64, np.bool_]))
            else:
                choices = [d for d in (np.float64, np.float16, np.int64, np.int8, np.uint8, np.bool_,
                                       np.int32, np.float32) if np.dtype(d) != a.dtype]
                fields[k] = a.astype(choices[int(rng.integers(len(choices)))])
        elif op == 2:                                # wrong shape
            k = names[int(rng.integers(len(names)))]
            a = np.asarray(fields[k])
            shapes = [a.reshape(-1)[:0], np.stack([a, a]), a[..., None]] if a.ndim else [a.reshape(1), np.stack([a, a])]
            batched = sum(np.ndim(v) >= 1 for v in fields.values())
            if a.ndim >= 1 and a.shape[0] > 1 and batched > 1:   # rows disagreeing with another field
                shapes.append(a[:-1])
            fields[k] = shapes[int(rng.integers(len(shapes)))]
        else:                                        # unknown field
            fields[str(rng.choice(["junk", "Lease", "observations", "x" * 255, "0"]))] = np.zeros(
                int(rng.integers(0, 3)), np.float32)
        return fields

    # MuZero methods. Each c_<method>(rng, kind) returns a Case for kind in
    # structural / values / valid.
    def _noargs(self, service, method, rng, kind, extra_ok: bool) -> Case:
        if kind == "structural":
            return Case(service, method, kind, enc(self.structural(rng, {})), {OK, INV} if extra_ok else {INV})
        return Case(service, method, kind, enc({}), {OK})

    def c_model_info(self, rng, kind):
        return self._noargs(MZ, "model_info", rng, kind, extra_ok=True)     # ignores fields

    def c_server_stats(self, rng, kind):
        return self._noargs(MZ, "server_stats", rng, kind, extra_ok=True)   # ignores fields

    def c_learner_info(self, rng, kind):
        return self._noargs(MZ, "learner_info", rng, kind, extra_ok=False)

    def c_stream_info(self, rng, kind):
        return self._noargs(ST, "stream_info", rng, kind, extra_ok=False)

    def c_register(self, rng, kind):
        actor = int(rng.integers(20_000, 20_050))
        req = {"actor_id": np.int64(actor), "run_id": np.int64(rng.integers(1, 2**62)),
               "num_envs": np.int64(rng.integers(1, 4)), "num_nodes": np.int64(rng.integers(2, self.max_nodes + 1))}
        if kind == "structural":
            return Case(MZ, "register", kind, enc(self.structural(rng, req, tuple(req))), {INV})
        if kind == "values":
            k = str(rng.choice(["actor_id", "run_id", "num_envs", "num_nodes", "hostile"]))
            if k == "hostile":    # another run naming one of the fuzzer's live actor ids
                req["actor_id"] = np.int64(10_000 + int(rng.integers(self.pool_size)))
                return Case(MZ, "register", kind, enc(req), {OK, UNAV, RES})
            if k in ("actor_id", "run_id"):
                v = rng.choice([-2**63, 2**63 - 1, 0, -1])
                req[k] = np.int64(v)
                if rng.random() < 0.3:
                    req[k] = np.uint64(2**64 - 1)
                    return Case(MZ, "register", kind, enc(req), {INV})
                return Case(MZ, "register", kind, enc(req), {OK, UNAV, RES})
            lim = self.max_envs if k == "num_envs" else self.max_nodes
            low = 1 if k == "num_envs" else 2
            v = rng.choice([low - 1, -5, lim + 1, 2**62, -2**63])
            req[k] = np.int64(v)
            return Case(MZ, "register", kind, enc(req), {INV})
        return Case(MZ, "register", kind, enc(req), {OK, RES, UNAV})

    def c_release(self, rng, kind):
        req = {"lease": np.int64(rng.integers(-2**62, 2**62))}
        if kind == "structural":
            return Case(MZ, "release", kind, enc(self.structural(rng, req, ("lease",))), {INV})
        if kind == "values":
            req["lease"] = [np.int64(0), np.int64(-2**63), np.uint64(2**64 - 1), np.int8(-1)][int(rng.integers(4))]
            code = {INV} if isinstance(req["lease"], np.uint64) else {OK}
            return Case(MZ, "release", kind, enc(req), code)
        if rng.random() < 0.05:          # now and then, release one of the fuzzer's own leases
            i, got = self.lease(rng)
            if got is not None:
                self.forget(i, got[0])
                return Case(MZ, "release", kind, enc({"lease": np.int64(got[0])}), {OK})
        return Case(MZ, "release", kind, enc(req), {OK})

    def _lease_case(self, rng, method, kind, build):
        """build(lease_id, E, N) -> (fields, expect) for a kind; lease loss is tolerated."""
        i, got = self.lease(rng)
        if got is None:
            lease_id, e, n = int(rng.integers(1, 2**62)), 2, 4
        else:
            lease_id, e, n = got
        fields, expect = build(lease_id, e, n)
        # The lease may have ended meanwhile (a fuzzed release or register of the same actor
        # id), and the lease is looked up before some checks: FAILED_PRECONDITION is legitimate.
        expect = expect | {FP}

        def on_result(code, i=i, lease_id=lease_id):
            if code == FP:
                self.forget(i, lease_id)
        return Case(MZ, method, kind, enc(fields), expect, on_result)

    def _obs(self, rng, b, shape, dtype):
        return (rng.normal(size=(b, *shape)) * 0.1).astype(dtype)

    def c_initial_inference(self, rng, kind):
        def build(lease_id, e, n):
            obs = self._obs(rng, e, self.obs_shape, self.obs_dtype)
            req = {"lease": np.int64(lease_id), "observation": obs}
            if rng.random() < 0.3:
                k = int(rng.integers(1, e + 1))
                req["slots"] = rng.permutation(e)[:k].astype(np.int32)
                req["observation"] = obs[:k]
            if kind == "structural":
                return self.structural(rng, req, ("lease",)), {INV}
            if kind == "values":
                v = rng.random()
                if v < 0.4:      # non-finite / extreme observations: served or refused, never a crash
                    o = np.array(req["observation"])
                    o.flat[int(rng.integers(o.size))] = rng.choice(EXTREME_F)
                    if rng.random() < 0.3:
                        o[:] = rng.choice(EXTREME_F)
                    req["observation"] = o
                    return req, {OK, INV}
                if v < 0.55:
                    req["lease"] = np.int64(rng.choice([0, -1, 2**63 - 1, -2**63]))
                    return req, {FP}
                if v < 0.7:
                    req["slots"] = np.array(rng.choice([[0, 0], [-1, 0], [e, 0], [2**31 - 1, 0]])[:2], np.int32)
                    req["observation"] = self._obs(rng, 2, self.obs_shape, self.obs_dtype)
                    return req, {INV}
                if v < 0.85:      # batch size mismatching the lease, empty, above max_batch
                    b = int(rng.choice([0, e + 1, 1025]))
                    req.pop("slots", None)
                    req["observation"] = np.zeros((b, *self.obs_shape), self.obs_dtype)
                    return req, {INV}
                o = np.asarray(req["observation"]).astype(np.float64)    # exact dtype required
                req["observation"] = o
                return req, {INV}
            return req, {OK}
        return self._lease_case(rng, "initial_inference", kind, build)

    def c_recurrent_inference(self, rng, kind):
        def build(lease_id, e, n):
            parent = rng.integers(0, n, e).astype(np.int32)
            action = rng.integers(0, self.num_actions, e).astype(np.int32)
            new = rng.integers(1, n, e).astype(np.int32)
            req = {"lease": np.int64(lease_id), "parent_node": parent, "action": action, "new_node": new}
            if rng.random() < 0.3:
                k = int(rng.integers(1, e + 1))
                req.update(slots=rng.permutation(e)[:k].astype(np.int32), parent_node=parent[:k],
                           action=action[:k], new_node=new[:k])
            if kind == "structural":
                return self.structural(rng, req, ("lease",)), {INV}
            if kind == "values":
                k = str(rng.choice(["parent_node", "action", "new_node", "slots", "lease"]))
                if k == "lease":
                    req["lease"] = np.int64(rng.choice([0, -1, 2**63 - 1]))
                    return req, {FP}
                b = len(req["parent_node"])
                bad = {"parent_node": [-1, n, 2**31 - 1, -2**31], "action": [-1, self.num_actions, 2**31 - 1],
                       "new_node": [0, -1, n, 2**31 - 1], "slots": [-1, e, 2**31 - 1]}[k]
                arr = np.array(req.get(k, np.arange(b, dtype=np.int32)), np.int32)
                arr[int(rng.integers(b))] = rng.choice(bad)
                req[k] = arr
                if k == "slots" and b == 1 and rng.random() < 0.5:
                    pass
                return req, {INV}
            return req, {OK}
        return self._lease_case(rng, "recurrent_inference", kind, build)

    def c_initial_inference_ship(self, rng, kind):
        b = int(rng.integers(1, 9))
        req = {"observation": self._obs(rng, b, self.obs_shape, self.obs_dtype)}
        if kind == "structural":
            return Case(MZ, "initial_inference_ship", kind, enc(self.structural(rng, req)), {INV})
        if kind == "values":
            if rng.random() < 0.7:
                o = req["observation"]
                o.flat[int(rng.integers(o.size))] = rng.choice(EXTREME_F)
                return Case(MZ, "initial_inference_ship", kind, enc(req), {OK, INV})
            req["observation"] = np.zeros((int(rng.choice([0, 1025, 5000])), *self.obs_shape), self.obs_dtype)
            return Case(MZ, "initial_inference_ship", kind, enc(req), {INV})
        return Case(MZ, "initial_inference_ship", kind, enc(req), {OK})

    def c_recurrent_inference_ship(self, rng, kind):
        b = int(rng.integers(1, 9))
        req = {"hidden_state": rng.normal(size=(b, *self.hidden_shape)).astype(self.hidden_dtype),
               "action": rng.integers(0, self.num_actions, b).astype(np.int32)}
        m = "recurrent_inference_ship"
        if kind == "structural":
            return Case(MZ, m, kind, enc(self.structural(rng, req)), {INV})
        if kind == "values":
            v = rng.random()
            if v < 0.6:
                h = req["hidden_state"]
                h.flat[int(rng.integers(h.size))] = rng.choice(EXTREME_F)
                if rng.random() < 0.3:
                    h[:] = rng.choice(EXTREME_F)
                return Case(MZ, m, kind, enc(req), {OK, INV})
            req["action"] = req["action"].copy()
            req["action"][0] = rng.choice([-1, self.num_actions, 2**31 - 1])
            return Case(MZ, m, kind, enc(req), {INV})
        return Case(MZ, m, kind, enc(req), {OK})

    # push_segments
    def segment(self, rng, t=None) -> dict:
        t = int(rng.integers(1, 51)) if t is None else t
        p = rng.dirichlet(np.ones(self.num_actions), t).astype(np.float32)
        p /= p.sum(axis=1, keepdims=True)
        return {"episode_id": np.int64(rng.integers(1, 2**62)), "start": np.int64(0),
                "observations": self._obs(rng, t, self.obs_shape, self.obs_dtype),
                "actions": rng.integers(0, self.num_actions, t).astype(np.int32),
                "rewards": np.ones(t, np.float32),
                "root_values": rng.uniform(0, 50, t).astype(np.float32),
                "policies": p, "to_play": np.zeros(t, np.int8),
                "terminated": np.bool_(rng.random() < 0.3), "truncated": np.bool_(False)}

    def poison(self, rng, seg: dict) -> dict:
        """A segment the learner must refuse (ValueError -> INVALID_ARGUMENT)."""
        seg = dict(seg)
        t = len(seg["actions"])
        op = int(rng.integers(14))
        f = rng.choice(EXTREME_F[:3])
        if op == 0:
            o = seg["observations"].copy()
            o.flat[int(rng.integers(o.size))] = f
            seg["observations"] = o
        elif op in (1, 2, 3):
            k = ("rewards", "root_values", "policies")[op - 1]
            a = seg[k].copy()
            a.flat[int(rng.integers(a.size))] = rng.choice([np.nan, np.inf, 3e38, -3e38])
            seg[k] = a
        elif op == 4:
            seg["priorities"] = np.full(t, rng.choice([np.nan, np.inf, -1.0, 3e38]), np.float32)
        elif op == 5:
            a = seg["actions"].copy()
            a[0] = rng.choice([-1, self.num_actions, 2**31 - 1])
            seg["actions"] = a
        elif op == 6:
            seg["policies"] = np.full_like(seg["policies"], 0.7)
        elif op == 7:
            seg["to_play"] = np.ones(t, np.int8)
        elif op == 8:
            seg["start"] = np.int64(rng.choice([-1, 2**62, -2**63]))
        elif op == 9:
            seg["episode_id"] = np.uint64(2**64 - 1)
        elif op == 10:
            seg["terminated"], seg["truncated"] = np.bool_(True), np.bool_(True)
        elif op == 11:
            seg["observations"] = seg["observations"][:0]
            seg.update({k: seg[k][:0] for k in ("actions", "rewards", "root_values", "policies", "to_play")})
        elif op == 12:
            seg["legal_masks"] = np.zeros((t, self.num_actions), bool)
        else:
            k = str(rng.choice(["observations", "actions", "episode_id", "terminated"]))
            if rng.random() < 0.5:
                del seg[k]
            else:
                seg["unknown_field"] = np.zeros(2, np.float32)
        return seg

    def c_push_segments(self, rng, kind):
        m = "push_segments"
        n = int(rng.integers(1, 4))
        segs = [self.segment(rng) for _ in range(n)]
        if kind == "valid":
            if rng.random() < 0.2:
                segs.append({"report": np.bool_(True), "episode_return": np.array([10.0, 20.0], np.float32),
                             "episode_length": np.array([10, 20], np.int64), "evaluation": np.bool_(False)})
            tensors = {f"{i}/{k}": v for i, s in enumerate(segs) for k, v in s.items()}
            return Case(MZ, m, kind, enc(tensors), {OK, RES})
        if kind == "structural":
            seg = segs[0]
            op = int(rng.integers(5))
            if op == 0:                 # a field with the wrong dtype
                k = str(rng.choice(["observations", "actions", "rewards", "policies", "terminated",
                                    "episode_id"]))
                seg[k] = {"observations": lambda a: a.astype(np.float64),
                          "actions": lambda a: a.astype(np.float32) + 0.5,
                          "rewards": lambda a: a.astype(np.int64),
                          "policies": lambda a: a.astype(np.int32),
                          "terminated": lambda a: np.float32(1),
                          "episode_id": lambda a: np.float64(a)}[k](np.asarray(seg[k]))
            elif op == 1:               # wrong shape
                k = str(rng.choice(["observations", "actions", "policies", "episode_id"]))
                a = np.asarray(seg[k])
                seg[k] = np.stack([a, a]) if a.ndim else a.reshape(1)
            elif op == 2:               # missing field
                del seg[str(rng.choice(list(seg)))]
            tensors = {f"{i}/{k}": v for i, s in enumerate(segs) for k, v in s.items()}
            if op == 3:                 # bad tensor names / indices
                bad = str(rng.choice(["x", "/x", "a/x", "-1/x", "0/", "5/observations", "01x/y",
                                      "\u00b3/x", "\u0663/x", "1\u00b2/x", "99999999999999999999/x",
                                      " 0/x", "+0/x", "00/x"]))
                tensors[bad] = np.zeros(1, np.float32)
            if op == 4:                 # no segments at all but junk
                tensors = {"99/observations": np.zeros((1, 4), np.float32)}
            return Case(MZ, m, kind, enc(tensors), {INV})
        # values: one poisoned segment among valid ones; all or nothing -> INVALID_ARGUMENT
        v = rng.random()
        if v < 0.8:
            j = int(rng.integers(n))
            segs[j] = self.poison(rng, segs[j])
            tensors = {f"{i}/{k}": v for i, s in enumerate(segs) for k, v in s.items()}
            return Case(MZ, m, kind, enc(tensors), {INV})
        if v < 0.9:                     # a broken chain: continuing an unknown episode
            segs[0]["start"] = np.int64(rng.integers(1, 10**6))
            tensors = {f"{i}/{k}": v for i, s in enumerate(segs) for k, v in s.items()}
            return Case(MZ, m, kind, enc(tensors), {OK, INV, RES})
        rep = {"report": np.bool_(True),
               "episode_return": np.array([rng.choice([np.nan, np.inf, 3e38, 1.0])], np.float32),
               "episode_length": np.array([rng.choice([-1, 2**62, 5])], np.int64),
               "evaluation": [np.bool_(True), np.ones(3, bool), np.float32(np.nan)][int(rng.integers(3))]}
        tensors = {f"0/{k}": v for k, v in rep.items()}
        return Case(MZ, m, kind, enc(tensors), {OK, INV})

    # Streaming inference
    def c_inference(self, rng, kind):
        ne = self.st_num_envs
        b = int(rng.integers(1, ne + 1))
        env_ids = rng.permutation(ne)[:b].astype(np.int32)
        req = {"env_ids": env_ids, "run_ids": rng.integers(1, 2**62, b).astype(np.int64),
               "rewards": np.ones(b, np.float32), "terminated": rng.random(b) < 0.1,
               "truncated": np.zeros(b, bool),
               "observations": self._obs(rng, b, self.st_obs_shape, self.st_obs_dtype)}
        if rng.random() < 0.3:
            req["truncated"] = (rng.random(b) < 0.5) & ~req["terminated"]
            req["final_observations"] = self._obs(rng, b, self.st_obs_shape, self.st_obs_dtype)
        m = "inference"
        if kind == "structural":
            return Case(ST, m, kind, enc(self.structural(rng, req)), {INV})
        if kind == "values":
            op = int(rng.integers(9))
            if op == 0:
                req["rewards"] = req["rewards"].copy()
                req["rewards"][0] = rng.choice([np.nan, np.inf, -np.inf])
            elif op == 1:
                o = req["observations"].copy()
                o.flat[int(rng.integers(o.size))] = rng.choice([np.nan, np.inf, -np.inf])
                req["observations"] = o
            elif op == 2:
                req["env_ids"] = req["env_ids"].copy()
                req["env_ids"][0] = rng.choice([-1, ne, 2**31 - 1, -2**31])
            elif op == 3:
                req["env_ids"] = np.zeros(b + 1, np.int32)
                for k in ("run_ids", "rewards", "terminated", "truncated", "observations"):
                    req[k] = np.concatenate([req[k], req[k][:1]])
                req.pop("final_observations", None)
                req["truncated"] = np.zeros(b + 1, bool)
            elif op == 4:
                req["run_ids"] = req["run_ids"].copy()
                req["run_ids"][0] = 0
            elif op == 5:
                req["terminated"] = np.ones(b, bool)
                req["truncated"] = np.ones(b, bool)
                req["final_observations"] = req["observations"]
            elif op == 6:
                req["terminated"] = np.zeros(b, bool)
                req["truncated"] = np.ones(b, bool)
                req.pop("final_observations", None)
            elif op == 7:
                req["terminated"] = np.zeros(b, bool)
                req["truncated"] = np.ones(b, bool)
                f = self._obs(rng, b, self.st_obs_shape, self.st_obs_dtype)
                f.flat[0] = np.nan
                req["final_observations"] = f
            else:        # extreme but finite: accepted (rewards sum into episode returns)
                req["rewards"] = np.full(b, rng.choice([3e38, -3e38, 1e30]), np.float32)
                req["observations"] = np.full_like(req["observations"], rng.choice([3e38, -3e38]))
                return Case(ST, m, kind, enc(req), {OK, INV})
            return Case(ST, m, kind, enc(req), {INV})
        # valid: may collide with a real actor's request for the same env in one batch
        return Case(ST, m, kind, enc(req), {OK, INV})


# -- phases --------------------------------------------------------------------------------------

def fuzz(fz: Fuzzer, learners: list, requests: int, threads: int, seed: int) -> int:
    crashes = 0
    next_report = [0]
    done = threading.Event()
    counter = [0]
    counter_lock = threading.Lock()

    def worker(index):
        rng = np.random.default_rng([seed, index])
        while not done.is_set():
            with counter_lock:
                if counter[0] >= requests:
                    return
                counter[0] += 1
            case = fz.make_case(rng)
            fz.run_case(case)

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    t0 = time.monotonic()
    for t in pool:
        t.start()
    step = max(requests // 10, 1)
    while any(t.is_alive() for t in pool):
        time.sleep(0.5)
        if fz.sent >= next_report[0]:
            next_report[0] += step
            alive = all(l.alive() for l in learners)
            print(f"[{time.monotonic() - t0:5.0f}s] fuzz requests={fz.sent} unexpected={fz.unexpected_n} "
                  f"learners_alive={int(alive)}", flush=True)
            if not alive:
                crashes += sum(not l.alive() for l in learners)
                done.set()
    for t in pool:
        t.join()
    # Both still answer well-formed requests.
    for server, service, method in (("mz", MZ, "model_info"), ("st", ST, "stream_info")):
        code, _, details = fz.call(server, service, method, enc({}))
        if code != OK:
            print(f"after fuzzing, {service}/{method} answered {code.name}: {details}", flush=True)
            crashes += 1
    return crashes


def atomic_push_check(fz: Fuzzer, rng) -> bool:
    """A push of valid segments plus one poisoned one stores nothing; the valid ones alone
    are stored. env_steps (learner_info) counts stored steps."""
    ok = True
    for _ in range(10):
        before = int(fz.call_ok("mz", MZ, "learner_info", {})["env_steps"])
        segs = [fz.segment(rng, 20), fz.segment(rng, 20)]
        bad = fz.poison(rng, fz.segment(rng, 20))
        tensors = {f"{i}/{k}": v for i, s in enumerate(segs + [bad]) for k, v in s.items()}
        code, _, details = fz.call("mz", MZ, "push_segments", enc(tensors))
        after = int(fz.call_ok("mz", MZ, "learner_info", {})["env_steps"])
        if code != INV or after != before:
            print(f"atomic push check: {code.name} ({details[:200]}), env_steps {before} -> {after}", flush=True)
            ok = False
    return ok


def train(fz: Fuzzer, rng, steps: int, timeout: float) -> tuple:
    """Pushes valid segments until the MuZero learner has trained ``steps`` more steps."""
    start = int(fz.call_ok("mz", MZ, "learner_info", {})["training_step"])
    t0 = time.monotonic()
    pushed = 0
    last = t0
    step = start
    while time.monotonic() - t0 < timeout:
        segs = [fz.segment(rng, 50) for _ in range(4)]
        tensors = {f"{i}/{k}": v for i, s in enumerate(segs) for k, v in s.items()}
        code, out, details = fz.call("mz", MZ, "push_segments", enc(tensors))
        if code == OK:
            pushed += 200
        elif code == RES:
            time.sleep(0.2)
        else:
            print(f"push_segments of valid segments answered {code.name}: {details}", flush=True)
            time.sleep(0.5)
        step = int(fz.call_ok("mz", MZ, "learner_info", {})["training_step"])
        if step - start >= steps:
            break
        if time.monotonic() - last > 5:
            last = time.monotonic()
            print(f"[train {last - t0:4.0f}s] training_step={step} (+{step - start}) pushed_env_steps={pushed}",
                  flush=True)
        time.sleep(0.02)
    return step - start, pushed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--train_steps", type=int, default=200,
                        help="training steps the MuZero learner must take after the fuzzing")
    parser.add_argument("--train_timeout_s", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default=None, help="where the learners write (default: a temp dir, "
                        "removed at the end unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the learners' logdirs")
    args = parser.parse_args()
    root = args.logdir or tempfile.mkdtemp(prefix="fuzz_rpc_")
    max_seconds = 3600
    print(f"learner logdirs under {root}", flush=True)
    mz = Learner("muzero", root, ["--num_actors=0", "--num_eval_actors=0",
                                  "--set=replay.min_steps_to_sample=200"], max_seconds)
    ppo = Learner("ppo", root, ["--algo=ppo", "--num_actors=1", "--envs_per_actor=1",
                                "--num_eval_actors=1", "--eval_envs_per_actor=1"], max_seconds)
    learners = [mz, ppo]
    crashes = 0
    trained = pushed = 0
    atomic_ok = alive = False
    fuzz_s = 0.0
    fz = None
    try:
        for learner in learners:
            print(f"{learner.name} learner serving on {learner.wait_address(300)}", flush=True)
        fz = Fuzzer(mz.address, ppo.address, args.threads, args.seed)
        print(f"fuzzing: {args.requests} requests, {args.threads} threads; MuZero obs {fz.obs_shape} "
              f"max_envs {fz.max_envs}; streaming envs {fz.st_num_envs}", flush=True)
        t0 = time.monotonic()
        crashes += fuzz(fz, learners, args.requests, args.threads, args.seed)
        fuzz_s = time.monotonic() - t0
        rng = np.random.default_rng([args.seed, 99])
        if all(l.alive() for l in learners):
            atomic_ok = atomic_push_check(fz, rng)
            trained, pushed = train(fz, rng, args.train_steps, args.train_timeout_s)
        alive = all(l.alive() for l in learners)
        crashes += sum(not l.alive() for l in learners)
    finally:
        codes = [l.stop() for l in learners]
    learner_tb, actor_tb = [], []
    for l in learners:
        lt, at = tracebacks(l.log_text())
        learner_tb += [f"{l.name}: {s}" for s in lt]
        actor_tb += [f"{l.name}: {s}" for s in at]
    restarts = sum(len(re.findall(r"exited with code .*; restarting it", l.log_text())) for l in learners)
    if fz is None:
        print(f"requests=0 crashes={crashes + 1} unexpected_status=0 learner_alive=0")
        return 1
    for line in fz.unexpected:
        print(f"unexpected: {line}")
    for line in learner_tb:
        print(f"learner traceback: {line}")
    for line in sorted(set(actor_tb)):
        print(f"actor traceback: {line}")
    for method in sorted(fz.counts):
        c = fz.counts[method]
        print(f"method={method} " + " ".join(f"{k}={v}" for k, v in sorted(c.items())))
    print(f"fuzz_seconds={fuzz_s:.0f} atomic_push_ok={int(atomic_ok)} trained_steps={trained} "
          f"pushed_env_steps={pushed} exit_codes={','.join(map(str, codes))} "
          f"learner_tracebacks={len(learner_tb)} actor_crashes={len(actor_tb)} actor_restarts={restarts}")
    crashes += len(learner_tb)
    ok = (crashes == 0 and fz.unexpected_n == 0 and alive and atomic_ok
          and trained >= args.train_steps and all(c == 0 for c in codes))
    print(f"requests={fz.sent} crashes={crashes} unexpected_status={fz.unexpected_n} "
          f"learner_alive={int(alive)}")
    if not args.keep and not args.logdir and ok:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
