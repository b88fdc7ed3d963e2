"""The MuZero actor: E envs in lockstep, one batched search per step, segments to the learner.

Per step: one ``initial_inference`` RPC for the E roots, ``num_simulations``
``recurrent_inference`` RPCs (one per simulation, all E trees in each), an action
per env from the root visit counts, one ``EnvBatch.step``. Finished segments and
episode statistics are pushed to the learner every few steps. The acting
temperature follows the *learner's* training step, read from ``learner_info``.

Evaluation actors act greedily (temperature 0), add no root noise and push only
episode statistics, never segments.

With ``random_policy`` (pretraining runs) every move is drawn uniformly from the legal
ones (``acting.RandomPolicy``): no inference calls, no search; segments are pushed as
usual, with zero root values and the uniform legal policy as the policy target.

The same code runs under the local launcher and as ``python -m muzero.actor``.
Imports no TensorFlow.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Optional

import numpy as np

import envs
from muzero.algorithms.muzero.segments import SegmentBuilder
from muzero.algorithms.muzero.acting import RandomPolicy, SearchPolicy
from muzero.mcts.config import SearchConfig
from muzero.observation import FrameHistory


@dataclasses.dataclass(frozen=True)
class ActorSettings:
    """Everything one actor process needs (picklable: it crosses a spawn)."""

    server: str
    env: str
    search: SearchConfig
    env_options: dict = dataclasses.field(default_factory=dict)
    envs_per_actor: int = 16
    actor_id: int = 0
    seed: int = 0
    stack_frames: int = 1
    segment_length: int = 200
    evaluation: bool = False
    # Play uniformly random legal moves instead of searching (a pretraining run's actors).
    random_policy: bool = False
    # Stop after this many env steps (all envs together); 0 runs until stopped.
    max_env_steps: int = 0
    # Seconds between pushes of finished segments and episode statistics.
    push_every_s: float = 0.5
    # Seconds between learner_info polls (training step for the temperature).
    info_every_s: float = 2.0
    client_config: Optional[object] = None  # muzero.rpc.config.ClientConfig

    def __post_init__(self):
        if self.envs_per_actor < 1:
            raise ValueError(f"envs_per_actor={self.envs_per_actor} must be >= 1")
        if self.segment_length < 1:
            raise ValueError(f"segment_length={self.segment_length} must be >= 1")


# One push carries at most this many tensors and bytes (the server's defaults,
# muzero.rpc.config.ServerConfig, allow 4096 and 256 MiB); more pending segments go in
# several pushes.
PUSH_MAX_TENSORS = 2048
PUSH_MAX_BYTES = 64 * 2**20


def push_chunk_length(segments: list) -> int:
    """How many leading ``segments`` (dicts of arrays) fit in one push: at least one, then
    as many as keep the push within PUSH_MAX_TENSORS tensors (one kept free for the
    episode report's four) and PUSH_MAX_BYTES bytes."""
    tensors, size = 4, 0
    for i, segment in enumerate(segments):
        tensors += len(segment)
        size += sum(np.asarray(v).nbytes for v in segment.values() if v is not None)
        if i and (tensors > PUSH_MAX_TENSORS or size > PUSH_MAX_BYTES):
            return i
    return len(segments)


def episode_report(returns: np.ndarray, lengths: np.ndarray, evaluation: bool) -> dict:
    """The dict pushed next to segments that carries finished episodes' statistics."""
    return {"report": np.bool_(True), "episode_return": np.asarray(returns, np.float32),
            "episode_length": np.asarray(lengths, np.int32), "evaluation": np.bool_(evaluation)}


class Actor:
    """Runs one actor's loop against an inference client (``muzero.rpc.InferenceClient``)."""

    def __init__(self, settings: ActorSettings, client, log=print):
        self.settings = settings
        self.client = client
        self.log = log
        s = settings
        self.rng = np.random.default_rng([s.seed, s.actor_id])
        self.batch = envs.make_batch(s.env, s.envs_per_actor, seed=s.seed * 100_003 + s.actor_id * 1009,
                                     **s.env_options)
        self.descriptor = self.batch.descriptor
        d = self.descriptor
        self.num_nodes = s.search.num_nodes
        self.history = (FrameHistory(s.envs_per_actor, d.observation_shape, s.stack_frames, d.num_actions)
                        if d.is_image else None)
        self.builder = SegmentBuilder(s.envs_per_actor, d.observation_shape, np.dtype(d.observation_dtype),
                                      d.num_actions, s.segment_length, d.has_legal_mask)
        if s.random_policy:
            self.policy = RandomPolicy(d.num_actions, self.rng)
        else:
            search = s.search.for_evaluation() if s.evaluation else s.search
            self.policy = SearchPolicy(search, s.envs_per_actor, d.num_actions, self.rng,
                                       evaluation=s.evaluation, in_tree_masks=d.has_legal_mask and d.two_player)
        self.stop_event = threading.Event()
        self.env_steps = 0
        self.training_step = 0
        self.move_index = np.zeros(s.envs_per_actor, np.int64)   # moves made so far in each env's episode
        self._pending: list = []
        self._returns: list = []
        self._lengths: list = []

    def _network_input(self, step) -> np.ndarray:
        return self.history.network_input() if self.history is not None else step.observation

    def act(self, step):
        """One search over the E roots of ``step``; returns (actions [E], SearchResult).
        With ``random_policy``: uniform legal moves, (actions [E], RandomResult)."""
        if self.settings.random_policy:
            return self.policy.act(step.legal_mask)
        root = self.client.initial_inference(self._network_input(step))
        return self.policy.act(root["value"], root["policy_logits"], step.legal_mask, step.to_play,
                               self.client.recurrent_fn, training_step=self.training_step,
                               move_index=self.move_index)

    def _push(self, retry_for_s: float = 0.0) -> bool:
        """Sends pending segments and episode statistics; True when delivered (or nothing to send).

        Items go in chunks (``push_chunk_length``) so that no message outgrows the server's
        limits however many segments piled up. RESOURCE_EXHAUSTED (the learner's rate
        limiter: nothing of that chunk was stored) and transient
        errors keep the items for the next attempt, retried here for up to ``retry_for_s``;
        a push the learner rejects as malformed is logged and dropped, never fatal.
        """
        import grpc
        from muzero.rpc.client import ServerError
        deadline = time.monotonic() + retry_for_s
        while self._pending or self._returns:
            # A random-policy actor's pushes mostly wait on the replay's rate limiter; its
            # episode statistics go alone first (a push without segments never waits).
            count = 0 if self._returns and self.settings.random_policy else push_chunk_length(self._pending)
            items = self._pending[:count]
            last = count == len(self._pending) or count == 0   # episode statistics: with the last chunk
            if last and self._returns:
                items.append(episode_report(np.concatenate(self._returns), np.concatenate(self._lengths),
                                            self.settings.evaluation))
            try:
                self.client.push_segments(items)
            except ServerError as e:
                if e.code == grpc.StatusCode.INVALID_ARGUMENT:
                    self.log(f"actor {self.settings.actor_id}: learner rejected {len(items)} items: {e.details}")
                elif e.code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED,
                                grpc.StatusCode.UNAVAILABLE):
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.5)
                    continue
                else:
                    raise
            self._pending = self._pending[count:]
            if last:
                self._returns, self._lengths = [], []
        return True

    def run(self) -> None:
        s = self.settings
        self.client.register(s.envs_per_actor, self.num_nodes)
        try:
            self.training_step = int(self.client.learner_info().get("training_step", 0))
        except Exception:  # the learner may not be fully up yet; the next poll retries
            pass
        step = self.batch.reset()
        if self.history is not None:
            self.history.start(step.observation, np.ones(s.envs_per_actor, bool))
        last_push = last_info = time.monotonic()
        while not self.stop_event.is_set():
            actions, result = self.act(step)
            nxt = self.batch.step(actions)
            if not s.evaluation:
                self._pending += self.builder.add(step.observation, actions, nxt.reward, result.root_value,
                                                  result.policy_target, step.to_play,
                                                  step.legal_mask if self.descriptor.has_legal_mask else None,
                                                  nxt.terminated, nxt.truncated)
            if self.history is not None:
                self.history.push(nxt.observation, actions)
                self.history.start(nxt.observation, nxt.done)
            ended = nxt.episode_length >= 0
            if ended.any():
                self._returns.append(nxt.episode_return[ended])
                self._lengths.append(nxt.episode_length[ended])
            self.env_steps += s.envs_per_actor
            self.move_index = np.where(nxt.done, 0, self.move_index + 1)
            step = nxt
            now = time.monotonic()
            # A random-policy actor outruns any learner: it pushes as soon as a push is full
            # and waits until its segments are stored (the replay's rate limiter paces it)
            # instead of piling them up.
            full = s.random_policy and push_chunk_length(self._pending) < len(self._pending)
            if full or now - last_push >= s.push_every_s:
                while not self._push(retry_for_s=1.0 if s.random_policy else 0.0) and s.random_policy \
                        and not self.stop_event.is_set():
                    pass
                last_push = now
            if now - last_info >= s.info_every_s:
                self.training_step = int(self.client.learner_info().get("training_step", self.training_step))
                last_info = now
            if s.max_env_steps and self.env_steps >= s.max_env_steps:
                break
        if s.random_policy:
            self._pending = []   # random data is plentiful: only the episode statistics are delivered
        elif not s.evaluation:
            self._pending += self.builder.flush()
        if not self._push(retry_for_s=5.0):
            self.log(f"actor {s.actor_id}: could not deliver the last {len(self._pending)} segments at shutdown")


def run_actor(settings: ActorSettings) -> None:
    """Process entry point: connect, register, act until SIGTERM/SIGINT or max_env_steps."""
    from muzero.algorithms.muzero.client import InferenceClient
    from muzero.rpc.config import ClientConfig
    config = settings.client_config or ClientConfig()
    client = InferenceClient(settings.server, actor_id=settings.actor_id, config=config)
    try:
        actor = Actor(settings, client)
    except BaseException:
        client.close()
        raise
    from muzero.process import run_until_stopped
    run_until_stopped(actor, client)
