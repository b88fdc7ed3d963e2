"""A gRPC server of named-tensor methods with deadline batching, auth and TLS.

Methods are bound by name on a named service (``/<service>/<name>``; several
services, one per algorithm, can share the server and its port) through
grpcio's generic handlers: requests and responses are raw ``wire`` messages, no
protobuf. Two kinds of method:

* unary: ``fn(tensors, context) -> tensors`` runs in the gRPC worker thread.
* batched: ``prepare(tensors, context) -> Prepared`` validates one request in its
  worker thread and turns it into row-aligned arrays; the prepared requests of many
  callers are concatenated, ``run(batch)`` is called once (one batch at a time per
  method, in the worker whose request closed the batch or in the method's batch
  thread), and the returned row arrays are split back to each caller. A batch closes when it
  holds ``max_batch`` rows, or when ``max_wait_ms`` has passed since its first
  request arrived, or (optionally) when ``ready(batch_requests)`` says nobody else
  can join. It never waits for a full batch: a lone caller is served after at
  most ``max_wait_ms`` (SEED's server waited forever for a full batch).

Handlers signal a client error by raising ``RequestError`` (status code, message
naming the field, optional ``mz-error`` tag sent as trailing metadata); the
server answers that call and keeps serving. Any other exception becomes
``INTERNAL`` for the calls of that batch only.

Batch sizes, queueing and run times are counted per method; ``stats()`` returns
them as a flat dict of numbers for TensorBoard.

This module imports grpc and numpy, never TensorFlow.
"""
from __future__ import annotations

import _thread
import collections
import concurrent.futures
import hmac
import logging
import threading
import time
from typing import Callable, Optional

import grpc
import numpy as np

from muzero.rpc import wire
from muzero.rpc.config import ServerConfig, read_bytes, read_token

# The MuZero service's name, and the service a method joins when none is named.
SERVICE = "muzero.MuZero"
ERROR_TAG_KEY = "mz-error"
_LOG = logging.getLogger(__name__)
_HIST_EDGES = np.array([2**i for i in range(21)], np.int64)  # batch rows <= 1, 2, 4, ... 2^20
_RESERVOIR = 2048


class BindError(OSError):
    """The server's address cannot be bound (in use, or not local)."""


class RequestError(Exception):
    """A client error: answered with ``code`` and ``message``; the server keeps serving."""

    def __init__(self, code: grpc.StatusCode, message: str, tag: Optional[str] = None):
        super().__init__(message)
        self.code, self.message, self.tag = code, message, tag


def invalid(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, message)


class Prepared:
    """One validated request: ``rows`` leading entries in every array of ``inputs``."""

    __slots__ = ("rows", "inputs", "tag", "arrival", "lock", "result", "error")

    def __init__(self, rows: int, inputs: dict, tag=None):
        self.rows, self.inputs, self.tag = rows, inputs, tag
        self.arrival = 0.0
        self.lock = None
        self.result = None
        self.error: Optional[RequestError] = None


class Batch:
    """What ``run`` receives: concatenated ``inputs`` (dict of [rows, ...] arrays),
    per-request ``tags``, ``sizes`` and ``offsets``, a ``common`` dict of extra
    tensors added to every response, and ``fail(i, error)`` to reject request i
    (its rows are still present in inputs; ``run`` must make them harmless)."""

    __slots__ = ("inputs", "tags", "sizes", "offsets", "common", "errors")

    def __init__(self, items: list):
        self.tags = [it.tag for it in items]
        self.sizes = [it.rows for it in items]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        if len(items) == 1:
            self.inputs = dict(items[0].inputs)
        else:
            keys = items[0].inputs.keys()
            self.inputs = {k: np.concatenate([it.inputs[k] for it in items]) for k in keys}
        self.common: dict = {}
        self.errors: dict[int, RequestError] = {}

    def fail(self, index: int, error: RequestError) -> None:
        self.errors[index] = error


class _MethodStats:
    """Counters of one batched method; mutated only by its batch thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.batches = self.requests = self.rows = self.max_requests = 0
        self.hist = np.zeros(len(_HIST_EDGES), np.int64)
        self.queue_ms = collections.deque(maxlen=_RESERVOIR)
        self.run_ms = collections.deque(maxlen=_RESERVOIR)
        self.latency_ms = collections.deque(maxlen=_RESERVOIR)

    def record(self, items: list, rows: int, start: float, end: float):
        with self.lock:
            self.batches += 1
            self.requests += len(items)
            self.rows += rows
            self.max_requests = max(self.max_requests, len(items))
            # bin i counts batches of 2^(i-1) < rows <= 2^i (bin 0: rows <= 1)
            self.hist[min(max(rows - 1, 0).bit_length(), len(_HIST_EDGES) - 1)] += 1
            self.run_ms.append((end - start) * 1e3)
            for it in items:
                self.queue_ms.append((start - it.arrival) * 1e3)
                self.latency_ms.append((end - it.arrival) * 1e3)

    def snapshot(self, prefix: str, reset: bool) -> dict:
        with self.lock:
            def pct(values, q):
                return float(np.percentile(np.fromiter(values, float), q)) if values else 0.0
            out = {
                f"{prefix}/batches": self.batches,
                f"{prefix}/requests": self.requests,
                f"{prefix}/rows": self.rows,
                f"{prefix}/mean_batch_rows": self.rows / max(self.batches, 1),
                f"{prefix}/mean_batch_requests": self.requests / max(self.batches, 1),
                f"{prefix}/max_batch_requests": self.max_requests,
                f"{prefix}/batch_rows_hist": self.hist.copy(),
                f"{prefix}/queue_ms_p50": pct(self.queue_ms, 50),
                f"{prefix}/run_ms_p50": pct(self.run_ms, 50),
                f"{prefix}/run_ms_p99": pct(self.run_ms, 99),
                f"{prefix}/latency_ms_p50": pct(self.latency_ms, 50),
                f"{prefix}/latency_ms_p99": pct(self.latency_ms, 99),
            }
            if reset:
                self.reset()
        return out


class _BatchedMethod:
    """Pending requests of one method, run in batches one at a time.

    The request that makes a batch closable (full, or ``ready``) runs that batch in its
    own worker thread while no batch is running; the method's batch thread runs the
    batches that close at their deadline, and the next one when a batch was closable
    while another ran. Submitters wake the batch thread only when they are the first
    request of a batch (to start its deadline) or when a batch waits for a busy runner:
    thread wake-ups and GIL hand-offs are a large part of the per-call cost in CPython,
    and running in the submitter saves two of them per batch."""

    def __init__(self, name, prepare, run, max_batch, max_wait_ms, ready):
        self.name, self.prepare, self.run, self.ready = name, prepare, run, ready
        self.max_batch, self.max_wait = max_batch, max_wait_ms / 1e3
        self.cond = threading.Condition(threading.Lock())
        self.pending: collections.deque = collections.deque()
        self.pending_rows = 0
        self.busy = False        # a batch is running (in a worker or the batch thread)
        self.stopping = False
        self.stats = _MethodStats()
        self.thread = threading.Thread(target=self._loop, name=f"batch-{name}", daemon=True)

    def submit(self, item: Prepared, timeout: Optional[float]) -> dict:
        if item.rows > self.max_batch:
            raise invalid(f"{self.name}: batch of {item.rows} rows exceeds the server's "
                          f"max_batch {self.max_batch}")
        item.lock = _thread.allocate_lock()
        item.lock.acquire()
        item.arrival = time.monotonic()
        items = None
        with self.cond:
            if self.stopping:
                raise RequestError(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
            self.pending.append(item)
            self.pending_rows += item.rows
            if self._closable():
                if self.busy:
                    self.cond.notify()
                else:
                    items = self._take()
                    self.busy = True
            elif len(self.pending) == 1:
                self.cond.notify()
        if items is not None:
            self._run_and_release(items)
        # No deadline: grpc reports None or a huge time_remaining; wait without a timeout.
        wait = -1 if timeout is None or timeout > 1e6 else max(timeout, 0.0)
        if not item.lock.acquire(timeout=wait):
            raise RequestError(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"{self.name}: no batch result before the call's deadline")
        if item.error is not None:
            raise item.error
        return item.result

    def _run_and_release(self, items: list) -> None:
        """Runs a batch taken with ``busy`` set, then clears ``busy`` and hands any
        batch that is waiting to the batch thread."""
        try:
            self._execute(items)
        finally:
            with self.cond:
                self.busy = False
                if self.pending:
                    self.cond.notify()

    def _closable(self) -> bool:
        """Called with cond held: can the batch at the head of the queue close now?"""
        return (self.pending_rows >= self.max_batch or self.stopping
                or (self.ready is not None and self.ready(len(self.pending))))

    def _take(self) -> list:
        """Called with cond held: the head requests, up to max_batch rows (at least one)."""
        items, rows = [self.pending.popleft()], 0
        rows = items[0].rows
        while self.pending and rows + self.pending[0].rows <= self.max_batch:
            item = self.pending.popleft()
            items.append(item)
            rows += item.rows
        self.pending_rows -= rows
        return items

    def _loop(self):
        while True:
            with self.cond:
                while True:
                    if not self.pending:
                        if self.stopping:
                            return
                        self.cond.wait()
                    elif self.busy:
                        self.cond.wait()   # the runner notifies when it is done
                    else:
                        remaining = self.pending[0].arrival + self.max_wait - time.monotonic()
                        if remaining <= 0 or self._closable():
                            break
                        self.cond.wait(remaining)
                items = self._take()
                self.busy = True
            self._run_and_release(items)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def _execute(self, items: list):
        start = time.monotonic()
        rows = sum(it.rows for it in items)
        try:
            batch = Batch(items)
            outputs = self.run(batch)
            for i, it in enumerate(items):
                error = batch.errors.get(i)
                if error is not None:
                    it.error = error
                    continue
                lo, hi = batch.offsets[i], batch.offsets[i + 1]
                result = {k: v[lo:hi] for k, v in outputs.items()}
                result.update(batch.common)
                it.result = result
        except RequestError as e:  # the method refused the whole batch with a precise status
            for it in items:
                it.error = e
        except Exception as e:  # a bug or a model failure: fail this batch, keep serving
            _LOG.exception("%s: batch of %d requests failed", self.name, len(items))
            err = RequestError(grpc.StatusCode.INTERNAL, f"{self.name}: {type(e).__name__}: {e}")
            for it in items:
                it.error = err
        end = time.monotonic()
        for it in items:
            it.lock.release()
        self.stats.record(items, rows, start, end)


class BatchingServer:
    """The gRPC server. Bind methods, then ``start()``; ``stop()`` ends it."""

    def __init__(self, config: ServerConfig = ServerConfig()):
        self.config = config
        self._token: Optional[bytes] = None
        if config.auth_token_file is not None:
            self._token = ("Bearer " + read_token(config.auth_token_file, "ServerConfig")).encode()
        self._credentials = None
        if config.secure:
            key = read_bytes(config.tls_key_file, "ServerConfig", "tls_key_file")
            cert = read_bytes(config.tls_cert_file, "ServerConfig", "tls_cert_file")
            self._credentials = grpc.ssl_server_credentials([(key, cert)])
        self._handlers: dict[str, dict[str, grpc.RpcMethodHandler]] = {}   # service -> method -> handler
        self._batched: dict[str, _BatchedMethod] = {}
        self._errors: collections.Counter = collections.Counter()
        self._errors_lock = threading.Lock()
        self._server: Optional[grpc.Server] = None
        self.port: Optional[int] = None

    # -- binding ---------------------------------------------------------------------------
    def bind_unary(self, name: str, fn: Callable[[dict, grpc.ServicerContext], dict],
                   service: str = SERVICE) -> None:
        self._add(service, name, fn)

    def bind_batched(self, name: str, prepare: Callable, run: Callable[[Batch], dict],
                     max_batch: int, max_wait_ms: float,
                     ready: Optional[Callable[[int], bool]] = None, service: str = SERVICE) -> None:
        """``ready(n)`` (optional) is asked after each added request whether a batch of
        n requests can close before the deadline."""
        method = _BatchedMethod(name, prepare, run, max_batch, max_wait_ms, ready)
        key = name if service == SERVICE else f"{service}/{name}"
        self._batched[key] = method

        def call(tensors, context):
            return method.submit(prepare(tensors, context), context.time_remaining())

        self._add(service, name, call)

    def submit_batched(self, name: str, item, timeout: Optional[float]) -> dict:
        """Submits an already prepared request to the batched method ``name`` (as bound by
        ``bind_batched``; ``service/name`` for another service) from inside this process:
        it joins the same batches as the gRPC requests. Returns that request's outputs."""
        return self._batched[name].submit(item, timeout)

    def _add(self, service: str, name: str, fn) -> None:
        if self._server is not None:
            raise RuntimeError(f"bind {name!r} before start()")
        methods = self._handlers.setdefault(service, {})
        if name in methods:
            raise ValueError(f"method {name!r} is already bound on {service}")
        methods[name] = grpc.unary_unary_rpc_method_handler(self._wrap(name, fn))

    def _wrap(self, name: str, fn):
        token, max_tensors = self._token, self.config.max_tensors

        def handler(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                if token is not None:
                    sent = dict(context.invocation_metadata()).get("authorization", "")
                    if not hmac.compare_digest(sent.encode(), token):
                        raise RequestError(grpc.StatusCode.UNAUTHENTICATED,
                                           "missing or wrong 'authorization: Bearer <token>' metadata")
                try:
                    tensors = wire.decode(request, max_tensors=max_tensors)
                except wire.WireError as e:
                    raise invalid(f"{name}: malformed message: {e}") from None
                return wire.encode(fn(tensors, context))
            except RequestError as e:
                with self._errors_lock:
                    self._errors[e.code.name] += 1
                if e.tag:
                    context.set_trailing_metadata(((ERROR_TAG_KEY, e.tag),))
                context.abort(e.code, e.message)
            except Exception as e:  # a handler bug: answer INTERNAL, keep serving
                _LOG.exception("%s: handler failed", name)
                with self._errors_lock:
                    self._errors["INTERNAL"] += 1
                context.abort(grpc.StatusCode.INTERNAL, f"{name}: {type(e).__name__}: {e}")

        return handler

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> int:
        """Binds, starts the batch threads and returns the port."""
        cfg = self.config
        limit = cfg.max_message_bytes
        options = [("grpc.max_receive_message_length", limit),
                   ("grpc.max_send_message_length", limit),
                   ("grpc.so_reuseport", 0)]
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(
            max_workers=cfg.max_workers, thread_name_prefix="rpc"), options=options)
        server.add_generic_rpc_handlers(
            tuple(grpc.method_handlers_generic_handler(service, methods)
                  for service, methods in self._handlers.items()))
        try:
            if self._credentials is not None:
                port = server.add_secure_port(cfg.bind_address, self._credentials)
            else:
                port = server.add_insecure_port(cfg.bind_address)
        except RuntimeError as e:
            cause = f" (gRPC: {str(e).split(';')[0]})"
            port = 0
        else:
            cause = ""
        if port == 0:
            raise BindError(f"cannot bind {cfg.bind_address}: the port is in use (another learner?) or the "
                            f"address is not one of this machine's: choose another --port or --host{cause}")
        for method in self._batched.values():
            method.thread.start()
        server.start()
        self._server, self.port = server, port
        _LOG.info("serving %s on %s:%d (%s)", ", ".join(self._handlers), cfg.host, port,
                  "TLS" if self._credentials else "plaintext")
        return port

    def stop(self, grace: Optional[float] = 0.5) -> None:
        if self._server is None:
            return
        self._server.stop(grace).wait()
        for method in self._batched.values():
            method.stop()
        for method in self._batched.values():
            method.thread.join(timeout=10)
        self._server = None

    def __enter__(self):
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- stats -----------------------------------------------------------------------------------
    def stats(self, reset: bool = False) -> dict:
        """Flat ``{"<method>/<stat>": number or int64 array}``, for TensorBoard.

        Per batched method: batches, requests, rows, mean_batch_rows,
        mean_batch_requests, max_batch_requests, batch_rows_hist (counts of batches
        with rows <= 1, 2, 4, ..., 2^20; edges in ``server/batch_rows_hist_edges``),
        queue_ms_p50, run_ms_p50/p99, latency_ms_p50/p99 (arrival to result, over the
        last 2048 requests). Plus ``errors/<STATUS>`` counts. ``reset`` zeroes them.
        """
        out: dict = {"server/batch_rows_hist_edges": _HIST_EDGES.copy()}
        for name, method in self._batched.items():
            out.update(method.stats.snapshot(name, reset))
        with self._errors_lock:
            for code, count in self._errors.items():
                out[f"errors/{code}"] = count
            if reset:
                self._errors.clear()
        return out
