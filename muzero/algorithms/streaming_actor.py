"""Thin step-streaming actors: step E envs, send observations and rewards, get actions back.

The counterpart of ``muzero.algorithms.streaming.StepStreamingService`` (SEED RL's actor):
no network, no search, no trajectory building here. One call per env step carries, for
the actor's E envs, the last transition's reward, terminated and truncated flags and the
observation now shown (plus, where an episode was truncated, the observation it ended on),
and returns the E actions.

Env ids: an actor the learner starts owns the fixed ids ``env_id_base + arange(E)`` (of
the learner's ``num_actors``); an actor started by hand on another machine
(``env_id_base=None``) asks the learner for E ids of its remote range (``register_envs``),
sends its lease with every call, registers again when the lease has ended (it was unused
too long, or the learner restarted), stops when another actor registered under its
``actor_id``, and releases the lease when it stops.

Run ids: every start draws a random non-zero int64 run id, sent with every row; the
server restarts an env's state when the id changes. After a failed call (the learner
restarted, or a call timed out) the actor waits for the server with back-off, draws a
NEW run id and resets its envs, so the server never joins steps from before and after
the gap (the interrupted episodes count as abandoned there).

Imports grpc and numpy, never TensorFlow.
"""
from __future__ import annotations

import dataclasses
import random
import secrets
import threading
import time
from typing import Callable, Optional

import grpc
import numpy as np

import envs
from muzero.rpc import wire
from muzero.rpc.client import ServerError, open_channel, unreachable
from muzero.rpc.config import ClientConfig
from muzero.rpc.leases import LEASE_EXPIRED, LEASE_RELEASED, LEASE_SUPERSEDED, LEASE_UNKNOWN

# Call failures after which the actor reconnects (new run id, envs reset) instead of failing.
_RECONNECT_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.CANCELLED)

# The streaming learners' gRPC service, and the mz-error tags of its refusals (on which the
# thin actor starts over under a new run id).
STREAMING_SERVICE = "muzero.Streaming"
ENV_ID_CLASH = "env-id-clash"
NONFINITE_ACTION = "nonfinite-action"


class BadActionError(RuntimeError):
    """The server answered actions that must not reach the envs (wrong shape or dtype,
    out of [0, A), non-finite)."""


# Refusals after which the actor starts over under a new run id (the server applied nothing of
# the call): another client named one of its env ids in the same batch, or the policy produced
# a non-finite action (the step is refused, never sent to an env; the actor backs off first).
_RESTART_TAGS = (ENV_ID_CLASH, NONFINITE_ACTION)
# A leased actor's lease has ended: it registers again (new run id, envs reset). Not after
# LEASE_SUPERSEDED: another process registered under its actor id, and the two would take
# the lease from each other for ever; the actor stops and says so.
_LEASE_TAGS = (LEASE_EXPIRED, LEASE_RELEASED, LEASE_UNKNOWN)


class StreamingClient:
    """Client of the ``muzero.Streaming`` methods; one per actor, used by one thread.

    ``address`` is "host:port"; ``config`` sets timeouts, back-off, TLS and the token
    (as for ``muzero.rpc.client.InferenceClient``).
    """

    def __init__(self, address: str, *, config: ClientConfig = ClientConfig()):
        self.address, self.config = address, config
        self._channel, self._metadata = open_channel(address, config)
        self._info = self._channel.unary_unary(f"/{STREAMING_SERVICE}/stream_info")
        self._inference = self._channel.unary_unary(f"/{STREAMING_SERVICE}/inference")
        self._register = self._channel.unary_unary(f"/{STREAMING_SERVICE}/register_envs")
        self._release = self._channel.unary_unary(f"/{STREAMING_SERVICE}/release_envs")
        self.calls = self.bytes_sent = self.bytes_received = 0

    def info(self, timeout: Optional[float] = None) -> dict:
        """Waits up to ``timeout`` (default connect_timeout_s) for the server; returns
        ``stream_info`` as Python values: ``observation_shape``/``action_shape`` tuples,
        ``observation_dtype``/``action_dtype`` numpy dtypes, the rest ints.

        Raises ConnectionError when no server answers in time, ServerError for any other
        failure (e.g. UNIMPLEMENTED: that server runs no streaming service)."""
        timeout = self.config.connect_timeout_s if timeout is None else timeout
        try:
            response = self._info(wire.encode({}), timeout=timeout, metadata=self._metadata,
                                  wait_for_ready=True)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                raise unreachable("streaming", self.address, self.config, timeout) from None
            raise ServerError.from_rpc("stream_info", e) from None
        out = {k: (v.item() if v.ndim == 0 else v) for k, v in wire.decode(response).items()}
        for k in ("observation_shape", "action_shape"):
            out[k] = tuple(int(d) for d in out[k])
        for k in ("observation_dtype", "action_dtype"):
            out[k] = wire.DTYPE_CODES[int(out[k])]
        for k in ("action_low", "action_high"):       # absent from servers that predate them
            out[k] = np.asarray(out.get(k, np.zeros(0, np.float32)), np.float32)
        return out

    def _unary(self, method: str, stub, fields: dict) -> dict:
        try:
            response = stub(wire.encode(fields), timeout=self.config.call_timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ServerError.from_rpc(method, e) from None
        return wire.decode(response)

    def register_envs(self, num_envs: int, actor_id: int, run_id: int, evaluation: bool) -> tuple:
        """E env ids of the learner's remote range -> (env_ids [E] int32, lease, lease_timeout_s).
        One attempt; ServerError on refusal (RESOURCE_EXHAUSTED: too few free ids; UNAVAILABLE:
        this actor id's previous run still holds a lease, retry shortly)."""
        out = self._unary("register_envs", self._register,
                          {"num_envs": np.int64(num_envs), "actor_id": np.int64(actor_id),
                           "run_id": np.int64(run_id), "evaluation": np.bool_(evaluation)})
        return out["env_ids"].astype(np.int32), int(out["lease"]), float(out["lease_timeout_s"])

    def release_envs(self, lease: int) -> bool:
        """Ends the lease now (its ids go back to the learner's pool); False if it had ended."""
        return bool(self._unary("release_envs", self._release, {"lease": np.int64(lease)})["released"])

    def inference(self, env_ids, run_ids, rewards, terminated, truncated, observations,
                  final_observations=None, lease: Optional[int] = None) -> tuple:
        """One step of B envs -> (actions [B, *action_shape], weights_version int).

        env_ids [B] (sent as int32), run_ids [B] or a scalar (int64), rewards [B] (float32),
        terminated / truncated [B] bool, observations [B, *obs] in the server's observation
        dtype, final_observations [B, *obs] (required when any truncated), ``lease`` for
        ids granted by ``register_envs``. One attempt;
        a failure raises ServerError (the actor decides whether to reconnect)."""
        env_ids = np.asarray(env_ids, np.int32)
        b = len(env_ids)
        fields = {"env_ids": env_ids,
                  "run_ids": np.broadcast_to(np.asarray(run_ids, np.int64), (b,)),
                  "rewards": np.asarray(rewards, np.float32),
                  "terminated": np.asarray(terminated, bool),
                  "truncated": np.asarray(truncated, bool),
                  "observations": observations}
        if final_observations is not None:
            fields["final_observations"] = final_observations
        if lease is not None:
            fields["lease"] = np.int64(lease)
        payload = wire.encode(fields)
        try:
            response = self._inference(payload, timeout=self.config.call_timeout_s,
                                       metadata=self._metadata)
        except grpc.RpcError as e:
            raise ServerError.from_rpc("inference", e) from None
        self.calls += 1
        self.bytes_sent += len(payload)
        self.bytes_received += len(response)
        out = wire.decode(response)
        return out["actions"], int(out["weights_version"])

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclasses.dataclass(frozen=True)
class StreamingActorSettings:
    """Everything one thin actor process needs (picklable: it crosses a spawn).

    ``num_envs`` envs with server env ids ``env_id_base + arange(num_envs)``, or, with
    ``env_id_base=None``, ids the learner grants from its remote range to ``actor_id``
    (see the module doc). The envs are seeded from ``seed`` and ``env_id_base`` (leased:
    ``actor_id``, so actors on different hosts play different episodes).
    ``evaluation`` says which id range the actor expects to own (checked against the
    server's ``stream_info``; the server decides how an env acts by its id) or asks for
    evaluation ids. ``max_env_steps`` (all envs together; 0 = until stopped).
    """

    server: str
    env: str
    env_options: dict = dataclasses.field(default_factory=dict)
    num_envs: int = 16
    env_id_base: Optional[int] = 0
    seed: int = 0
    evaluation: bool = False
    client_config: Optional[ClientConfig] = None
    max_env_steps: int = 0
    actor_id: int = 0

    def __post_init__(self):
        for name, lo in (("num_envs", 1), ("env_id_base", 0), ("seed", 0), ("max_env_steps", 0)):
            value = getattr(self, name)
            if name == "env_id_base" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ValueError(f"StreamingActorSettings.{name}={value!r} must be an integer >= {lo}")
        if not isinstance(self.env_options, dict):
            raise ValueError(f"StreamingActorSettings.env_options={self.env_options!r} must be a dict")


def new_run_id() -> int:
    """A random non-zero int64 (0 means 'never seen' on the server)."""
    return secrets.randbits(63) or 1


class StreamingActor:
    """The loop of one thin actor against a ``StreamingClient``."""

    def __init__(self, settings: StreamingActorSettings, client: StreamingClient,
                 stop_event: Optional[threading.Event] = None, log: Callable[[str], None] = print):
        s = settings
        self.settings, self.client, self.log = s, client, log
        self.stop_event = stop_event or threading.Event()
        self.leased = s.env_id_base is None
        base = s.actor_id if self.leased else s.env_id_base
        self.batch = envs.make_batch(s.env, s.num_envs, seed=s.seed * 100_003 + base * 1009, **s.env_options)
        self.descriptor = self.batch.descriptor
        self.env_ids = (base + np.arange(s.num_envs)).astype(np.int32)   # leased: replaced by register
        self.lease: Optional[int] = None
        self.run_id = new_run_id()
        self.info: dict = {}
        self.env_steps = 0          # env steps taken (all envs together)
        self.calls = 0
        self.reconnects = 0
        self.bad_actions = 0
        self.refused_steps = 0      # calls the server refused for non-finite actions
        self.weights_version = 0

    # -- connection -------------------------------------------------------------------------------
    def _check_info(self, info: dict) -> None:
        """The server must serve this env's spaces and own this actor's env ids."""
        s, d = self.settings, self.descriptor
        if info["observation_shape"] != tuple(d.observation_shape) or \
                info["observation_dtype"] != np.dtype(d.observation_dtype):
            raise ValueError(f"server observations are {info['observation_dtype']} "
                             f"{list(info['observation_shape'])}; env {s.env!r} gives "
                             f"{d.observation_dtype} {list(d.observation_shape)}")
        server_space = (f"{info['action_dtype']} {list(info['action_shape'])}"
                        + (f" ({info['num_actions']} actions)" if info["action_dtype"].kind in "iu" else ""))
        if d.is_continuous:
            if info["action_shape"] != tuple(d.action_shape) or info["action_dtype"].kind != "f":
                raise ValueError(f"server actions are {server_space}; env {s.env!r} takes "
                                 f"{d.action_space} (float32 {list(d.action_shape)})")
        elif info["action_shape"] != () or info["action_dtype"].kind not in "iu" \
                or info["num_actions"] != d.num_actions:
            raise ValueError(f"server actions are {server_space}; env {s.env!r} takes {d.action_space}")
        nt, ne = info["num_train_envs"], info["num_eval_envs"]
        if self.leased:
            nr = info.get("num_remote_envs", 0)
            if s.num_envs > nr:
                raise ValueError(f"num_envs={s.num_envs} exceeds the learner's {nr} remote env ids: start the "
                                 f"learner with --remote_envs={s.num_envs} or more, or give this actor "
                                 "--env_id_base for ids of the learner's own actors")
            if s.num_envs > info["max_batch"]:
                raise ValueError(f"num_envs={s.num_envs} exceeds the server's max_batch {info['max_batch']}")
            return
        lo, hi = s.env_id_base, s.env_id_base + s.num_envs
        want = (nt, nt + ne) if s.evaluation else (0, nt)
        if not (want[0] <= lo and hi <= want[1]):
            kind = "evaluation" if s.evaluation else "training"
            raise ValueError(f"env ids [{lo}, {hi - 1}] are not all {kind} env ids of the server: "
                             f"its {kind} ids are [{want[0]}, {want[1] - 1}] (num_train_envs={nt}, "
                             f"num_eval_envs={ne})")
        if s.num_envs > info["max_batch"]:
            raise ValueError(f"num_envs={s.num_envs} exceeds the server's max_batch {info['max_batch']}")

    def connect(self) -> dict:
        """Waits for the server, with back-off, for up to retry_timeout_s (at least one
        connect_timeout_s); checks its spaces. Raises ConnectionError if none answers."""
        cfg = self.client.config
        give_up = time.monotonic() + max(cfg.retry_timeout_s, cfg.connect_timeout_s)
        delay = cfg.backoff_initial_s
        while True:
            try:
                info = self.client.info(timeout=min(cfg.connect_timeout_s,
                                                    max(give_up - time.monotonic(), 0.01)))
                break
            except ConnectionError:
                if time.monotonic() >= give_up or self.stop_event.is_set():
                    raise
            except ServerError as e:
                if e.code == grpc.StatusCode.UNIMPLEMENTED:
                    raise ValueError(f"the server at {self.client.address} runs no step-streaming "
                                     "service (a MuZero learner? check --algo)") from None
                raise
            self.stop_event.wait(min(delay, max(give_up - time.monotonic(), 0)) * random.uniform(0.5, 1.0))
            delay = min(delay * 2, cfg.backoff_max_s)
        self._check_info(info)
        self.info = info
        if self.leased:
            self._register(give_up)
        return info

    def _register(self, give_up: float) -> None:
        """Asks for this actor's env ids, retrying with back-off while the learner has too few
        free or the actor id's previous run still holds its lease (until ``give_up``)."""
        cfg, s = self.client.config, self.settings
        delay = cfg.backoff_initial_s
        while True:
            try:
                ids, self.lease, _ = self.client.register_envs(s.num_envs, s.actor_id, self.run_id, s.evaluation)
                break
            except ServerError as e:
                # Retrying with the same run id is safe: a grant whose reply was lost is replaced.
                if e.code not in _RECONNECT_CODES + (grpc.StatusCode.RESOURCE_EXHAUSTED,) \
                        or time.monotonic() >= give_up:
                    raise
                if self.stop_event.is_set():
                    return
                self.log(f"{self.name}: {e}; retrying")
            self.stop_event.wait(min(delay, max(give_up - time.monotonic(), 0)) * random.uniform(0.5, 1.0))
            delay = min(delay * 2, cfg.backoff_max_s)
        self.env_ids = ids
        span = (f"{int(ids.min())}..{int(ids.max())}" if int(ids.max()) - int(ids.min()) + 1 == len(ids)
                else ",".join(str(int(i)) for i in ids))
        self.log(f"{self.name}: leased env ids {span}")

    @property
    def name(self) -> str:
        return (f"streaming actor {self.settings.actor_id} (leased)" if self.leased
                else f"streaming actor {self.settings.env_id_base}")

    def release(self) -> None:
        """Gives a leased actor's env ids back to the learner (best effort: a learner that is
        gone frees them when the lease times out)."""
        if self.lease is not None:
            lease, self.lease = self.lease, None
            try:
                self.client.release_envs(lease)
            except (ServerError, ConnectionError):
                pass

    # -- acting -------------------------------------------------------------------------------------
    def check_actions(self, actions: np.ndarray) -> np.ndarray:
        """The server's actions, checked before they reach the envs. Discrete: shape [E], an
        integer dtype, values in [0, A). Continuous: shape [E, d], a float dtype, finite (the
        env batch clips them into its bounds and counts that). Anything else is counted and
        raises BadActionError."""
        e, a = self.settings.num_envs, self.descriptor.num_actions
        actions = np.asarray(actions)
        problem = None
        if self.descriptor.is_continuous:
            shape = (e, *self.descriptor.action_shape)
            if actions.shape != shape or actions.dtype.kind != "f":
                problem = f"{actions.dtype} {list(actions.shape)}, expected float {list(shape)}"
            elif not np.isfinite(actions).all():
                problem = f"non-finite values {actions[~np.isfinite(actions)][:4].tolist()}"
        elif actions.shape != (e,):
            problem = f"shape {list(actions.shape)}, expected [{e}]"
        elif actions.dtype.kind not in "iu":
            bad = actions[~np.isfinite(actions)] if actions.dtype.kind == "f" else actions
            problem = (f"non-finite values {bad[:4].tolist()}" if actions.dtype.kind == "f" and bad.size
                       else f"dtype {actions.dtype}, expected an integer dtype")
        elif actions.min() < 0 or actions.max() >= a:
            bad = actions[(actions < 0) | (actions >= a)]
            problem = f"values {bad[:4].tolist()} outside [0, {a - 1}]"
        if problem is not None:
            self.bad_actions += 1
            raise BadActionError(f"streaming actor (env ids {int(self.env_ids[0])}..{int(self.env_ids[-1])}): "
                                 f"the server returned unusable actions: {problem}; not stepping the envs")
        return actions

    def _reconnect(self, error: ServerError) -> None:
        self.reconnects += 1
        what = error.tag or (error.code.name if error.code else str(error))
        self.log(f"{self.name}: {what}; reconnecting with a new run id")
        if error.tag == NONFINITE_ACTION:
            self.refused_steps += 1
            cfg = self.client.config      # the network needs updates before it acts again
            self.stop_event.wait(min(cfg.backoff_max_s, cfg.backoff_initial_s * 2 ** min(self.refused_steps, 10)))
        if self.leased and error.tag not in _LEASE_TAGS:
            self.release()        # a new run id would wait for this lease to go idle
        self.run_id = new_run_id()
        self.connect()

    def run(self) -> None:
        """Acts until stopped or ``max_env_steps``; a leased actor releases its env ids last."""
        try:
            self._loop()
        finally:
            self.release()

    def _loop(self) -> None:
        s = self.settings
        e = s.num_envs
        self.connect()
        step = self.batch.reset()
        first = True
        zeros_f, zeros_b = np.zeros(e, np.float32), np.zeros(e, bool)
        while not self.stop_event.is_set():
            if first:
                rewards, terminated, truncated, final = zeros_f, zeros_b, zeros_b, None
            else:
                rewards, terminated, truncated = step.reward, step.terminated, step.truncated
                final = None
                if truncated.any() or terminated.any():    # the observations the episodes ended on
                    final = step.final_observation
                    if final is None and truncated.any():
                        raise RuntimeError(f"env {s.env!r}: its EnvBatch reports truncation without "
                                           "final_observation; streaming needs it to bootstrap")
            try:
                actions, self.weights_version = self.client.inference(
                    self.env_ids, self.run_id, rewards, terminated, truncated, step.observation, final,
                    lease=self.lease)
            except ServerError as err:
                # Besides lost connections: refusals that applied nothing of this call (see
                # _RESTART_TAGS), and an ended lease; either way, start over under a new run id.
                if self.leased and err.tag == LEASE_SUPERSEDED:
                    self.lease = None
                    raise ValueError(f"another actor registered with --actor_id={s.actor_id} and took this "
                                     "actor's env ids: give each actor a distinct --actor_id") from None
                restart = err.tag in _RESTART_TAGS or (self.leased and err.tag in _LEASE_TAGS)
                if (err.code not in _RECONNECT_CODES and not restart) or self.stop_event.is_set():
                    raise
                self._reconnect(err)
                step, first = self.batch.reset(), True
                continue
            self.calls += 1
            step = self.batch.step(self.check_actions(actions))
            first = False
            self.env_steps += e
            if s.max_env_steps and self.env_steps >= s.max_env_steps:
                break


def run_streaming_actor(settings: StreamingActorSettings,
                        stop_event: Optional[threading.Event] = None) -> None:
    """Process entry point: connect, stream until SIGTERM/SIGINT (main thread only),
    ``stop_event`` (for threads and tests) or ``max_env_steps``."""
    client = StreamingClient(settings.server, config=settings.client_config or ClientConfig())
    try:
        actor = StreamingActor(settings, client, stop_event)
    except BaseException:
        client.close()
        raise

    from muzero.process import run_until_stopped
    run_until_stopped(actor, client)


def streaming_actor_args(settings, index: int, address: str, client_config) -> tuple:
    """``(StreamingActorSettings,)`` for actor ``index`` of a run (``muzero.settings.
    RunSettings``): indices < num_actors are training actors with env ids
    ``index * envs_per_actor + arange(envs_per_actor)``; the next num_eval_actors are
    evaluation actors with ids from ``num_actors * envs_per_actor + (index - num_actors) *
    eval_envs_per_actor`` (matching a service with num_train_envs = num_actors *
    envs_per_actor and num_eval_envs = num_eval_actors * eval_envs_per_actor)."""
    n_train, n_eval = settings.num_actors, settings.num_eval_actors
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_train + n_eval:
        raise ValueError(f"actor index {index!r} is out of range [0, {n_train + n_eval - 1}] "
                         f"(num_actors={n_train}, num_eval_actors={n_eval})")
    evaluation = index >= n_train
    if evaluation:
        num_envs = settings.eval_envs_per_actor
        base = n_train * settings.envs_per_actor + (index - n_train) * num_envs
    else:
        num_envs = settings.envs_per_actor
        base = index * num_envs
    return (StreamingActorSettings(server=address, env=settings.env, env_options=settings.env_options_for(evaluation),
                                   num_envs=num_envs, env_id_base=base, seed=settings.seed,
                                   evaluation=evaluation, client_config=client_config),)
