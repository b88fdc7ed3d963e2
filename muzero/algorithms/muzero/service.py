"""MuZero methods on the batching server: leases, cached inference, ship mode, learner hooks.

Methods (all on ``/muzero.MuZero/``; tensors and error codes in docs/PROTOCOL.md):

* ``model_info``, ``register``, ``release``: model shapes; slot leases.
* ``initial_inference`` (cache mode): observations of leased slots -> value and
  policy logits; the root hidden states are written to node 0 of those slots.
* ``recurrent_inference`` (cache mode): (parent_node, action, new_node) per slot ->
  reward, value, policy logits; parent states are gathered from the cache and the
  new states written back. Hidden states never cross the wire.
* ``initial_inference_ship`` / ``recurrent_inference_ship``: the same computations
  with hidden states sent to and from the client (for comparison only).
* ``push_segments``, ``learner_info``: delegated to handlers the learner supplies
  (``InMemoryLearnerHandlers`` is a test stand-in). ``server_stats``: counters.

``LocalClient`` (``service.local_client(...)``) calls ``initial_inference`` and
``recurrent_inference`` from inside the learner process (the reanalyse worker): its
requests are validated like a gRPC request's and queue in the same batches as the
actors', without the wire encoding or the network.

Consistency hook for the learner: every batch runs the model while holding
``service.model_lock``. A learner that trains the served model in place applies
its updates under that lock (``with service.model_lock: apply_gradients(...)``) and
then calls ``service.set_weights_version(step)``; a learner that keeps a separate
inference copy calls ``service.update_model(fn)`` (``fn(model)`` runs under the
lock between batches) or ``service.update_model(model=new_model)`` to swap models.
Responses to ``initial_inference`` and ``learner_info`` carry ``weights_version``.

The model: ``initial_inference(obs [B, *input_shape]) -> dict(value [B], reward [B],
policy_logits [B, A], hidden_state [B, *hidden_shape])``, ``recurrent_inference(
hidden [B, *hidden_shape], action [B] int32) -> same``, attributes ``input_shape``,
``input_dtype``, ``num_actions``, ``hidden_shape``. If it returns tf.Tensors the
cache is a tf.Variable and the cache steps run inside one tf.function; if numpy,
everything stays numpy. TensorFlow is imported only for a TensorFlow model.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, Optional

import grpc
import numpy as np

from muzero import core
from muzero.rpc import checks, wire
from muzero.algorithms.muzero.config import CacheServiceConfig
from muzero.rpc.config import ServerConfig
from muzero.algorithms.muzero.latent_cache import NumpyLatentCache, TFLatentCache
from muzero.rpc.leases import LeaseTable
from muzero.rpc.server import BatchingServer, Prepared, RequestError, invalid

_OUTPUT_KEYS = ("value", "reward", "policy_logits", "hidden_state")


def _finite(method: str, name: str, a: np.ndarray) -> np.ndarray:
    """Float arrays must hold only finite values (NaN in, NaN out would reach the search)."""
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise invalid(f"{method}: {name} holds a non-finite value; observations must be finite")
    return a


class _Runner:
    """The four model computations, numpy or TensorFlow, with the cache steps fused."""

    def __init__(self, model, cache, backend: str, input_shape, input_dtype, hidden_shape):
        self.model, self.cache = model, cache
        if backend == "tensorflow":
            self._build_tf(input_shape, input_dtype, hidden_shape)

    def initial_cache(self, obs, rows):
        """obs [B, *input], rows [B] int64 -> (value [B], policy_logits [B, A])."""
        out = self.model.initial_inference(obs)
        self.cache.scatter(rows, out["hidden_state"])
        return out["value"], out["policy_logits"]

    def recurrent_cache(self, parent_rows, action, new_rows):
        """parent_rows, new_rows [B] int64; action [B] int32 -> (reward, value, logits)."""
        out = self.model.recurrent_inference(self.cache.gather(parent_rows), action)
        self.cache.scatter(new_rows, out["hidden_state"])
        return out["reward"], out["value"], out["policy_logits"]

    def initial_ship(self, obs):
        out = self.model.initial_inference(obs)
        return tuple(out[k] for k in _OUTPUT_KEYS)

    def recurrent_ship(self, hidden, action):
        out = self.model.recurrent_inference(hidden, action)
        return tuple(out[k] for k in _OUTPUT_KEYS)

    def _build_tf(self, input_shape, input_dtype, hidden_shape):
        import tensorflow as tf

        obs = tf.TensorSpec([None, *input_shape], tf.as_dtype(input_dtype))
        rows = tf.TensorSpec([None], tf.int64)
        act = tf.TensorSpec([None], tf.int32)
        hid = tf.TensorSpec([None, *hidden_shape], self.cache.variable.dtype)
        # Concrete functions, traced once here: calling a tf.function re-binds and
        # canonicalises its arguments and looks up its trace on every call, which cost
        # about 300 µs of the GIL per batch (measured, 1,024 rows), a third of the call.
        def concrete(fn, *signature):
            return tf.function(fn, input_signature=list(signature), autograph=False).get_concrete_function()

        self.initial_cache = concrete(self.initial_cache, obs, rows)
        self.recurrent_cache = concrete(self.recurrent_cache, rows, act, rows)
        self.initial_ship = concrete(self.initial_ship, obs)
        self.recurrent_ship = concrete(self.recurrent_ship, hid, act)


class InMemoryLearnerHandlers:
    """Stand-in for the learner's push_segments / learner_info handlers (tests, benches).

    Keeps copies of the pushed segments in a list; ``training_step`` is whatever the
    test sets."""

    def __init__(self):
        self.lock = threading.Lock()
        self.segments: list[dict] = []
        self.steps_received = 0
        self.training_step = 0

    def push_segments(self, segments: list) -> dict:
        copies = [{k: np.array(v) for k, v in seg.items()} for seg in segments]
        steps = sum(len(seg["actions"]) for seg in copies if "actions" in seg and seg["actions"].ndim)
        with self.lock:
            self.segments.extend(copies)
            self.steps_received += steps
            return {"accepted": len(copies), "segments_received": len(self.segments)}

    def learner_info(self) -> dict:
        with self.lock:
            return {"training_step": self.training_step, "segments_received": len(self.segments),
                    "steps_received": self.steps_received}


class MuZeroService(core.InferenceService):
    """Binds the MuZero methods for ``model`` on a ``BatchingServer``."""

    def __init__(self, model, config: CacheServiceConfig = CacheServiceConfig(), *,
                 push_segments_handler: Optional[Callable[[list], Optional[dict]]] = None,
                 learner_info_handler: Optional[Callable[[], dict]] = None):
        self.config = config
        self.model_lock = threading.RLock()
        self.weights_version = 0
        self._push_handler, self._info_handler = push_segments_handler, learner_info_handler
        self.input_shape = tuple(int(d) for d in model.input_shape)
        self.input_dtype = np.dtype(getattr(model.input_dtype, "as_numpy_dtype", model.input_dtype))
        self.num_actions = int(model.num_actions)
        self.hidden_shape = tuple(int(d) for d in model.hidden_shape)
        self.backend, hidden_dtype = self._probe(model)
        self.hidden_dtype = np.dtype(hidden_dtype)
        wire.dtype_code(self.input_dtype)
        cache_cls = TFLatentCache if self.backend == "tensorflow" else NumpyLatentCache
        kwargs = {"device": config.device} if self.backend == "tensorflow" else {}
        self.cache = cache_cls(config.cache_slots, config.max_nodes, self.hidden_shape,
                               self.hidden_dtype, **kwargs)
        # One lease takes at most max_lease_slots_fraction of the slots (at least one), and
        # no more rows than one batch holds.
        self.max_lease_slots = max(1, int(config.cache_slots * config.max_lease_slots_fraction))
        self.max_envs = min(config.initial_max_batch, config.recurrent_max_batch,
                            self.max_lease_slots)
        self.leases = LeaseTable(config.cache_slots, config.max_nodes, config.lease_timeout_s,
                                 supersede_idle_s=config.supersede_idle_s,
                                 max_lease_slots=self.max_envs)
        self._runner = self._make_runner(model)
        self.server: Optional[BatchingServer] = None

    # -- model ------------------------------------------------------------------------------
    def _probe(self, model) -> tuple:
        """Calls the model once on zeros; checks output keys and shapes; picks the backend."""
        obs = np.zeros((2, *self.input_shape), self.input_dtype)
        out = model.initial_inference(obs)
        self._check_outputs("initial_inference", out)
        hidden = out["hidden_state"]
        backend = "numpy" if isinstance(hidden, np.ndarray) else None
        if backend is None and "tensorflow" in sys.modules:
            import tensorflow as tf
            if tf.is_tensor(hidden):
                backend = "tensorflow"
        if backend is None:
            raise TypeError(f"model hidden_state is a {type(hidden).__name__}; expected a numpy "
                            "array or a tf.Tensor")
        out = model.recurrent_inference(hidden, np.zeros(2, np.int32))
        self._check_outputs("recurrent_inference", out)
        dtype = hidden.dtype.as_numpy_dtype if backend == "tensorflow" else hidden.dtype
        return backend, dtype

    def _check_outputs(self, fn: str, out) -> None:
        a = self.num_actions
        want = {"value": (2,), "reward": (2,), "policy_logits": (2, a),
                "hidden_state": (2, *self.hidden_shape)}
        for key, shape in want.items():
            if key not in out:
                raise ValueError(f"model.{fn} returned no {key!r}; keys: {sorted(out)}")
            got = tuple(out[key].shape)
            if got != shape:
                raise ValueError(f"model.{fn} {key} has shape {list(got)} for a batch of 2; "
                                 f"expected {list(shape)} (num_actions={a}, "
                                 f"hidden_shape={list(self.hidden_shape)})")

    def _make_runner(self, model) -> _Runner:
        return _Runner(model, self.cache, self.backend, self.input_shape, self.input_dtype,
                       self.hidden_shape)

    def update_model(self, fn: Optional[Callable] = None, *, model=None,
                     version: Optional[int] = None) -> int:
        """Between batches: swap in ``model`` (same shapes) and/or run ``fn(model)``, then
        set the weights version (``version``, or the old one + 1). Returns it."""
        with self.model_lock:
            if model is not None:
                if (tuple(model.input_shape) != self.input_shape
                        or tuple(model.hidden_shape) != self.hidden_shape
                        or int(model.num_actions) != self.num_actions):
                    raise ValueError("update_model: the new model's input_shape, hidden_shape or "
                                     "num_actions differ from the served model's")
                self._runner = self._make_runner(model)
            if fn is not None:
                fn(self._runner.model)
            self.weights_version = self.weights_version + 1 if version is None else int(version)
            return self.weights_version

    def update_weights(self, fn: Callable, version: int) -> None:
        """``core.InferenceService``: ``fn()`` between batches, then the version."""
        self.update_model(lambda _model: fn(), version=version)

    def set_weights_version(self, version: int) -> None:
        self.weights_version = int(version)

    @property
    def model(self):
        return self._runner.model

    # -- binding ----------------------------------------------------------------------------
    def bind(self, server: BatchingServer) -> BatchingServer:
        cfg = self.config
        ready = None
        if cfg.close_when_all_leases_waiting:
            leases = self.leases

            def ready(n: int) -> bool:
                return n >= leases.num_active

        server.bind_unary("model_info", lambda t, c: self._model_info())
        server.bind_unary("register", self._register)
        server.bind_unary("release", self._release)
        server.bind_batched("initial_inference", self._prep_initial, self._run_initial,
                            cfg.initial_max_batch, cfg.initial_max_wait_ms, ready)
        server.bind_batched("recurrent_inference", self._prep_recurrent, self._run_recurrent,
                            cfg.recurrent_max_batch, cfg.recurrent_max_wait_ms, ready)
        server.bind_batched("initial_inference_ship", self._prep_initial_ship,
                            self._run_initial_ship, cfg.initial_max_batch, cfg.initial_max_wait_ms)
        server.bind_batched("recurrent_inference_ship", self._prep_recurrent_ship,
                            self._run_recurrent_ship, cfg.recurrent_max_batch,
                            cfg.recurrent_max_wait_ms)
        server.bind_unary("push_segments", self._push_segments)
        server.bind_unary("learner_info", self._learner_info)
        server.bind_unary("server_stats", lambda t, c: self.stats())
        self.server = server
        return server

    def local_client(self, actor_id: int, num_envs: int, num_nodes: int,
                     timeout_s: float = 60.0) -> "LocalClient":
        """An in-process client of this service's cache-mode inference (after ``bind``)."""
        return LocalClient(self, actor_id, num_envs, num_nodes, timeout_s)

    def stats(self, reset: bool = False) -> dict:
        out = self.server.stats(reset) if self.server is not None else {}
        out.update({"cache/live_leases": self.leases.num_active,
                    "cache/free_slots": self.leases.free_slots,
                    "model/weights_version": self.weights_version})
        return out

    # -- unary methods ----------------------------------------------------------------------
    def _model_info(self) -> dict:
        return {"num_actions": np.int64(self.num_actions),
                "input_shape": np.array(self.input_shape, np.int64),
                "input_dtype": np.uint8(wire.dtype_code(self.input_dtype)),
                "hidden_shape": np.array(self.hidden_shape, np.int64),
                "hidden_dtype": np.uint8(wire.dtype_code(self.hidden_dtype)),
                "max_envs": np.int64(self.max_envs),
                "max_nodes": np.int64(self.config.max_nodes),
                "weights_version": np.int64(self.weights_version)}

    def _register(self, t: dict, context) -> dict:
        m = "register"
        checks.check_fields(m, t, ("actor_id", "run_id", "num_envs", "num_nodes"))
        actor_id = checks.scalar_int(m, t, "actor_id", -2**63, 2**63 - 1)
        run_id = checks.scalar_int(m, t, "run_id", -2**63, 2**63 - 1)
        num_envs = checks.scalar_int(m, t, "num_envs", -2**63, 2**63 - 1)
        if not 1 <= num_envs <= self.max_envs:
            cfg = self.config
            raise invalid(f"{m}: num_envs={num_envs} is out of range [1, max_envs={self.max_envs}] "
                          f"(max_envs = min(initial_max_batch={cfg.initial_max_batch}, "
                          f"recurrent_max_batch={cfg.recurrent_max_batch}, "
                          f"max_lease_slots_fraction={cfg.max_lease_slots_fraction:g} x "
                          f"cache_slots={cfg.cache_slots}))")
        num_nodes = checks.scalar_int(m, t, "num_nodes", 2, self.config.max_nodes)
        lease = self.leases.register(actor_id, run_id, num_envs, num_nodes)
        info = self._model_info()
        info.update(lease=np.int64(lease.lease_id), num_envs=np.int64(num_envs),
                    num_nodes=np.int64(num_nodes))
        return info

    def _release(self, t: dict, context) -> dict:
        checks.check_fields("release", t, ("lease",))
        lease_id = checks.scalar_int("release", t, "lease", -2**63, 2**63 - 1)
        return {"released": np.bool_(self.leases.release(lease_id))}

    def _push_segments(self, t: dict, context) -> dict:
        if self._push_handler is None:
            raise RequestError(grpc.StatusCode.UNIMPLEMENTED, "push_segments: no learner handler")
        groups: dict[int, dict] = {}
        for name, arr in t.items():
            index, sep, field = name.partition("/")
            # ASCII decimal without leading zeros: str.isdigit() also accepts e.g. '³', which
            # int() refuses, and '01' would alias segment 1.
            if (not sep or not field or not index.isascii() or not index.isdigit()
                    or (len(index) > 1 and index[0] == "0")):
                raise invalid(f"push_segments: tensor name {name!r} must be '<segment index>/<field>' "
                              "(index in ASCII decimal digits, no leading zeros)")
            groups.setdefault(int(index), {})[field] = arr
        if sorted(groups) != list(range(len(groups))):
            raise invalid(f"push_segments: segment indices {sorted(groups)[:8]}... must be 0..n-1")
        try:
            result = self._push_handler([groups[i] for i in range(len(groups))])
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise invalid(f"push_segments: {type(e).__name__}: {e}") from None
        return dict(result or {})

    def _learner_info(self, t: dict, context) -> dict:
        checks.check_fields("learner_info", t, ())
        info = dict(self._info_handler()) if self._info_handler is not None else {}
        info.setdefault("weights_version", np.int64(self.weights_version))
        return info

    # -- cache mode -------------------------------------------------------------------------
    def _lease_and_rows(self, m: str, t: dict, batch: int):
        """The lease and the cache row base [B] int64 of the addressed slots."""
        lease_id = checks.scalar_int(m, t, "lease", -2**63, 2**63 - 1)
        lease = self.leases.get(lease_id)
        if "slots" not in t:
            if batch != lease.num_envs:
                raise invalid(f"{m}: batch size {batch} must equal the lease's num_envs "
                              f"{lease.num_envs} when no slots are given")
            return lease, lease.row_base
        slots = checks.array(m, t, "slots", np.dtype(np.int32), (batch,))
        checks.in_range(m, "slots", slots, 0, lease.num_envs)
        if np.bincount(slots, minlength=lease.num_envs).max() > 1:
            raise invalid(f"{m}: slots must not repeat a slot")
        return lease, lease.row_base[slots]

    def _prep_initial(self, t: dict, context):
        m = "initial_inference"
        checks.check_fields(m, t, ("lease", "observation"), ("slots",))
        b = checks.batch_dim(m, t, "observation", self.config.initial_max_batch)
        obs = _finite(m, "observation", checks.array(m, t, "observation", self.input_dtype, (b, *self.input_shape)))
        lease, rows = self._lease_and_rows(m, t, b)
        return Prepared(b, {"observation": obs, "rows": rows}, lease)

    def _prep_recurrent(self, t: dict, context):
        m = "recurrent_inference"
        checks.check_fields(m, t, ("lease", "parent_node", "action", "new_node"), ("slots",))
        b = checks.batch_dim(m, t, "parent_node", self.config.recurrent_max_batch)
        i32 = np.dtype(np.int32)
        parent = checks.array(m, t, "parent_node", i32, (b,))
        action = checks.array(m, t, "action", i32, (b,))
        new = checks.array(m, t, "new_node", i32, (b,))
        lease, rows = self._lease_and_rows(m, t, b)
        checks.in_range(m, "parent_node", parent, 0, lease.num_nodes)
        checks.in_range(m, "new_node", new, 1, lease.num_nodes)
        checks.in_range(m, "action", action, 0, self.num_actions)
        return Prepared(b, {"parent": rows + parent, "action": action, "new": rows + new}, lease)

    def _drop_dead_leases(self, batch, row_keys: tuple) -> None:
        """Requests whose lease ended while queued fail; their rows point at the trash slot."""
        for i, lease in enumerate(batch.tags):
            if lease.alive:
                continue
            reason = self.leases.ended_reason(lease.lease_id)
            batch.fail(i, RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                                       f"lease={lease.lease_id} ended while the request was "
                                       f"queued ({reason})", tag=reason))
            lo, hi = batch.offsets[i], batch.offsets[i + 1]
            for key in row_keys:
                arr = np.array(batch.inputs[key])
                arr[lo:hi] = self.leases.trash_row_base
                batch.inputs[key] = arr

    def _run_initial(self, batch) -> dict:
        with self.model_lock, self.leases.lock:
            self._drop_dead_leases(batch, ("rows",))
            value, logits = self._runner.initial_cache(batch.inputs["observation"],
                                                       batch.inputs["rows"])
            batch.common["weights_version"] = np.int64(self.weights_version)
        return {"value": checks.to_numpy(value, np.float32), "policy_logits": checks.to_numpy(logits, np.float32)}

    def _run_recurrent(self, batch) -> dict:
        with self.model_lock, self.leases.lock:
            self._drop_dead_leases(batch, ("parent", "new"))
            reward, value, logits = self._runner.recurrent_cache(
                batch.inputs["parent"], batch.inputs["action"], batch.inputs["new"])
        return {"reward": checks.to_numpy(reward, np.float32), "value": checks.to_numpy(value, np.float32),
                "policy_logits": checks.to_numpy(logits, np.float32)}

    # -- ship mode --------------------------------------------------------------------------
    def _prep_initial_ship(self, t: dict, context):
        m = "initial_inference_ship"
        checks.check_fields(m, t, ("observation",))
        b = checks.batch_dim(m, t, "observation", self.config.initial_max_batch)
        obs = _finite(m, "observation", checks.array(m, t, "observation", self.input_dtype, (b, *self.input_shape)))
        return Prepared(b, {"observation": obs})

    def _prep_recurrent_ship(self, t: dict, context):
        m = "recurrent_inference_ship"
        checks.check_fields(m, t, ("hidden_state", "action"))
        b = checks.batch_dim(m, t, "hidden_state", self.config.recurrent_max_batch)
        hidden = checks.array(m, t, "hidden_state", self.hidden_dtype, (b, *self.hidden_shape))
        action = checks.array(m, t, "action", np.dtype(np.int32), (b,))
        checks.in_range(m, "action", action, 0, self.num_actions)
        return Prepared(b, {"hidden_state": hidden, "action": action})

    def _ship_outputs(self, outs) -> dict:
        value, reward, logits, hidden = outs
        return {"value": checks.to_numpy(value, np.float32), "reward": checks.to_numpy(reward, np.float32),
                "policy_logits": checks.to_numpy(logits, np.float32),
                "hidden_state": checks.to_numpy(hidden, self.hidden_dtype)}

    def _run_initial_ship(self, batch) -> dict:
        with self.model_lock:
            outs = self._runner.initial_ship(batch.inputs["observation"])
            batch.common["weights_version"] = np.int64(self.weights_version)
        return self._ship_outputs(outs)

    def _run_recurrent_ship(self, batch) -> dict:
        with self.model_lock:
            outs = self._runner.recurrent_ship(batch.inputs["hidden_state"], batch.inputs["action"])
        return self._ship_outputs(outs)


class LocalClient:
    """Cache-mode inference from inside the learner process, batched with the actors' calls.

    ``register()`` leases ``num_envs`` cache slots (as an actor's ``register`` would, with
    its own ``actor_id``); ``initial_inference`` / ``recurrent_fn`` then submit requests
    to the service's batched methods on the bound server, so they share batches (and the
    weights version) with the gRPC requests of the actors. ``release()`` gives the slots
    back: hold a lease only while searching, since with ``close_when_all_leases_waiting``
    every live lease is waited for before a batch closes early. Errors are the server's
    ``RequestError`` (e.g. the lease expired, or UNAVAILABLE while the server stops).
    One thread uses one client.
    """

    def __init__(self, service: MuZeroService, actor_id: int, num_envs: int, num_nodes: int,
                 timeout_s: float = 60.0):
        import secrets
        self.service = service
        self.actor_id, self.num_envs, self.num_nodes = int(actor_id), int(num_envs), int(num_nodes)
        self.run_id = secrets.randbits(63)
        self.timeout_s = float(timeout_s)
        self.lease: Optional[int] = None

    def _submit(self, name: str, item) -> dict:
        server = self.service.server
        if server is None or server.port is None:
            raise RuntimeError(f"LocalClient.{name}: the service is not bound to a started server")
        return server.submit_batched(name, item, self.timeout_s)   # the gRPC handler's queue

    def register(self) -> None:
        self.lease = self.service.leases.register(self.actor_id, self.run_id, self.num_envs,
                                                  self.num_nodes).lease_id

    def release(self) -> None:
        if self.lease is not None:
            self.service.leases.release(self.lease)
            self.lease = None

    def initial_inference(self, observations: np.ndarray) -> dict:
        """observations [E, *input_shape] -> dict(value [E], policy_logits [E, A],
        weights_version int); the root states go to node 0 of the leased slots."""
        t = {"lease": np.int64(self.lease), "observation": np.asarray(observations, self.service.input_dtype)}
        out = self._submit("initial_inference", self.service._prep_initial(t, None))
        return {"value": out["value"], "policy_logits": out["policy_logits"],
                "weights_version": int(out["weights_version"])}

    def recurrent_fn(self, parent_node, action, new_node):
        """The search driver's callback: (reward [E], value [E], policy_logits [E, A])."""
        t = {"lease": np.int64(self.lease), "parent_node": np.asarray(parent_node, np.int32),
             "action": np.asarray(action, np.int32), "new_node": np.asarray(new_node, np.int32)}
        out = self._submit("recurrent_inference", self.service._prep_recurrent(t, None))
        return out["reward"], out["value"], out["policy_logits"]


def serve(model, config: CacheServiceConfig = CacheServiceConfig(), *,
          server_config: ServerConfig = ServerConfig(), **handlers) -> tuple:
    """Builds, binds and starts a server (transport ``server_config``) with the MuZero
    service for ``model`` (``config``); returns (server, service)."""
    service = MuZeroService(model, config, **handlers)
    server = service.bind(BatchingServer(server_config))
    server.start()
    return server, service
