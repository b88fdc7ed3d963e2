"""MuZero Reanalyse: fresh policy targets and root values for stored positions.

``ReanalyseWorker`` is a thread in the learner process. One round:

1. draw ``batch_size`` stored positions by priority (``Replay.reanalyse_positions``, with
   the worker's own generator, so the training sampler's stream is untouched);
2. run the actors' search on them (``acting.SearchPolicy``: the same Numba
   ``muzero.mcts.search``, pUCT or Gumbel roots per ``search.root_selection``, the
   actors' root noise unless ``root_noise`` is off (``targets.reanalyse_root_noise``),
   in-tree legal masks for two-player board games), asking the learner's
   inference service through a ``service.LocalClient``: its requests join the actors'
   batches and read the same served weights;
3. write the search's ``policy_target`` (visit distribution, or Gumbel MuZero's improved
   policy) and ``root_value`` back with the weights version the root inference answered
   with (``Replay.write_reanalysed``).

The training batch draws ``targets.reanalyse_fraction`` of its rows from the positions
refreshed so (``Replay.sample``). The worker is paced by that demand: it refreshes while
the positions written trail the rows training meant to draw from them by less than
``lead`` (two rounds by default), so it never takes CPU far ahead of the trainer; when it
is slower than the demand it runs back to back and the refreshed rows are drawn more than
once. The lease on the service is held only during a search. See docs/REANALYSE.md.
"""
from __future__ import annotations

import threading
import time
import traceback
from typing import Callable, Optional

import numpy as np

from muzero.algorithms.muzero.acting import SearchPolicy
from muzero.mcts.config import SearchConfig
from muzero.algorithms.muzero.replay import Replay, ReplayClosedError

# Lease actor id of the worker (actors use 0..N-1).
REANALYSE_ACTOR_ID = -1


class ReanalyseWorker:
    """Re-searches stored positions with the served weights (see the module doc).

    Args:
      replay: the learner's replay (built with ``targets.reanalyse_fraction > 0``).
      service: the bound ``MuZeroService`` (its ``local_client`` is used).
      search_config: the actors' search settings.
      descriptor: the env's facts (actions, legal masks, players).
      batch_size: positions per search.
      seed: the worker's generator (positions drawn).
      lead: positions the worker may refresh beyond the trainer's demand (default 2 rounds).
      log: where failures are reported.
      root_noise: add the training actors' root noise (Dirichlet or Gumbel); off, the
        targets are a function of the position and the weights.
    """

    def __init__(self, replay: Replay, service, search_config: SearchConfig, descriptor,
                 batch_size: int, seed: int = 0, lead: Optional[int] = None,
                 log: Callable[[str], None] = print, root_noise: bool = True):
        self.replay = replay
        self.service = service
        self.config = search_config
        self.batch_size = int(batch_size)
        self.lead = 2 * self.batch_size if lead is None else int(lead)
        self.log = log
        self.rng = np.random.default_rng([int(seed), 0x5EA7])
        # evaluation=False: the actors' root noise (the move it picks is not used).
        self.policy = SearchPolicy(search_config, self.batch_size, descriptor.num_actions, self.rng,
                                   evaluation=not root_noise,
                                   in_tree_masks=descriptor.has_legal_mask and descriptor.two_player)
        self.client = service.local_client(REANALYSE_ACTOR_ID, self.batch_size, search_config.num_nodes)
        self.searches = 0
        self.positions = 0
        self.search_seconds = 0.0
        self.last_version = -1
        self.errors = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- one round ------------------------------------------------------------------------------
    def run_once(self) -> int:
        """Draws, searches and writes back one batch of positions; returns how many were
        written (0 while the replay holds nothing sampleable)."""
        positions = self.replay.reanalyse_positions(self.batch_size, self.rng)
        if positions is None:
            return 0
        start = time.monotonic()
        self.client.register()
        try:
            root = self.client.initial_inference(positions["observation"])
            _, result = self.policy.act(root["value"], root["policy_logits"], positions["legal_mask"],
                                        positions["to_play"], self.client.recurrent_fn)
        finally:
            self.client.release()
        version = root["weights_version"]
        written = self.replay.write_reanalysed(positions["index"], result.policy_target,
                                               result.root_value, version)
        self.searches += 1
        self.positions += written
        self.search_seconds += time.monotonic() - start
        self.last_version = version
        return written

    # -- thread ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="reanalyse", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.replay.reanalyse_backlog() <= -self.lead:
                    self._stop.wait(0.005)   # ahead of the trainer's demand
                    continue
                if self.run_once() == 0:
                    self._stop.wait(0.05)
            except ReplayClosedError:
                return
            except Exception as e:   # keep the learner training; report, back off, retry
                if self._stop.is_set():
                    return
                self.errors += 1
                if self.errors <= 3:
                    self.log(f"reanalyse: {type(e).__name__}: {e}"
                             + ("" if self.errors < 3 else " (further errors are counted, not printed)"))
                    if self.errors == 1:
                        self.log(traceback.format_exc(limit=4).rstrip())
                self._stop.wait(1.0)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def stats(self) -> dict:
        """Counters for the learner's metrics."""
        return {"reanalyse/searches": float(self.searches), "reanalyse/positions": float(self.positions),
                "reanalyse/search_seconds": self.search_seconds,
                "reanalyse/weights_version": float(self.last_version), "reanalyse/errors": float(self.errors)}
