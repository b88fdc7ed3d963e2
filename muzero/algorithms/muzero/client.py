"""MuZero's actor-side client of the inference service (``InferenceClient``).

One client serves one actor's batch of E environments (E search trees). In cache
mode (default) hidden states stay on the server: the client leases E slots with
``register(num_envs, num_nodes)`` and then sends only node ids and actions. In ship
mode (for comparison) the client keeps the hidden states itself, in a numpy array
``[E, num_nodes, *hidden]``, and ships them with every call.

Robustness: a connect timeout, a deadline per call attempt, retries with
exponential back-off and jitter while the server is ``UNAVAILABLE``, and automatic
re-registration when the server no longer knows the lease (restart, expiry). The
client journals the requests of the current search (the encoded bytes already
sent, so no copies) and replays them after re-registering, so a search in progress
continues across a server restart. If a newer run of the same actor took the
lease over, ``LeaseLostError`` is raised instead (never fight over a lease).

``recurrent_fn(parent_node, action, new_node) -> (reward, value, policy_logits)`` has
the signature the search driver (``muzero.mcts``) calls. A client is used by one
thread; ``recurrent_inference_async`` allows a second call in flight.

This module imports grpc and numpy, never TensorFlow.
"""
from __future__ import annotations

import random
import secrets
import time
from typing import Optional, Sequence

import grpc
import numpy as np

from muzero.rpc import wire
from muzero.rpc.client import LeaseLostError, ServerError, open_channel, unreachable
from muzero.rpc.config import ClientConfig
from muzero.rpc.leases import LEASE_EXPIRED, LEASE_RELEASED, LEASE_SUPERSEDED, LEASE_UNKNOWN
from muzero.rpc.server import SERVICE


_RECOVERABLE = (LEASE_UNKNOWN, LEASE_EXPIRED, LEASE_RELEASED)


_METHODS = ("model_info", "register", "release", "initial_inference", "recurrent_inference",
            "initial_inference_ship", "recurrent_inference_ship", "push_segments",
            "learner_info", "server_stats")


class _Pending:
    """A call in flight; ``result()`` waits, retrying synchronously on recoverable errors."""

    def __init__(self, client, method, fields, payload, future, post):
        self._client, self._method, self._fields = client, method, fields
        self._payload, self._future, self._post = payload, future, post

    def result(self):
        c = self._client
        try:
            response = self._future.result()
        except grpc.RpcError as e:
            err = ServerError.from_rpc(self._method, e)
            if err.code != grpc.StatusCode.UNAVAILABLE and err.tag not in _RECOVERABLE:
                raise err from None
            out = c._lease_call(self._method, self._fields) if c.mode == "cache" \
                else c._call(self._method, wire.encode(self._fields))
        else:
            c._count(len(self._payload), response)
            out = wire.decode(response)
            if c.mode == "cache":
                c._journal_add(self._method, self._payload, reset=False)
        return self._post(out)


class InferenceClient:
    """Client of one actor. ``address`` is "host:port"; ``mode`` is "cache" or "ship"."""

    def __init__(self, address: str, *, actor_id: int = 0, run_id: Optional[int] = None,
                 mode: str = "cache", config: ClientConfig = ClientConfig(),
                 connect: bool = True):
        if mode not in ("cache", "ship"):
            raise ValueError(f"mode={mode!r} must be 'cache' or 'ship'")
        self.address, self.mode, self.config = address, mode, config
        self.actor_id = int(actor_id)
        self.run_id = secrets.randbits(63) if run_id is None else int(run_id)
        self._channel, self._metadata = open_channel(address, config)
        self._stubs = {m: self._channel.unary_unary(f"/{SERVICE}/{m}") for m in _METHODS}
        self._lease: Optional[int] = None
        self.num_envs = self.num_nodes = 0
        self.info: dict = {}
        self._journal: Optional[list] = []
        self._hidden: Optional[np.ndarray] = None   # ship mode: [E, N, *hidden]
        self.bytes_sent = self.bytes_received = self.calls = 0
        self.reregistrations = 0
        if connect:
            self.connect()

    # -- plumbing -----------------------------------------------------------------------------
    def connect(self) -> dict:
        """Waits (up to connect_timeout_s) for the server; returns its model info."""
        try:
            response = self._stubs["model_info"](
                wire.encode({}), timeout=self.config.connect_timeout_s,
                metadata=self._metadata, wait_for_ready=True)
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                raise ServerError.from_rpc("model_info", e) from None
            raise unreachable("inference", self.address, self.config, self.config.connect_timeout_s) from None
        self.info = _plain(wire.decode(response))
        return dict(self.info)

    def _count(self, sent: int, response) -> None:
        self.calls += 1
        self.bytes_sent += sent
        self.bytes_received += len(response)

    def _call(self, method: str, payload: bytes) -> dict:
        """One call, retried with back-off while the server is UNAVAILABLE."""
        cfg = self.config
        give_up = time.monotonic() + cfg.retry_timeout_s
        delay = cfg.backoff_initial_s
        while True:
            try:
                response = self._stubs[method](payload, timeout=cfg.call_timeout_s,
                                               metadata=self._metadata)
                self._count(len(payload), response)
                return wire.decode(response)
            except grpc.RpcError as e:
                err = ServerError.from_rpc(method, e)
                if err.code != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= give_up:
                    raise err from None
            time.sleep(min(delay, max(give_up - time.monotonic(), 0)) * random.uniform(0.5, 1.0))
            delay = min(delay * 2, cfg.backoff_max_s)

    def _lease_call(self, method: str, fields: dict, reset_journal: bool = False) -> dict:
        """A cache-mode call; re-registers and replays the journal when the lease is gone."""
        for attempt in range(4):
            payload = wire.encode({"lease": np.int64(self._require_lease()), **fields})
            try:
                out = self._call(method, payload)
            except ServerError as e:
                if e.tag == LEASE_SUPERSEDED:
                    raise LeaseLostError(method, e.code, e.details, e.tag) from None
                if e.tag in _RECOVERABLE and attempt < 3:
                    self._recover()
                    continue
                raise
            self._journal_add(method, payload, reset=reset_journal)
            return out
        raise AssertionError("unreachable")

    def _journal_add(self, method: str, payload: bytes, reset: bool) -> None:
        if reset:
            self._journal = [(method, payload)]
        elif self._journal is not None:
            self._journal.append((method, payload))
            if len(self._journal) > self.config.journal_max_calls:
                self._journal = None

    def _recover(self) -> None:
        self.reregistrations += 1
        self._register_call()
        journal, self._journal = self._journal, []
        if journal is None:
            raise LeaseLostError("recover", None, "the server lost this actor's lease and the "
                                 "search journal overflowed (journal_max_calls); restart the "
                                 "search with initial_inference")
        for method, payload in journal:
            fields = dict(wire.decode(payload))
            fields["lease"] = np.int64(self._lease)
            payload = wire.encode(fields)
            self._call(method, payload)
            self._journal.append((method, payload))

    def _require_lease(self) -> int:
        if self._lease is None:
            raise RuntimeError("call register(num_envs, num_nodes) first")
        return self._lease

    # -- leases -------------------------------------------------------------------------------
    def _register_call(self) -> None:
        out = self._call("register", wire.encode({
            "actor_id": np.int64(self.actor_id), "run_id": np.int64(self.run_id),
            "num_envs": np.int64(self.num_envs), "num_nodes": np.int64(self.num_nodes)}))
        self._lease = int(out["lease"])
        self.info = _plain(out)

    def register(self, num_envs: int, num_nodes: int) -> dict:
        """Leases ``num_envs`` slots of ``num_nodes`` nodes (num_simulations + 1).

        Returns the server's model info (num_actions, input_shape, hidden_shape, ...)."""
        self.num_envs, self.num_nodes = int(num_envs), int(num_nodes)
        self._journal = []
        if self.mode == "cache":
            self._register_call()
        else:
            self.info = _plain(self._call("model_info", wire.encode({})))
            hidden_shape = tuple(self.info["hidden_shape"])
            dtype = wire.DTYPE_CODES[int(self.info["hidden_dtype"])]
            self._hidden = np.zeros((self.num_envs, self.num_nodes, *hidden_shape), dtype)
        return dict(self.info)

    def release(self) -> None:
        """Gives the slots back (best effort; leases also expire on their own)."""
        if self._lease is not None:
            try:
                self._stubs["release"](wire.encode({"lease": np.int64(self._lease)}),
                                       timeout=min(self.config.call_timeout_s, 5.0),
                                       metadata=self._metadata)
            except grpc.RpcError:
                pass
            self._lease = None

    def close(self) -> None:
        self.release()
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- inference ----------------------------------------------------------------------------
    def initial_inference(self, observations: np.ndarray, slots: Optional[np.ndarray] = None) -> dict:
        """observations [B, *input_shape] for slots (default: all E, in order) ->
        dict(value [B] f32, policy_logits [B, A] f32, weights_version int)."""
        if self.mode == "ship":
            out = self._call("initial_inference_ship", wire.encode({"observation": observations}))
            idx = np.arange(self.num_envs) if slots is None else np.asarray(slots)
            self._hidden[idx, 0] = out["hidden_state"]
        else:
            fields = {"observation": observations}
            if slots is not None:
                fields["slots"] = np.asarray(slots, np.int32)
            out = self._lease_call("initial_inference", fields, reset_journal=slots is None)
        return {"value": out["value"], "policy_logits": out["policy_logits"],
                "weights_version": int(out["weights_version"])}

    def _recurrent_request(self, parent_node, action, new_node, slots):
        """-> (method, fields, post) where post(response) gives (reward, value, logits)."""
        parent = np.asarray(parent_node, np.int32)
        action = np.asarray(action, np.int32)
        new = np.asarray(new_node, np.int32)
        if self.mode == "cache":
            fields = {"parent_node": parent, "action": action, "new_node": new}
            if slots is not None:
                fields["slots"] = np.asarray(slots, np.int32)
            return "recurrent_inference", fields, _triple
        idx = np.arange(self.num_envs) if slots is None else np.asarray(slots)
        hidden = self._hidden[idx, parent]                 # [B, *hidden]

        def post(out):
            self._hidden[idx, new] = out["hidden_state"]
            return _triple(out)

        return "recurrent_inference_ship", {"hidden_state": hidden, "action": action}, post

    def recurrent_inference(self, parent_node: np.ndarray, action: np.ndarray,
                            new_node: np.ndarray, slots: Optional[np.ndarray] = None):
        """parent_node, action, new_node [B] int32 (B = E unless slots given) ->
        (reward [B] f32, value [B] f32, policy_logits [B, A] f32)."""
        method, fields, post = self._recurrent_request(parent_node, action, new_node, slots)
        if self.mode == "cache":
            return post(self._lease_call(method, fields))
        return post(self._call(method, wire.encode(fields)))

    def recurrent_inference_async(self, parent_node, action, new_node,
                                  slots: Optional[np.ndarray] = None) -> _Pending:
        """Like recurrent_inference, returning a handle whose ``result()`` gives the tuple."""
        method, fields, post = self._recurrent_request(parent_node, action, new_node, slots)
        if self.mode == "cache":
            payload = wire.encode({"lease": np.int64(self._require_lease()), **fields})
        else:
            payload = wire.encode(fields)
        future = self._stubs[method].future(payload, timeout=self.config.call_timeout_s,
                                            metadata=self._metadata)
        return _Pending(self, method, fields, payload, future, post)

    def recurrent_fn(self, parent_node: np.ndarray, action: np.ndarray, new_node: np.ndarray):
        """The search driver's callback: all E trees, (reward, value, policy_logits)."""
        return self.recurrent_inference(parent_node, action, new_node)

    # -- learner ------------------------------------------------------------------------------
    def push_segments(self, segments: Sequence[dict]) -> dict:
        """segments: dicts of numpy arrays / scalars (any wire dtype, 0-d allowed)."""
        tensors = {f"{i}/{k}": v for i, seg in enumerate(segments) for k, v in seg.items()}
        return _plain(self._call("push_segments", wire.encode(tensors)))

    def learner_info(self) -> dict:
        """Training step, weights version, ... as Python scalars (arrays stay arrays)."""
        return _plain(self._call("learner_info", wire.encode({})))

    def server_stats(self) -> dict:
        return _plain(self._call("server_stats", wire.encode({})))


def _triple(out: dict):
    return out["reward"], out["value"], out["policy_logits"]


def _plain(tensors: dict) -> dict:
    return {k: (v.item() if v.ndim == 0 else v) for k, v in tensors.items()}
