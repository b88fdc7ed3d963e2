"""Step-streaming ingestion (SEED RL's thin-actor path), for any algorithm with a ``StreamingPolicy``.

Thin actors (``muzero.algorithms.streaming_actor``) only step environments: each call sends, for
its envs, the reward/termination/truncation of the last transition and the observation
now shown, and gets the actions back. The server keeps everything else per env (the
recurrent state, the previous action and reward, the running episode totals, the
partial unroll), runs the policy once per batch of calls, and hands fixed-length
unrolls (format in ``muzero.core``) to ``sink`` — the learner's queue or replay.

Methods, on service ``muzero.Streaming`` (``STREAMING_SERVICE``) of a
``muzero.rpc.server.BatchingServer``:

* ``inference`` (batched). Request (B rows, one per env):
  ``env_ids`` i32 [B], ``run_ids`` i64 [B] (non-zero), ``rewards`` f32 [B],
  ``terminated`` bool [B], ``truncated`` bool [B], ``observations`` [B, *obs] (the
  policy's observation dtype), optional ``final_observations`` [B, *obs] — required
  when any ``truncated`` is true: the pre-reset observation of envs whose episode just
  ended (truncated, and terminated where the actor sends it; rows of other envs are
  ignored). Response: ``actions`` [B, *action_shape] (action dtype),
  ``weights_version`` i64.
* ``register_envs`` (unary): ``num_envs``, ``actor_id``, ``run_id`` (i64 scalars),
  ``evaluation`` (bool scalar) -> ``env_ids`` i32 [num_envs], ``lease`` i64,
  ``lease_timeout_s`` f64: env ids of the remote range (``num_remote_envs``, after the
  local training and evaluation ids) for an actor the learner did not start. A lease is a
  ``muzero.rpc.leases.LeaseTable`` lease over those ids (the rules of MuZero's cache leases:
  same actor id and run re-registering replaces its lease, another run of a busy actor id
  is told to retry, at most ``max_batch`` ids per lease); its ``inference`` calls carry it,
  and it ends when unused for ``lease_timeout_s`` or released, which frees the ids for the
  next actor. Refused with RESOURCE_EXHAUSTED when too few remote ids are free.
* ``release_envs`` (unary): ``lease`` -> ``released`` bool.
* ``stream_info`` (unary, no fields): ``num_train_envs``, ``num_eval_envs``, ``num_remote_envs``,
  ``observation_shape`` i64 [k], ``observation_dtype`` u8 (wire dtype code),
  ``action_shape`` i64 [k] (empty for discrete actions), ``action_dtype`` u8,
  ``action_low`` / ``action_high`` f32 [d] (continuous actions: the bounds the service
  clips into; empty for discrete ones), ``num_actions``, ``unroll_length``, ``overlap``,
  ``weights_version``, ``max_batch`` (i64 scalars unless said otherwise), ``lease_timeout_s``
  (f64).

``inference`` rows name either local env ids only (no ``lease`` field) or ids of the
remote range only, all owned by the ``lease`` the request carries (i64; a lease that is
not live fails the call with FAILED_PRECONDITION and its ``lease-*`` tag: register again).
Whether a remote env trains or evaluates is its lease's ``evaluation``.

Per-env semantics of one ``inference`` row (env ``e``, run id ``r``):

1. ``r`` differs from the run id the server holds for ``e`` (or ``e`` was never seen):
   ``e`` restarts — recurrent state := ``initial_state``, previous action := 0,
   previous reward := 0, episode totals := 0, partial unroll dropped. An episode that
   had received at least one transition counts as *abandoned*. The row's reward,
   terminated and truncated are ignored (taken as 0/False): they describe no step the
   server saw. Actors use a fresh run id per process start and per reconnect.
2. Otherwise the row's reward/terminated/truncated describe the transition into this
   observation: they add to the running episode return and length; on terminated or
   truncated the finished episode's (return, length) goes to ``context.episodes``
   (training or evaluation by env id, or by the lease), and the recurrent state, previous action and
   previous reward reset before acting on the (already reset) observation.
3. ``policy.act`` runs once for the whole batch (under ``model_lock``) with
   ``prev_reward`` = the reward just received (0 at an episode's start),
   ``evaluation`` = the env is an evaluation env and the rows' ``env_ids``;
   ``policy.value`` runs once on the final observations of truncated training rows (the
   bootstrap value). Continuous actions are clipped into the policy's
   ``action_low``/``action_high`` (counted as ``clipped_actions``). A non-finite action
   (a diverged network) is never sent: the batch fails with FAILED_PRECONDITION (tag
   ``nonfinite-action``, counted as ``nonfinite_batches``) before any step of it is
   recorded as acted on, and its actors start over under new run ids.
4. Training envs (ids ``[0, num_train_envs)`` and remote ids leased for training) append
   one step to their unroll; an
   unroll of ``overlap + unroll_length + 1`` steps is emitted and the next one starts
   with its last ``overlap + 1`` steps. With ``store_final_observations`` the unroll also
   holds ``final_observation`` [L, *obs]: at a step whose transition ended an episode, the
   observation it ended on (as sent; the reset observation for a terminated row sent
   without one), elsewhere the step's own observation — so the state reached by step t's
   action is always ``final_observation[t + 1]`` (replay learners store transitions).
   Evaluation envs (the next ``num_eval_envs``
   ids, and remote ids leased for evaluation) build no unrolls. ``context.add_env_steps`` counts one step per training row
   except a run's first call.

Back-pressure: ``sink(unroll) -> bool`` is called after the batch's actions are
computed, outside ``model_lock``, in the batch's thread; while it blocks no other
``inference`` batch runs, so actors wait (SEED's behaviour). A blocking sink must
return once its owner closes it (``UnrollQueue.put`` returns False when closed);
after ``close()`` or ``context.stop_event`` the service stops calling it and drops
new unrolls, so shutdown never waits on a full queue for more than the call in flight.
A sink returning False (closed, full) counts the unroll as dropped; one that raises is
logged and counted, never fatal for actors.

Size: one class, ``StepStreamingService``, whose per-env state machine (above) is one unit;
the builder of its algorithms is ``muzero.algorithms.streaming_builder``.

Imports numpy, grpc and the server, never TensorFlow.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Optional, Protocol, runtime_checkable

import grpc
import numpy as np

from muzero import core
from muzero.algorithms.streaming_actor import ENV_ID_CLASH, NONFINITE_ACTION, STREAMING_SERVICE
from muzero.rpc import checks, wire
from muzero.rpc.leases import LeaseTable
from muzero.rpc.server import BatchingServer, Prepared, RequestError, invalid

_LOG = logging.getLogger(__name__)
_REQUIRED = ("env_ids", "run_ids", "rewards", "terminated", "truncated", "observations")
_OPTIONAL = ("final_observations", "lease")
_RESERVED = ("observation", "reward", "terminated", "truncated", "bootstrap_value", "action",
             "env_id", "run_id", "final_observation")


@runtime_checkable
class StreamingPolicy(Protocol):
    """What ``StepStreamingService`` serves: a batched acting policy with a value head.

    Attributes:
      observation_shape: shape of one observation (tuple of ints).
      observation_dtype: numpy dtype of observations (any wire dtype).
      action_shape: shape of one action; ``()`` for discrete actions.
      action_dtype: ``np.int32`` for discrete actions, ``np.float32`` for continuous ones.
      num_actions: discrete: the number of actions A; continuous: 0.
      action_low, action_high (continuous actions only, optional): per-dimension bounds;
        the service clips actions into them and counts the rows it had to clip.

    Arrays may be numpy arrays or objects with ``.numpy()`` (tf.Tensor); the service
    converts them. Calls come from one thread at a time, under the service's
    ``model_lock`` (``update_weights`` takes the same lock).
    """

    observation_shape: tuple
    observation_dtype: np.dtype
    action_shape: tuple
    action_dtype: np.dtype
    num_actions: int

    def initial_state(self, num_envs: int) -> dict:
        """``{name: [num_envs, ...] np array}``: the recurrent state at an episode's start;
        ``{}`` for feed-forward policies."""

    def act(self, observation, prev_action, prev_reward, state: dict, evaluation, env_ids) -> tuple:
        """observation [B, *obs], prev_action [B, *action_shape], prev_reward [B] f32,
        state {k: [B, ...]}, evaluation [B] bool (True rows act deterministically/greedily),
        env_ids [B] int (e.g. for per-env exploration rates)
        -> (action [B, *action_shape] action_dtype, outputs {name: [B, ...] arrays stored in
        the unroll, e.g. policy_logits, baseline}, new_state {k: [B, ...]})."""

    def value(self, observation) -> np.ndarray:
        """[M, *obs] -> [M] float32: the behaviour policy's value (truncation bootstrap)."""


# -- request validation (shared checks in muzero.rpc.checks) ----------------------------------


def _finite(method: str, name: str, a: np.ndarray, env_ids: np.ndarray,
            rows: Optional[np.ndarray] = None) -> None:
    """All of float array ``a`` [R, ...] finite; the message names the first bad row (``rows``
    maps a's rows to request rows when ``a`` is a subset), its env id and the value."""
    if a.dtype.kind != "f" or a.size == 0:
        return
    ok = np.isfinite(a)
    if ok.all():
        return
    ok = ok.reshape(len(a), -1)
    r = int(np.flatnonzero(~ok.all(axis=1))[0])
    bad = float(a.reshape(len(a), -1)[r][~ok[r]][0])
    row = r if rows is None else int(rows[r])
    raise invalid(f"{method}: {name} holds a non-finite value {bad} at row {row} "
                  f"(env_id {int(env_ids[row])})")


def _dtype(d) -> np.dtype:
    return np.dtype(getattr(d, "as_numpy_dtype", d))


class StepStreamingService(core.InferenceService):
    """Per-env state and unroll assembly behind the ``muzero.Streaming`` methods.

    Args:
      policy: a ``StreamingPolicy``.
      num_train_envs: envs with ids [0, num_train_envs): build unrolls, count env steps.
      num_eval_envs: envs with the next ids: act with evaluation=True, no unrolls; their
        episodes are evaluation episodes.
      num_remote_envs: env ids after those, handed to remote actors by ``register_envs``
        (training or evaluation per lease); 0 = none.
      lease_timeout_s: a remote lease unused this long ends and frees its env ids.
      unroll_length: T; unrolls hold ``overlap + T + 1`` steps.
      overlap: steps shared by consecutive unrolls beyond SEED's one (burn-in); >= 0.
      sink: ``sink(unroll: dict) -> bool`` receives each finished unroll (its own arrays,
        not aliasing the service's buffers); may block (back-pressure), see the module doc.
      context: the run's ``core.RunContext`` (episodes, env steps, stop_event).
      max_batch: most rows per batch (and per request).
      max_wait_ms: a batch closes this long after its first request at the latest.
      store_final_observations: unrolls carry ``final_observation`` (see the module doc).
    """

    def __init__(self, policy, *, num_train_envs: int, num_eval_envs: int, unroll_length: int,
                 overlap: int, sink: Callable[[dict], bool], context: core.RunContext,
                 max_batch: int = 1024, max_wait_ms: float = 2.0, store_final_observations: bool = False,
                 num_remote_envs: int = 0, lease_timeout_s: float = 60.0):
        for name, value, lo in (("num_train_envs", num_train_envs, 0), ("num_eval_envs", num_eval_envs, 0),
                                ("num_remote_envs", num_remote_envs, 0),
                                ("unroll_length", unroll_length, 1), ("overlap", overlap, 0),
                                ("max_batch", max_batch, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
                raise ValueError(f"StepStreamingService: {name}={value!r} must be an integer >= {lo}")
        if num_train_envs + num_eval_envs + num_remote_envs < 1:
            raise ValueError("StepStreamingService: num_train_envs + num_eval_envs + num_remote_envs must be >= 1")
        if not 0 < float(lease_timeout_s) <= 1e9:
            raise ValueError(f"StepStreamingService: lease_timeout_s={lease_timeout_s!r} must be in (0, 1e9]")
        if not 0 <= float(max_wait_ms) <= 60_000:
            raise ValueError(f"StepStreamingService: max_wait_ms={max_wait_ms!r} must be in [0, 60000]")
        if not callable(sink):
            raise ValueError(f"StepStreamingService: sink={sink!r} is not callable")
        self.policy = policy
        self.num_train_envs, self.num_eval_envs = int(num_train_envs), int(num_eval_envs)
        self.num_remote_envs = int(num_remote_envs)
        self.remote_base = self.num_train_envs + self.num_eval_envs     # first remote env id
        self.num_envs = self.remote_base + self.num_remote_envs
        self.lease_timeout_s = float(lease_timeout_s)
        self.leases = LeaseTable(self.num_remote_envs, 1, self.lease_timeout_s,
                                 max_lease_slots=max(1, min(self.num_remote_envs, int(max_batch))),
                                 unit="remote env ids", size_name="num_remote_envs")
        self.unroll_length, self.overlap = int(unroll_length), int(overlap)
        self.length = self.overlap + self.unroll_length + 1          # L, steps per unroll
        self.max_batch, self.max_wait_ms = int(max_batch), float(max_wait_ms)
        self.context = context
        self._sink = sink
        self.model_lock = threading.RLock()
        self.weights_version = 0
        self.server: Optional[BatchingServer] = None
        self._closed = False

        self.observation_shape = tuple(int(d) for d in policy.observation_shape)
        self.observation_dtype = _dtype(policy.observation_dtype)
        self.action_shape = tuple(int(d) for d in policy.action_shape)
        self.action_dtype = _dtype(policy.action_dtype)
        self.num_actions = int(policy.num_actions)
        wire.dtype_code(self.observation_dtype)
        wire.dtype_code(self.action_dtype)
        self.discrete = self.action_dtype.kind in "iu"
        if self.discrete and self.num_actions < 1:
            raise ValueError(f"policy: discrete actions ({self.action_dtype}) need num_actions >= 1, "
                             f"got {self.num_actions}")
        if not self.discrete and self.action_dtype.kind != "f":
            raise ValueError(f"policy: action_dtype {self.action_dtype} must be an integer or float dtype")
        self.action_low = self.action_high = None
        if not self.discrete and getattr(policy, "action_low", None) is not None:
            self.action_low = np.broadcast_to(np.asarray(policy.action_low, np.float32), self.action_shape).copy()
            self.action_high = np.broadcast_to(np.asarray(policy.action_high, np.float32), self.action_shape).copy()
            if not (np.isfinite(self.action_low).all() and np.isfinite(self.action_high).all()
                    and (self.action_low < self.action_high).all()):
                raise ValueError(f"policy: action bounds must be finite with low < high; got "
                                 f"{self.action_low.tolist()} and {self.action_high.tolist()}")

        n, L = self.num_envs, self.length
        # Training rows of the unroll buffers: the local training envs, then the remote envs.
        nt = self.num_train_envs + self.num_remote_envs
        self._row = np.full(n, -1, np.int64)                      # env id -> unroll row (-1: none)
        self._row[:self.num_train_envs] = np.arange(self.num_train_envs)
        self._row[self.remote_base:] = self.num_train_envs + np.arange(self.num_remote_envs)
        self._train = np.zeros(n, bool)                           # env id -> builds unrolls
        self._train[:self.num_train_envs] = True
        # -- per-env state [N, ...]
        self._run_id = np.zeros(n, np.int64)                       # 0: never seen
        self._init_state = {k: checks.to_numpy(v).copy() for k, v in policy.initial_state(n).items()}
        for k, v in self._init_state.items():
            if v.ndim < 1 or v.shape[0] != n:
                raise ValueError(f"policy.initial_state({n})[{k!r}] has shape {list(v.shape)}; "
                                 f"expected a leading dimension {n}")
        self._state = {k: v.copy() for k, v in self._init_state.items()}
        self._prev_action = np.zeros((n, *self.action_shape), self.action_dtype)
        self._prev_reward = np.zeros(n, np.float32)
        self._ep_return = np.zeros(n, np.float64)
        self._ep_length = np.zeros(n, np.int64)
        self._mark = np.zeros(n, np.int64)                        # scratch: duplicate detection
        self._seen = np.zeros(n, bool)

        self.output_spec = self._probe()
        # -- partial unrolls [Nt, L, ...] of the training rows
        self._buf = {"observation": np.zeros((nt, L, *self.observation_shape), self.observation_dtype),
                     "reward": np.zeros((nt, L), np.float32),
                     "terminated": np.zeros((nt, L), bool),
                     "truncated": np.zeros((nt, L), bool),
                     "bootstrap_value": np.zeros((nt, L), np.float32),
                     "action": np.zeros((nt, L, *self.action_shape), self.action_dtype)}
        self.store_final_observations = bool(store_final_observations)
        if self.store_final_observations:
            self._buf["final_observation"] = np.zeros_like(self._buf["observation"])
        for k, (shape, dtype) in self.output_spec.items():
            self._buf[k] = np.zeros((nt, L, *shape), dtype)
        # The same memory as [Nt * L, ...]: row e * L + t is step t of env e (one-index writes).
        self._flat = {k: v.reshape(nt * L, *v.shape[2:]) for k, v in self._buf.items()}
        self._fill = np.zeros(nt, np.int64)                       # steps in each partial unroll
        # The state before step 0 of each partial unroll, and before the steps at positions
        # >= unroll_length (these become the next unrolls' first steps): [Nt, overlap + 1, ...].
        self._start_state = {k: np.zeros((nt, *v.shape[1:]), v.dtype) for k, v in self._init_state.items()}
        self._tail_state = {k: np.zeros((nt, self.overlap + 1, *v.shape[1:]), v.dtype)
                            for k, v in self._init_state.items()}

        self._stats_lock = threading.Lock()
        self._counters = dict.fromkeys(
            ("unrolls_emitted", "unrolls_delivered", "unrolls_dropped", "sink_errors",
             "abandoned_episodes", "run_starts", "episodes_train", "episodes_eval",
             "steps_train", "steps_eval", "rejected_requests", "clipped_actions",
             "nonfinite_batches", "remote_registrations"), 0)

    # -- policy checks ---------------------------------------------------------------------------
    def _probe(self) -> dict:
        """Calls the policy once on 2 zero rows; checks shapes; returns the outputs' spec
        ``{name: (shape of one row, dtype)}``."""
        obs = np.zeros((2, *self.observation_shape), self.observation_dtype)
        state = {k: checks.to_numpy(v) for k, v in self.policy.initial_state(2).items()}
        if sorted(state) != sorted(self._init_state):
            raise ValueError(f"policy.initial_state keys differ between calls: {sorted(state)} "
                             f"vs {sorted(self._init_state)}")
        action, outputs, new_state = self.policy.act(
            obs, np.zeros((2, *self.action_shape), self.action_dtype), np.zeros(2, np.float32),
            state, np.array([False, True]), np.array([0, self.num_envs - 1], np.int32))
        action = checks.to_numpy(action)
        if action.shape != (2, *self.action_shape):
            raise ValueError(f"policy.act returned actions of shape {list(action.shape)} for 2 rows; "
                             f"expected {[2, *self.action_shape]}")
        self._check_state("policy.act new_state", new_state, 2)
        spec = {}
        for k, v in outputs.items():
            v = checks.to_numpy(v)
            if k in _RESERVED or k.startswith("state/"):
                raise ValueError(f"policy.act output {k!r} clashes with an unroll field; "
                                 f"reserved: {list(_RESERVED)} and 'state/*'")
            if v.ndim < 1 or v.shape[0] != 2:
                raise ValueError(f"policy.act output {k!r} has shape {list(v.shape)} for 2 rows")
            spec[k] = (tuple(v.shape[1:]), v.dtype)
        value = checks.to_numpy(self.policy.value(obs))
        if value.shape != (2,):
            raise ValueError(f"policy.value returned shape {list(value.shape)} for 2 rows; expected [2]")
        return spec

    def _check_state(self, what: str, state: dict, rows: int) -> None:
        if sorted(state) != sorted(self._init_state):
            raise ValueError(f"{what} keys {sorted(state)} differ from initial_state's "
                             f"{sorted(self._init_state)}")
        for k, v in state.items():
            want = (rows, *self._init_state[k].shape[1:])
            if tuple(v.shape) != want:
                raise ValueError(f"{what}[{k!r}] has shape {list(v.shape)}; expected {list(want)}")

    # -- InferenceService -------------------------------------------------------------------------
    def bind(self, server: BatchingServer) -> BatchingServer:
        server.bind_unary("stream_info", self._stream_info, service=STREAMING_SERVICE)
        server.bind_unary("register_envs", self._register_envs, service=STREAMING_SERVICE)
        server.bind_unary("release_envs", self._release_envs, service=STREAMING_SERVICE)
        server.bind_batched("inference", self._prepare, self._run, self.max_batch, self.max_wait_ms,
                            service=STREAMING_SERVICE)
        self.server = server
        return server

    def update_weights(self, fn: Callable, version: int) -> None:
        """Runs ``fn()`` between inference batches, then sets ``weights_version``."""
        with self.model_lock:
            fn()
            self.weights_version = int(version)

    def stats(self, reset: bool = False) -> dict:
        """The server's stats plus ``streaming/<counter>``: unrolls_emitted (assembled),
        unrolls_delivered / unrolls_dropped (the sink accepted / refused them, or the service
        was closed), sink_errors, abandoned_episodes (an env restarted with a new run id in the
        middle of an episode), run_starts (first calls of a run id), episodes_train /
        episodes_eval, steps_train / steps_eval (transitions received), rejected_requests
        (requests failed inside a batch: an env id named by two requests of one batch),
        clipped_actions (continuous action rows clipped into the bounds), nonfinite_batches
        (batches refused because the policy returned a non-finite action), remote_registrations
        (leases granted); plus ``streaming/weights_version``, ``streaming/partial_unroll_steps``,
        ``streaming/live_leases`` and ``streaming/free_remote_envs``."""
        out = self.server.stats(reset) if self.server is not None else {}
        with self._stats_lock:
            for k, v in self._counters.items():
                out[f"streaming/{k}"] = v
            if reset:
                self._counters = dict.fromkeys(self._counters, 0)
        out["streaming/weights_version"] = self.weights_version
        out["streaming/partial_unroll_steps"] = int(self._fill.sum())
        out["streaming/live_leases"] = self.leases.num_active
        out["streaming/free_remote_envs"] = self.leases.free_slots
        return out

    def close(self) -> None:
        """Stops calling the sink: unrolls finished from now on are dropped, so an inference
        batch never waits on the sink again (the sink's owner closes its queue, which makes a
        call blocked in it return)."""
        self._closed = True

    # -- unary -------------------------------------------------------------------------------------
    def _stream_info(self, t: dict, context) -> dict:
        checks.check_fields("stream_info", t, ())
        return {"num_train_envs": np.int64(self.num_train_envs),
                "num_eval_envs": np.int64(self.num_eval_envs),
                "num_remote_envs": np.int64(self.num_remote_envs),
                "lease_timeout_s": np.float64(self.lease_timeout_s),
                "observation_shape": np.array(self.observation_shape, np.int64),
                "observation_dtype": np.uint8(wire.dtype_code(self.observation_dtype)),
                "action_shape": np.array(self.action_shape, np.int64),
                "action_dtype": np.uint8(wire.dtype_code(self.action_dtype)),
                "action_low": (np.zeros(0, np.float32) if self.action_low is None
                               else self.action_low.reshape(-1)),
                "action_high": (np.zeros(0, np.float32) if self.action_high is None
                                else self.action_high.reshape(-1)),
                "num_actions": np.int64(self.num_actions),
                "unroll_length": np.int64(self.unroll_length),
                "overlap": np.int64(self.overlap),
                "weights_version": np.int64(self.weights_version),
                "max_batch": np.int64(self.max_batch)}

    def _register_envs(self, t: dict, context) -> dict:
        m = "register_envs"
        checks.check_fields(m, t, ("num_envs", "actor_id", "run_id", "evaluation"))
        if self.num_remote_envs == 0:
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"{m}: this learner hands out no env ids (num_remote_envs=0); start it "
                               "with --remote_envs=N, or give the actor --env_id_base for ids of the "
                               "learner's own --num_actors")
        num_envs = checks.scalar_int(m, t, "num_envs", -2**63, 2**63 - 1)
        actor_id = checks.scalar_int(m, t, "actor_id", -2**63, 2**63 - 1)
        run_id = checks.scalar_int(m, t, "run_id", -2**63, 2**63 - 1)
        evaluation = t["evaluation"]
        if evaluation.shape != () or evaluation.dtype != np.dtype(bool):
            raise invalid(f"{m}: evaluation must be a 0-d bool tensor, got dtype {evaluation.dtype} "
                          f"shape {list(evaluation.shape)}")
        with self.leases.lock:     # the batch thread's bookkeeping holds it too
            lease = self.leases.register(actor_id, run_id, num_envs, 1)
            ids = (self.remote_base + lease.slots).astype(np.int32)
            self._train[ids] = not bool(evaluation)
            # Their state restarts on the first call, whoever held them; an episode the
            # previous holder had begun counts as abandoned now.
            abandoned = int(np.count_nonzero((self._run_id[ids] != 0) & (self._ep_length[ids] > 0)))
            self._run_id[ids] = 0
        with self._stats_lock:
            self._counters["remote_registrations"] += 1
            self._counters["abandoned_episodes"] += abandoned
        return {"env_ids": ids, "lease": np.int64(lease.lease_id),
                "lease_timeout_s": np.float64(self.lease_timeout_s)}

    def _release_envs(self, t: dict, context) -> dict:
        checks.check_fields("release_envs", t, ("lease",))
        lease_id = checks.scalar_int("release_envs", t, "lease", -2**63, 2**63 - 1)
        return {"released": np.bool_(self.leases.release(lease_id))}

    def _check_owner(self, m: str, t: dict, env_ids: np.ndarray):
        """Local ids without a lease, or remote ids all owned by the request's live lease;
        returns that lease (None for local ids)."""
        remote = env_ids >= self.remote_base
        if "lease" not in t:
            if remote.any():
                e = int(env_ids[remote][0])
                raise invalid(f"{m}: env id {e} is a remote env id (from {self.remote_base}); "
                              "its calls carry the lease register_envs granted")
            return None
        lease_id = checks.scalar_int(m, t, "lease", -2**63, 2**63 - 1)
        lease = self.leases.get(lease_id)            # FAILED_PRECONDITION when not live
        if not remote.all():
            raise invalid(f"{m}: env id {int(env_ids[~remote][0])} is not a remote env id; a call with a "
                          "lease names only the ids its lease holds")
        owner = self.leases.owners(env_ids - self.remote_base)
        if (owner != lease.lease_id).any():
            # The lease may have ended since get() (superseded, expired, released: its ids are
            # freed after it is marked ended); then the call fails with that lease's reason.
            self.leases.get(lease_id)
            e = int(env_ids[owner != lease.lease_id][0])
            raise invalid(f"{m}: env id {e} is not held by lease {lease_id}")
        return lease

    # -- batched inference ---------------------------------------------------------------------------
    def _prepare(self, t: dict, context) -> Prepared:
        """Validates one request (in its gRPC worker thread)."""
        m = "inference"
        checks.check_fields(m, t, _REQUIRED, _OPTIONAL)
        b = checks.batch_dim(m, t, "env_ids", self.max_batch)
        env_ids = checks.array(m, t, "env_ids", np.dtype(np.int32), (b,))
        run_ids = checks.array(m, t, "run_ids", np.dtype(np.int64), (b,))
        rewards = checks.array(m, t, "rewards", np.dtype(np.float32), (b,))
        terminated = checks.array(m, t, "terminated", np.dtype(bool), (b,))
        truncated = checks.array(m, t, "truncated", np.dtype(bool), (b,))
        obs_shape = (b, *self.observation_shape)
        observations = checks.array(m, t, "observations", self.observation_dtype, obs_shape)
        lo, hi = int(env_ids.min()), int(env_ids.max())
        if lo < 0 or hi >= self.num_envs:
            raise invalid(f"{m}: env_ids holds {lo if lo < 0 else hi}, out of range "
                          f"[0, {self.num_envs - 1}] (num_train_envs={self.num_train_envs}, "
                          f"num_eval_envs={self.num_eval_envs}, num_remote_envs={self.num_remote_envs})")
        lease = self._check_owner(m, t, env_ids)
        if b > 1:
            ids = np.sort(env_ids)
            same = ids[1:] == ids[:-1]
            if same.any():
                raise invalid(f"{m}: env_ids repeats env id {int(ids[1:][same][0])} within one request")
        if not run_ids.all():
            row = int(np.flatnonzero(run_ids == 0)[0])
            raise invalid(f"{m}: run_ids must be non-zero (0 means 'never seen'); row {row} "
                          f"(env_id {int(env_ids[row])}) holds 0")
        _finite(m, "rewards", rewards, env_ids)
        _finite(m, "observations", observations, env_ids)
        both = terminated & truncated
        if both.any():
            row = int(np.flatnonzero(both)[0])
            raise invalid(f"{m}: terminated and truncated are both true at row {row} "
                          f"(env_id {int(env_ids[row])}); an episode ends one way")
        final = observations
        if "final_observations" in t:
            final = checks.array(m, t, "final_observations", self.observation_dtype, obs_shape)
            if (truncated | terminated).any():
                rows = np.flatnonzero(truncated | terminated)
                _finite(m, "final_observations", final[rows], env_ids, rows)
        elif truncated.any():
            row = int(np.flatnonzero(truncated)[0])
            raise invalid(f"{m}: final_observations is required when any truncated is true "
                          f"(row {row}, env_id {int(env_ids[row])} is truncated)")
        return Prepared(b, {"env_ids": env_ids, "run_ids": run_ids, "rewards": rewards,
                            "terminated": terminated, "truncated": truncated,
                            "observations": observations, "final_observations": final}, lease)

    def _run(self, batch) -> dict:
        """One batch: per-env bookkeeping, one policy call, unroll assembly, then the sink.
        The bookkeeping holds the lease table's lock, so no lease changes hands meanwhile:
        requests whose lease ended while they were queued fail first."""
        inputs = batch.inputs
        env = inputs["env_ids"]
        b = len(env)
        with self.leases.lock:
            dead = self._fail_dead_leases(batch)
            keep = None
            if dead:
                keep = np.ones(b, bool)
                for i in dead:
                    keep[batch.offsets[i]:batch.offsets[i + 1]] = False
            if len(batch.sizes) > 1:
                shared = self._reject_shared_envs(batch, env, dead)
                if shared is not None:
                    keep = shared if keep is None else keep & shared
            if keep is not None:
                rows = np.flatnonzero(keep)
                inputs = {k: v[rows] for k, v in inputs.items()}
            if len(inputs["env_ids"]):
                action, unrolls, version = self._step(inputs)
            else:
                action, unrolls, version = None, [], self.weights_version
        if keep is not None:
            full = np.zeros((b, *self.action_shape), self.action_dtype)
            if action is not None:
                full[rows] = action
            action = full
        batch.common["weights_version"] = np.int64(version)
        if unrolls:
            self._deliver(unrolls)
        return {"actions": action}

    def _fail_dead_leases(self, batch) -> list:
        """Indices of the requests whose lease ended while they were queued (failed with
        FAILED_PRECONDITION and the lease's tag). Called holding the lease table's lock."""
        dead = []
        for i, lease in enumerate(batch.tags):
            if lease is not None and not lease.alive:
                reason = self.leases.ended_reason(lease.lease_id)
                batch.fail(i, RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                                           f"inference: lease={lease.lease_id} ended while the request was "
                                           f"queued ({reason}); register again", tag=reason))
                dead.append(i)
        return dead

    def _reject_shared_envs(self, batch, env: np.ndarray, skip=()) -> Optional[np.ndarray]:
        """Requests naming an env id that an earlier request of this batch names fail with
        INVALID_ARGUMENT; returns the rows to keep, or None when no env id repeats. Requests
        ``skip`` (already failed) are left out of the comparison."""
        b = len(env)
        order = np.arange(b)
        self._mark[env] = order                  # with repeats, the last write wins
        if (self._mark[env] == order).all():
            return None
        keep = np.ones(b, bool)
        seen = self._seen
        clashes = 0
        for i in range(len(batch.sizes)):         # a loop over requests, not envs
            lo, hi = batch.offsets[i], batch.offsets[i + 1]
            if i in skip:
                keep[lo:hi] = False
                continue
            ids = env[lo:hi]
            clash = seen[ids]
            if clash.any():
                batch.fail(i, RequestError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"inference: env_id {int(ids[clash][0])} is also named by another request "
                    "in the same batch; each env id belongs to one actor", tag=ENV_ID_CLASH))
                keep[lo:hi] = False
                clashes += 1
            else:
                seen[ids] = True
        seen[env] = False
        with self._stats_lock:
            self._counters["rejected_requests"] += clashes
        return keep

    def _reset_rows(self, e: np.ndarray) -> None:
        """Episode start for envs ``e``: recurrent state, previous action and reward."""
        for k, v in self._state.items():
            v[e] = self._init_state[k][e]
        self._prev_action[e] = 0
        self._prev_reward[e] = 0.0

    def _step(self, x: dict) -> tuple:
        """Rows ``x`` (env ids unique) -> (actions [B, *act], finished unrolls, weights version)."""
        env = x["env_ids"].astype(np.intp)
        train = self._train[env]
        first = self._run_id[env] != x["run_ids"]
        starts = abandoned = 0
        if first.any():
            fe = env[first]
            old = self._run_id[fe]
            abandoned = int(np.count_nonzero((old != 0) & (self._ep_length[fe] > 0)))
            starts = len(fe)
            self._run_id[fe] = x["run_ids"][first]
            self._reset_rows(fe)
            self._ep_return[fe] = 0.0
            self._ep_length[fe] = 0
            rows = self._row[fe]
            self._fill[rows[rows >= 0]] = 0
        seen = ~first
        reward = np.where(seen, x["rewards"], np.float32(0))
        terminated = x["terminated"] & seen
        truncated = x["truncated"] & seen
        done = terminated | truncated
        self._ep_return[env] += reward
        self._ep_length[env] += seen
        finished = None
        if done.any():
            de = env[done]
            finished = (self._ep_return[de].copy(), self._ep_length[de].copy(), ~self._train[de])
            self._ep_return[de] = 0.0
            self._ep_length[de] = 0
            self._reset_rows(de)
            reward_in = np.where(done, np.float32(0), reward)
        else:
            reward_in = reward
        prev_action = self._prev_action[env]
        state = {k: v[env] for k, v in self._state.items()}
        trunc_train = truncated & train
        with self.model_lock:
            action, outputs, new_state = self.policy.act(x["observations"], prev_action, reward_in,
                                                         state, ~train, x["env_ids"])
            values = (self.policy.value(x["final_observations"][trunc_train])
                      if trunc_train.any() else None)
            version = self.weights_version
        b = len(env)
        action = self._checked_actions(action, b, x["env_ids"])
        new_state = {k: checks.to_numpy(v) for k, v in new_state.items()}
        self._check_state("policy.act new_state", new_state, b)
        for k, v in new_state.items():
            self._state[k][env] = v
        self._prev_action[env] = action
        self._prev_reward[env] = reward_in

        unrolls = []
        if train.any():
            bootstrap = np.zeros(b, np.float32)
            if values is not None:
                values = checks.to_numpy(values, np.float32)
                if values.shape != (int(trunc_train.sum()),):
                    raise ValueError(f"policy.value returned shape {list(values.shape)} for "
                                     f"{int(trunc_train.sum())} rows")
                bootstrap[trunc_train] = values
            unrolls = self._append(env, train, x["observations"], reward, terminated, truncated,
                                   bootstrap, action, outputs, state, x["final_observations"])
        steps = seen & train
        n_train = int(np.count_nonzero(steps))
        n_eval = int(np.count_nonzero(seen)) - n_train
        if n_train:
            self.context.add_env_steps(n_train)
        n_ep_train = n_ep_eval = 0
        if finished is not None:
            returns, lengths, is_eval = finished
            if (~is_eval).any():
                self.context.episodes.add(returns[~is_eval], lengths[~is_eval], False)
            if is_eval.any():
                self.context.episodes.add(returns[is_eval], lengths[is_eval], True)
            n_ep_eval = int(is_eval.sum())
            n_ep_train = len(is_eval) - n_ep_eval
        with self._stats_lock:
            c = self._counters
            c["run_starts"] += starts
            c["abandoned_episodes"] += abandoned
            c["steps_train"] += n_train
            c["steps_eval"] += n_eval
            c["episodes_train"] += n_ep_train
            c["episodes_eval"] += n_ep_eval
            c["unrolls_emitted"] += len(unrolls)
        return action, unrolls, version

    def _checked_actions(self, action, b: int, env_ids: np.ndarray) -> np.ndarray:
        """The policy's actions [b, *action_shape] in the action dtype, continuous ones clipped
        into the bounds; a non-finite action fails the whole batch (nothing sent to an env)."""
        action = checks.to_numpy(action)
        if action.shape != (b, *self.action_shape):
            raise ValueError(f"policy.act returned actions of shape {list(action.shape)} for {b} rows")
        if self.discrete:
            return action.astype(self.action_dtype, copy=False)
        action = action.astype(self.action_dtype, copy=False)
        finite = np.isfinite(action).reshape(b, -1).all(axis=1)
        if not finite.all():
            with self._stats_lock:
                self._counters["nonfinite_batches"] += 1
            bad = env_ids[~finite]
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"inference: the policy returned non-finite actions for env ids "
                               f"{bad[:8].tolist()} (has training diverged? see the learner's losses); "
                               "no action of this batch was sent", tag=NONFINITE_ACTION)
        if self.action_low is not None:
            outside = ((action < self.action_low) | (action > self.action_high)).reshape(b, -1).any(axis=1)
            if outside.any():
                action = np.clip(action, self.action_low, self.action_high)
                with self._stats_lock:
                    self._counters["clipped_actions"] += int(outside.sum())
        return action

    def _append(self, env, train, observation, reward, terminated, truncated, bootstrap, action,
                outputs, state, final_observation) -> list:
        """Writes one step of every training row into its partial unroll; returns the
        unrolls that became full (and starts their successors)."""
        rows = None if train.all() else np.flatnonzero(train)      # usually every row trains

        def pick(a):
            return a if rows is None else a[rows]
        te = self._row[pick(env)]
        pos = self._fill[te]
        flat = te * self.length + pos                  # row of (env, position) in the [Nt * L, ...] views
        views = self._flat
        views["observation"][flat] = pick(observation)
        views["reward"][flat] = pick(reward)
        views["terminated"][flat] = pick(terminated)
        views["truncated"][flat] = pick(truncated)
        views["bootstrap_value"][flat] = pick(bootstrap)
        views["action"][flat] = pick(action)
        if self.store_final_observations:
            ended = pick(terminated | truncated)
            views["final_observation"][flat] = pick(observation)
            if ended.any():
                views["final_observation"][flat[ended]] = pick(final_observation)[ended]
        for k in self.output_spec:
            v = checks.to_numpy(outputs[k])
            if v.shape[:1] != (len(env),):
                raise ValueError(f"policy.act output {k!r} has shape {list(v.shape)} for {len(env)} rows")
            views[k][flat] = pick(v)
        if self._state:
            at_start = pos == 0
            in_tail = pos >= self.unroll_length
            for k, v in state.items():
                vt = pick(v)
                if at_start.any():
                    self._start_state[k][te[at_start]] = vt[at_start]
                if in_tail.any():
                    self._tail_state[k][te[in_tail], pos[in_tail] - self.unroll_length] = vt[in_tail]
        pos += 1
        self._fill[te] = pos
        full = pos == self.length
        return self._emit(te[full], pick(env)[full]) if full.any() else []

    def _emit(self, envs_done: np.ndarray, env_ids: np.ndarray) -> list:
        """Unroll dicts of the full unroll rows ``envs_done`` (of env ids ``env_ids``); their
        next unrolls start with the last ``overlap + 1`` steps and the matching recurrent state."""
        keys = list(self._buf) + [f"state/{k}" for k in self._start_state] + ["env_id", "run_id"]
        # One gather per field (copies [K, L, ...]), split into per-unroll views by list().
        columns = [list(v[envs_done]) for v in self._buf.values()]
        columns += [list(v[envs_done]) for v in self._start_state.values()]
        columns.append([np.int64(e) for e in env_ids.tolist()])
        columns.append([np.int64(r) for r in self._run_id[env_ids].tolist()])
        unrolls = [dict(zip(keys, row)) for row in zip(*columns)]
        keep, p = self.overlap + 1, self.unroll_length
        for v in self._buf.values():
            v[envs_done, :keep] = v[envs_done, p:]
        for k, tail in self._tail_state.items():
            self._start_state[k][envs_done] = tail[envs_done, 0]        # the state before position p
            if self.overlap >= p:      # positions p..overlap of the new unroll were p+p.. of the old
                tail[envs_done, :keep - p] = tail[envs_done, p:keep]
        self._fill[envs_done] = keep
        return unrolls

    def _deliver(self, unrolls: list) -> None:
        """Hands unrolls to the sink (outside model_lock; may block for back-pressure)."""
        delivered = dropped = errors = 0
        for u in unrolls:
            if self._closed or self.context.stop_event.is_set():
                dropped += 1
                continue
            try:
                ok = self._sink(u)
            except Exception:  # a sink bug must not fail the actors' calls
                _LOG.exception("streaming: the unroll sink raised; unroll dropped")
                errors += 1
                continue
            if ok is False:
                dropped += 1
            else:
                delivered += 1
        with self._stats_lock:
            c = self._counters
            c["unrolls_delivered"] += delivered
            c["unrolls_dropped"] += dropped + errors
            c["sink_errors"] += errors
