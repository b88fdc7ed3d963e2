"""Settings of the batched search (``SearchConfig``): pUCT or Gumbel root selection, noise,
temperature schedule.

This module imports only the standard library and ``muzero.config``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from muzero.config import _fail, check_float, check_int


ROOT_SELECTIONS = ("puct", "gumbel")


GUMBEL_Q_RANGES = ("node", "tree")


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Monte-Carlo tree search settings (``muzero.mcts``).

    pUCT, as in the MuZero pseudocode:
      c(s) = log((N(s) + pb_c_base + 1) / pb_c_base) + pb_c_init
      U(s, a) = c(s) * P(s, a) * sqrt(N(s) + parent_visit_offset) / (1 + N(s, a))
      score = normalised Q(s, a) (0 for unvisited children) + U(s, a)
    """

    num_simulations: int = 50
    pb_c_base: float = 19652.0
    pb_c_init: float = 1.25
    # paper: 0. SEED adds 1 to the parent's visit count inside the square root.
    parent_visit_offset: int = 0
    # The discount of the search's backups; a learner's value targets read this same field.
    discount: float = 0.997
    # paper: 0.25 (Atari). SEED uses 0.5.
    dirichlet_alpha: float = 0.25
    root_exploration_fraction: float = 0.25
    # Known (min, max) of Q used for min-max normalisation; None learns the bounds
    # from the tree (tic-tac-toe in SEED: (-4, 2)).
    known_bounds: Optional[tuple[float, float]] = None
    # Deepest node a simulation may create (root is depth 0); 0 means unlimited.
    max_depth: int = 0
    # Two-player zero-sum games: values alternate sign between plies.
    two_player: bool = False
    # Visit-count temperature for acting; 0 picks the most visited action.
    temperature: float = 1.0
    # Temperature multipliers keyed on the *learner's* training step (SEED keyed
    # its schedule on the actor's own step: a bug). Before temperature_steps[i]
    # the factor is temperature_factors[i]; after the last step, the last factor.
    temperature_steps: tuple[int, ...] = (500_000, 750_000)
    temperature_factors: tuple[float, ...] = (1.0, 0.5, 0.25)
    # Moves with an in-episode index >= this are played greedily (temperature 0);
    # -1 never. Board games: sampled openings, then best play, so that Monte-Carlo
    # value targets score positions under strong play rather than under exploration
    # (SEED's tic-tac-toe flag play_max_after_moves; the pseudocode's board games
    # sample the first 30 moves).
    greedy_after_moves: int = -1
    # pUCT acting: this fraction of each actor's envs (the last round(f * E) of its E envs)
    # plays the most visited action at every move instead of sampling with the temperature
    # (root noise still applies), so some of the collected episodes follow the near-greedy
    # policy, as Ape-X gives its actors a spread of exploration rates. 0: every env samples.
    greedy_env_fraction: float = 0.0
    # How the root spends the simulations and what the search returns as the policy target:
    # "puct" (MuZero: Dirichlet noise, pUCT everywhere, visit counts as the target, actions
    # sampled from the visits with the temperature) or "gumbel" (Gumbel MuZero, Danihelka
    # et al. 2022: Gumbel-top-k sampling of max_num_considered_actions root actions,
    # sequential halving of the simulations among them, a deterministic interior rule, the
    # action chosen by the search itself and softmax(logits + sigma(completed Q)) as the
    # target; no Dirichlet noise and no temperature). docs/SEARCH.md has the formulas.
    root_selection: str = "puct"
    # Gumbel: root actions considered (k of Gumbel-top-k; mctx's default 16).
    max_num_considered_actions: int = 16
    # Gumbel: scale of the Gumbel(0, 1) noise at the root in training (evaluation uses 0).
    gumbel_scale: float = 1.0
    # Gumbel: sigma(q) = (maxvisit_init + max_a N(a)) * value_scale * q, for q rescaled to
    # [0, 1] over a node's actions (mctx's qtransform_completed_by_mix_value defaults).
    gumbel_value_scale: float = 0.1
    gumbel_maxvisit_init: float = 50.0
    # Gumbel: the range q is rescaled over: "node" (min and max of the node's completed Q,
    # as mctx) or "tree" (that range widened to every Q the search has backed up so far in
    # the tree, the bounds pUCT normalises with), so that two nearly equal Q values of a
    # node stay nearly equal in sigma instead of being spread to 0 and 1.
    gumbel_q_range: str = "node"
    # Evaluation (the greedy evaluation actors and python -m muzero.eval) may play by another
    # root than training: "" plays by root_selection; "puct" or "gumbel" overrides it there.
    # Training's acting, its policy targets and reanalyse never use these two fields.
    # Evaluating with "gumbel" picks the move by argmax(logits + sigma(completed Q)) among the
    # most visited considered actions, so the searched values choose it rather than the
    # share of visits the prior steered (docs/SEARCH.md, "Evaluation root").
    eval_root_selection: str = ""
    # Gumbel's value scale in evaluation; 0 uses gumbel_value_scale.
    eval_gumbel_value_scale: float = 0.0

    def __post_init__(self):
        if self.gumbel_q_range not in GUMBEL_Q_RANGES:
            _fail("SearchConfig", "gumbel_q_range", self.gumbel_q_range,
                  f"must be one of {', '.join(GUMBEL_Q_RANGES)}")
        if self.root_selection not in ROOT_SELECTIONS:
            _fail("SearchConfig", "root_selection", self.root_selection,
                  f"must be one of {', '.join(ROOT_SELECTIONS)}")
        if self.eval_root_selection not in ("",) + ROOT_SELECTIONS:
            _fail("SearchConfig", "eval_root_selection", self.eval_root_selection,
                  f"must be empty (evaluate as root_selection) or one of {', '.join(ROOT_SELECTIONS)}")
        check_float(self, "eval_gumbel_value_scale", 0.0, 1e6)
        check_int(self, "max_num_considered_actions", 1, 100_000)
        check_float(self, "gumbel_scale", 0.0, 1e6)
        check_float(self, "gumbel_value_scale", 0.0, 1e6, lo_open=True)
        check_float(self, "gumbel_maxvisit_init", 0.0, 1e9)
        check_int(self, "num_simulations", 1, 100_000)
        check_int(self, "greedy_after_moves", -1)
        check_float(self, "greedy_env_fraction", 0.0, 1.0)
        check_float(self, "pb_c_base", 0.0, lo_open=True)
        check_float(self, "pb_c_init", 0.0)
        check_int(self, "parent_visit_offset", 0, 1)
        check_float(self, "discount", 0.0, 1.0, lo_open=True)
        check_float(self, "dirichlet_alpha", 0.0, lo_open=True)
        check_float(self, "root_exploration_fraction", 0.0, 1.0)
        check_int(self, "max_depth", 0)
        check_float(self, "temperature", 0.0)
        if self.known_bounds is not None:
            kb = tuple(self.known_bounds)
            if len(kb) != 2 or not all(isinstance(v, (int, float)) for v in kb) or not kb[0] < kb[1]:
                _fail("SearchConfig", "known_bounds", self.known_bounds,
                      "must be None or a pair (low, high) with low < high")
            object.__setattr__(self, "known_bounds", (float(kb[0]), float(kb[1])))
        steps, factors = tuple(self.temperature_steps), tuple(self.temperature_factors)
        if len(factors) != len(steps) + 1:
            _fail("SearchConfig", "temperature_factors", factors,
                  f"needs exactly len(temperature_steps)+1 = {len(steps) + 1} entries")
        if any(b <= a for a, b in zip(steps, steps[1:])) or any(s < 0 for s in steps):
            _fail("SearchConfig", "temperature_steps", steps, "must be non-negative and increasing")
        if any(f < 0 for f in factors):
            _fail("SearchConfig", "temperature_factors", factors, "must all be >= 0")
        object.__setattr__(self, "temperature_steps", steps)
        object.__setattr__(self, "temperature_factors", factors)

    @property
    def num_nodes(self) -> int:
        """Nodes one search tree needs: the root plus one per simulation (S + 1). The latent
        cache's nodes per slot, the actor's tree workspace and the evaluator all use this."""
        return self.num_simulations + 1

    def for_evaluation(self) -> "SearchConfig":
        """The settings an evaluation search uses: ``eval_root_selection`` and
        ``eval_gumbel_value_scale`` in place of ``root_selection`` and ``gumbel_value_scale``
        where they are set; itself when neither is."""
        changes = {}
        if self.eval_root_selection:
            changes["root_selection"] = self.eval_root_selection
        if self.eval_gumbel_value_scale > 0:
            changes["gumbel_value_scale"] = self.eval_gumbel_value_scale
        return dataclasses.replace(self, **changes) if changes else self

    def temperature_at(self, train_step: int) -> float:
        """Acting temperature at the learner's training step ``train_step``."""
        for step, factor in zip(self.temperature_steps, self.temperature_factors):
            if train_step < step:
                return self.temperature * factor
        return self.temperature * self.temperature_factors[-1]
