"""MuZero's typed settings (search, targets, replay, network, training) and the validation helpers
every algorithm's config uses.

Every setting lives in a frozen dataclass with a documented default. Defaults follow
SEED RL's MuZero (its Atari settings; docs/ARCHITECTURE.md, "Where the defaults come
from") except where a comment says ``paper:``: there the MuZero paper
(Schrittwieser et al. 2020, Appendix) is followed instead, and the SEED value is named.

Validation happens in ``__post_init__``; a bad value raises :class:`ConfigError` whose
message names the field, the value and the accepted range. ``to_dict`` / ``from_dict``
round-trip through plain JSON types so a run can save ``config.json`` in its log
directory and a later run (resume, fine-tune, evaluation) can read it back.

This module imports only the standard library.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from typing import Any, Optional


class ConfigError(ValueError):
    """A setting is out of range or of the wrong type."""


def _fail(cls_name: str, field: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{cls_name}.{field}={value!r} is invalid: {allowed}")


def check_int(obj, field: str, lo: int, hi: Optional[int] = None) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(type(obj).__name__, field, value, "must be an integer")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        _fail(type(obj).__name__, field, value, f"must be an integer {rng}")


def check_float(obj, field: str, lo: float, hi: float = math.inf,
                 lo_open: bool = False, hi_open: bool = False) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        _fail(type(obj).__name__, field, value, "must be a number")
    bad_lo = value <= lo if lo_open else value < lo
    bad_hi = value >= hi if hi_open else value > hi
    if bad_lo or bad_hi:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        _fail(type(obj).__name__, field, value, f"must be in {left}{lo}, {hi}{right}")


def check_bool(obj, field: str) -> None:
    value = getattr(obj, field)
    if not isinstance(value, bool):
        _fail(type(obj).__name__, field, value, "must be true or false")


def check_choice(obj, field: str, choices: tuple) -> None:
    value = getattr(obj, field)
    if value not in choices:
        _fail(type(obj).__name__, field, value, f"must be one of {list(choices)}")


def check_sizes(obj, field: str) -> None:
    """A non-empty tuple of layer widths in [1, 65536] (a JSON list becomes a tuple, in place)."""
    sizes = getattr(obj, field)
    if isinstance(sizes, list):
        sizes = tuple(sizes)
    if (not isinstance(sizes, tuple) or not sizes
            or any(isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 65_536 for s in sizes)):
        _fail(type(obj).__name__, field, getattr(obj, field), "must be a non-empty list of integers in [1, 65536]")
    object.__setattr__(obj, field, sizes)


def fail_field(obj, field: str, value: Any, allowed: str) -> None:
    """Raises the ConfigError of every check: ``<Class>.<field>=<value> is invalid: <allowed>``."""
    _fail(type(obj).__name__, field, value, allowed)


class SectionedConfig:
    """Base of an algorithm's config (a frozen dataclass): every field is a frozen section
    dataclass, which ``--set=section.field=value`` addresses. Call ``coerce_sections()``
    first in ``__post_init__``: sections given as dicts (from JSON) become dataclasses."""

    def coerce_sections(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            cls, value = hints[f.name], getattr(self, f.name)
            if isinstance(value, dict):
                object.__setattr__(self, f.name, from_dict(cls, value))
            elif not isinstance(value, cls):
                fail_field(self, f.name, value, f"must be a {cls.__name__}")

    def to_dict(self) -> dict:
        return to_dict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict):
        return from_dict(cls, data)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


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


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    """How training targets are built from stored trajectories (``muzero.replay``)."""

    # paper: K = 5. SEED's Atari setting is 10.
    num_unroll_steps: int = 5
    # n of the n-step value target; -1 bootstraps nothing (Monte-Carlo return).
    td_steps: int = 10
    # Off-policy correction (EfficientZero): a sampled position's n shrinks by one for
    # every this many env steps stored after it, down to 1, so that targets of data acted
    # by an old policy bootstrap sooner from the current value instead of summing more
    # of that policy's rewards: n_b = max(1, td_steps - floor(age_b / this)). 0: every
    # sample uses td_steps. EfficientZero uses 0.3 times the run's env steps. CartPole's
    # few_env_steps preset sets 250: to 20,000 env steps, seeds 0-2 each reached >= 475 with
    # it, one of them without (1,000 made the cart's drift off the track rarer but not the
    # returns higher; docs/BENCHMARKS.md).
    td_shrink_every_steps: int = 0
    discount: float = 0.997
    # Frames stacked into one network input for image envs (paper: 32; SEED: 16).
    # Vector and board envs use 1.
    stack_frames: int = 32
    # Bootstrap the n-step value targets from the current network's value of the
    # bootstrap positions (a value-only reanalyse, as in MuZero Reanalyze and
    # EfficientZero) instead of the root values stored when the data was acted. One
    # extra initial inference per batch on up to B * (K + 1) positions: cheap for
    # vector observations, costly for stacked frames.
    reanalyse_values: bool = False
    # With reanalyse_values: bootstrap from a copy of the trained weights refreshed every
    # this many training steps (a target network, as EfficientZero's refreshed every 200
    # steps and LightZero's every 100) instead of the weights being trained. 0: the
    # trained weights themselves. With CartPole's few_env_steps preset, 100 made the greedy
    # snapshots worse on all three seeds (docs/BENCHMARKS.md).
    value_target_update_steps: int = 0
    # Reanalyse (docs/REANALYSE.md): the learner's worker thread re-runs the search on
    # stored positions with the served weights and writes their policy target and root
    # value back; this fraction of every training batch is drawn from positions it
    # refreshed. 0 turns the worker off (no extra storage; batches as without it).
    reanalyse_fraction: float = 0.0
    # Positions per reanalyse search (the worker's lease on the inference service: one
    # batch of this many trees, like an actor with this many envs).
    reanalyse_batch_size: int = 128
    # Root noise in the reanalyse search, as the training actors' (Dirichlet with pUCT,
    # Gumbel with Gumbel roots), as EfficientZero and LightZero reanalyse. Without it the
    # refreshed visit distribution follows the prior and sharpens it: in CartPole runs with
    # half of each batch reanalysed the greedy policy collapsed to one action (return ~9).
    reanalyse_root_noise: bool = True
    # Refresh whole unroll windows: each drawn position and the K after it in its episode
    # (MuZero Reanalyse and EfficientZero recompute the targets of every unrolled step), so a
    # row drawn from the refreshed pool trains on fresh policy targets along its unroll, not
    # only at step 0. false: the drawn positions only.
    reanalyse_whole_unroll: bool = True

    def __post_init__(self):
        check_bool(self, "reanalyse_values")
        check_int(self, "value_target_update_steps", 0, 10**9)
        if self.value_target_update_steps and not self.reanalyse_values:
            _fail("TargetConfig", "value_target_update_steps", self.value_target_update_steps,
                  "needs reanalyse_values=true (without it the targets use the stored root values)")
        check_bool(self, "reanalyse_root_noise")
        check_bool(self, "reanalyse_whole_unroll")
        check_float(self, "reanalyse_fraction", 0.0, 1.0)
        check_int(self, "reanalyse_batch_size", 1, 1024)
        check_int(self, "num_unroll_steps", 0, 1000)
        check_int(self, "td_steps", -1, 100_000)
        if self.td_steps == 0:
            _fail("TargetConfig", "td_steps", 0, "must be -1 (Monte-Carlo) or >= 1")
        check_int(self, "td_shrink_every_steps", 0, 10**12)
        if self.td_shrink_every_steps and self.td_steps < 0:
            _fail("TargetConfig", "td_shrink_every_steps", self.td_shrink_every_steps,
                  "needs n-step targets (td_steps >= 1); Monte-Carlo targets (td_steps=-1) have no n to shrink")
        check_float(self, "discount", 0.0, 1.0, lo_open=True)
        check_int(self, "stack_frames", 1, 256)

    def frames_for(self, is_image: bool) -> int:
        """Frames stacked into one network input on an env: ``stack_frames`` for image
        observations, 1 for vector and board ones."""
        return self.stack_frames if is_image else 1


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """Prioritized replay settings (``muzero.replay``)."""

    # Capacity in environment steps; whole oldest segments are evicted first.
    capacity_steps: int = 200_000
    # Env steps per pushed segment (actors push every T steps, not only at episode end).
    segment_length: int = 200
    # paper: alpha = 1 and beta = 1. SEED uses 0 and 0 (uniform, no correction).
    priority_exponent: float = 1.0
    importance_sampling_exponent: float = 1.0
    # Priorities are clipped below at this value so every position stays reachable.
    min_priority: float = 1e-3
    # Training waits until the replay holds this many env steps.
    min_steps_to_sample: int = 1_000
    # Samples drawn per env step inserted (the replay ratio); 0 means no limit.
    samples_per_insert: float = 0.0
    # Allowed slack of the rate limiter, in samples, before a side blocks.
    samples_per_insert_tolerance: float = 10_000.0

    def __post_init__(self):
        check_int(self, "capacity_steps", 1)
        check_int(self, "segment_length", 1, 100_000)
        check_float(self, "priority_exponent", 0.0, 10.0)
        check_float(self, "importance_sampling_exponent", 0.0, 1.0)
        check_float(self, "min_priority", 0.0, lo_open=True)
        check_int(self, "min_steps_to_sample", 1)
        check_float(self, "samples_per_insert", 0.0)
        check_float(self, "samples_per_insert_tolerance", 0.0)
        if self.min_steps_to_sample > self.capacity_steps:
            _fail("ReplayConfig", "min_steps_to_sample", self.min_steps_to_sample,
                  f"must be <= capacity_steps ({self.capacity_steps})")


@dataclasses.dataclass(frozen=True)
class SupportConfig:
    """A categorical support for values or rewards.

    With ``use_transform`` the scalar x is first mapped by
    h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps * x, then two-hot encoded over
    ``num_bins`` evenly spaced bins covering [low, high] (in h-space).
    """

    low: float = -300.0
    high: float = 300.0
    num_bins: int = 601
    use_transform: bool = True
    eps: float = 0.001

    def __post_init__(self):
        check_int(self, "num_bins", 2, 100_000)
        check_float(self, "eps", 0.0, 1.0)
        if not self.low < self.high:
            _fail("SupportConfig", "low", self.low, f"must be < high ({self.high})")

# The network's three functions, each a trainable part (--trainable_parts picks among them).
# Here rather than in muzero.network so the command line checks the flag without TensorFlow.
NETWORK_PARTS = ("representation", "dynamics", "prediction")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Network shape (``muzero.network``). The torso is chosen from the env descriptor."""

    value_support: SupportConfig = SupportConfig()
    reward_support: SupportConfig = SupportConfig()
    # MLP torso (vector observations): width of hidden layers and latent size.
    mlp_hidden_size: int = 128
    mlp_num_layers: int = 2
    latent_size: int = 64
    # MLP torso: the dynamics adds its torso's output to the hidden state it was given,
    # next = normalise(hidden + torso([hidden, action])), as LightZero's MLP dynamics
    # (res_connection_in_dynamics), instead of next = normalise(torso(...)): a step of the
    # model starts from "nothing changes", which a few hundred updates cannot yet teach
    # the plain torso. Same variables either way. Image and board envs (the residual conv
    # torso) refuse it. Within the seeds' spread on CartPole's few_env_steps preset
    # (docs/BENCHMARKS.md).
    mlp_residual_dynamics: bool = False
    # MLP torso and heads (vector observations): the hidden layers add a bias before their
    # LayerNorm. Without one the representation sees only the direction of the observation
    # vector, not its size (LayerNorm(W o) = LayerNorm(W c o) for c > 0): on CartPole states
    # near the track's edge looked like states halfway there, the values of the last 30
    # steps of episodes that ran off the track were flat at 16-20, and few_env_steps runs
    # stalled near 200 (docs/NETWORK.md). False rebuilds the networks of runs made before
    # this setting existed (2026-12-04), to resume their checkpoints. Image and board
    # networks (conv torsos, bias-free head layers) are the same either way.
    mlp_bias: bool = True
    # Seed of the initial weights; -1 (the default): the run's --seed. Lets a run keep its
    # actors' and replay's random streams (--seed) while drawing other initial weights, to
    # tell an outcome that follows the weights from one that follows the data
    # (docs/NETWORK.md). A resume restores the weights, so it may pass another value.
    init_seed: int = -1
    # Residual conv torso (image and board observations). Small CPU-friendly
    # defaults; the paper uses 256 channels and 16 blocks.
    conv_channels: int = 64
    conv_num_blocks: int = 2
    # Image envs: the paper's downsampling stack (96x96 -> 6x6) before the torso,
    # with this many residual blocks at H/4 and at H/8 (paper: 2 at H/2, 3, 3; the
    # blocks at H/2 are left out on CPU). False keeps the input resolution (small
    # frames, e.g. MinAtar).
    conv_downsample: bool = True
    conv_downsample_blocks: int = 1
    # 1x1-conv channels feeding the value / reward / policy MLP heads.
    conv_reduced_channels: int = 16
    # Heads: hidden width of value / reward / policy MLPs.
    head_hidden_size: int = 64
    jit_compile: bool = False
    # Layer skipping (Trax's SkippingSerial) of the residual torso blocks of the
    # representation and dynamics (conv_num_blocks of each; image and board envs only,
    # the MLP torso has no residual blocks and is refused). Each training step draws one
    # n ~ Uniform(low, high), high = conv_num_blocks / skip_fraction, and block i (0-based)
    # runs only when i < n: after warm-up block i is skipped with probability
    # i * skip_fraction / conv_num_blocks (the first never). Every block runs outside
    # training (inference, evaluation, bootstrap values, exports). 0 turns it off.
    skip_fraction: float = 0.0
    # low = warmup * conv_num_blocks, warmup falling linearly from 1 at training step 0 to
    # 0 at this step: no block is skipped at the start. 0: full skipping from step 0.
    skip_warmup_steps: int = 0
    # Projection / predictor heads of the self-supervised losses (muzero.network.ssl;
    # the consistency loss and pretraining). EfficientZero (Atari): 1024 / 1024 / 512;
    # CPU-sized here. Built only when a loss uses them.
    projection_hidden: int = 256
    projection_size: int = 256
    predictor_hidden: int = 128

    def __post_init__(self):
        for name in ("value_support", "reward_support"):
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, SupportConfig(**value))
            elif not isinstance(value, SupportConfig):
                _fail("NetworkConfig", name, value, "must be a SupportConfig")
        check_int(self, "mlp_hidden_size", 1)
        check_int(self, "mlp_num_layers", 0, 64)
        check_int(self, "latent_size", 1)
        check_int(self, "conv_channels", 1)
        check_int(self, "conv_num_blocks", 0, 64)
        check_int(self, "conv_downsample_blocks", 0, 64)
        check_int(self, "conv_reduced_channels", 1)
        check_bool(self, "conv_downsample")
        check_bool(self, "jit_compile")
        check_bool(self, "mlp_residual_dynamics")
        check_bool(self, "mlp_bias")
        check_int(self, "init_seed", -1, 2**32 - 1)
        check_int(self, "head_hidden_size", 1)
        check_float(self, "skip_fraction", 0.0, 1.0)
        check_int(self, "skip_warmup_steps", 0)
        if self.skip_fraction > 0 and self.conv_num_blocks < 1:
            _fail("NetworkConfig", "skip_fraction", self.skip_fraction,
                  "layer skipping needs conv_num_blocks >= 1 (set skip_fraction=0)")
        check_int(self, "projection_hidden", 1, 65_536)
        check_int(self, "projection_size", 1, 65_536)
        check_int(self, "predictor_hidden", 1, 65_536)


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Optimiser and loss settings (``muzero.learner``)."""

    batch_size: int = 64
    # SEED: adam. paper: SGD with momentum 0.9 (and lr 0.05).
    optimizer: str = "adam"
    momentum: float = 0.9
    learning_rate: float = 1e-3
    # "constant", "cosine" (SEED Atari: CosineDecay to alpha*lr over lr_decay_steps)
    # or "cosine_restarts" (SEED tic-tac-toe).
    lr_schedule: str = "cosine"
    lr_decay_steps: int = 350_000
    lr_alpha: float = 0.01
    weight_decay: float = 1e-5
    # paper: 0.25 for Atari. SEED has no value-loss scale (= 1).
    value_loss_weight: float = 0.25
    reward_loss_weight: float = 1.0
    policy_loss_weight: float = 1.0
    # 0 disables global-norm gradient clipping.
    gradient_clip_norm: float = 0.0
    # paper: 0.5 at every recurrent step. SEED: 1.0 at the first, 0.5 after.
    hidden_gradient_scale: float = 0.5
    # "paper": recurrent-step losses scaled by 1/K. "seed": by 1/max(sum of masks, 1).
    recurrent_loss_scaling: str = "paper"
    # Envs with registered symmetries: board games (envs.board_symmetries; tic-tac-toe's 8)
    # train each sampled position under one random symmetry; mirrored vector envs
    # (envs.mirror_actions; CartPole) negate half of the positions and swap their actions
    # (muzero/replay/augment.py).
    augment_symmetries: bool = False
    # Compile the whole training step (loss, gradients, optimiser update) with XLA; one
    # learner device only. Off by default: 1.3-1.5x the steps/s for MinAtar's network, within
    # the noise for the vector MLPs (bench/train_step_bench.py, docs/NETWORK.md).
    jit_compile: bool = False
    # EfficientZero's temporal consistency loss (its weight there: 2): for k = 1..K, the
    # negative cosine between predictor(projection(dynamics' hidden state at k)) and
    # stop_gradient(projection(representation(observation at t+k))), masked past the
    # stored episode end and scaled like the other recurrent terms. Needs the next K
    # observations in every batch (the replay gathers them only when this is > 0) and
    # builds the network's pretrain_head (NetworkConfig.projection_*). 0 turns it off.
    consistency_loss_weight: float = 0.0
    # d > 0: the actors, evaluators, the reanalyse worker and exports play an exponential
    # moving average of the trained weights (Polyak averaging) instead of the weights
    # themselves: after training step t, average <- d' average + (1 - d') trained with
    # d' = min(d, (1 + t) / (10 + t)), so the first steps are followed closely. The
    # losses and value bootstraps use the trained weights. Checkpoints keep the average;
    # a resume from a checkpoint without one starts it from the trained weights.
    # 0: they play the trained weights (as before).
    serving_ema_decay: float = 0.0

    def __post_init__(self):
        check_int(self, "batch_size", 1, 65_536)
        check_float(self, "serving_ema_decay", 0.0, 1.0, hi_open=True)
        check_float(self, "consistency_loss_weight", 0.0, 1e6)
        check_bool(self, "augment_symmetries")
        check_bool(self, "jit_compile")
        check_choice(self, "optimizer", ("adam", "sgd"))
        check_float(self, "momentum", 0.0, 1.0, hi_open=True)
        check_float(self, "learning_rate", 0.0, 10.0, lo_open=True)
        check_choice(self, "lr_schedule", ("constant", "cosine", "cosine_restarts"))
        check_int(self, "lr_decay_steps", 1)
        check_float(self, "lr_alpha", 0.0, 1.0)
        check_float(self, "weight_decay", 0.0, 1.0)
        check_float(self, "value_loss_weight", 0.0)
        check_float(self, "reward_loss_weight", 0.0)
        check_float(self, "policy_loss_weight", 0.0)
        check_float(self, "gradient_clip_norm", 0.0)
        check_float(self, "hidden_gradient_scale", 0.0, 1.0)
        check_choice(self, "recurrent_loss_scaling", ("paper", "seed"))


PRETRAIN_OBJECTIVES = ("ntxent", "simsiam")


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Self-supervised pretraining of the representation (``--pretrain``; docs/PRETRAINING.md).

    A pretraining run's actors play uniformly random legal moves (no search) and its
    learner (``muzero.algorithms.muzero.pretraining``) trains only the representation
    and the pretrain head (``muzero.network.ssl``: projection, predictor) to map two
    augmented views of one replay observation close together (``muzero.network.pretrain``).
    """

    # On: this run pretrains (set by --pretrain; recorded in config.json, so resuming the
    # log directory needs the same setting).
    enabled: bool = False
    # "ntxent" (SimCLR's contrastive loss, as SEED RL's MuZero pretrains) or "simsiam"
    # (negative cosine to a stop-gradient target, symmetrised; no negatives).
    objective: str = "ntxent"
    # NT-Xent temperature: similarities are cosines divided by this. SimCLR's default
    # 0.1; SEED hard-codes 1.0 (its flag for it is ignored).
    temperature: float = 0.1
    # NT-Xent: compare predictor(projection(view 1)) with projection(view 2) and the
    # reverse, averaged (SEED's recipe); off: projection against projection (SimCLR).
    # SimSiam always uses the predictor.
    use_predictor: bool = True
    # Images: random shift by up to this many pixels per axis (edge-padded, cropped back;
    # DrQ / EfficientZero use 4 on 84-96 px frames; 1 suits 10x10 MinAtar frames). 0: none.
    shift_pixels: int = 4
    # Images: each view's frames are scaled by a factor drawn from U(1 - b, 1 + b)
    # (SEED's range is 0.85-1.15, drawn per pixel there, per view here). 0: none.
    brightness: float = 0.15
    # Vector observations: standard deviation of the Gaussian noise added to each view,
    # in the observation's own units. 0: none.
    noise_std: float = 0.05

    def __post_init__(self):
        check_bool(self, "enabled")
        check_choice(self, "objective", PRETRAIN_OBJECTIVES)
        check_float(self, "temperature", 0.0, 100.0, lo_open=True)
        check_bool(self, "use_predictor")
        check_int(self, "shift_pixels", 0, 1024)
        check_float(self, "brightness", 0.0, 1.0, hi_open=True)
        check_float(self, "noise_std", 0.0, 1e6)


@dataclasses.dataclass(frozen=True)
class MuZeroConfig(SectionedConfig):
    """Everything a MuZero run needs, saved as ``config.json`` in the log directory."""

    search: SearchConfig = SearchConfig()
    targets: TargetConfig = TargetConfig()
    replay: ReplayConfig = ReplayConfig()
    network: NetworkConfig = NetworkConfig()
    training: TrainingConfig = TrainingConfig()
    pretrain: PretrainConfig = PretrainConfig()

    def __post_init__(self):
        self.coerce_sections()
        if self.search.discount != self.targets.discount:
            _fail("MuZeroConfig", "targets.discount", self.targets.discount,
                  f"must equal search.discount ({self.search.discount})")


def to_dict(config) -> dict:
    """A config dataclass as nested plain dicts (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def from_dict(cls, data: dict):
    """Builds ``cls`` from nested dicts; unknown keys raise :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{cls.__name__}: expected a dict, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown field(s) {unknown}; known fields: {sorted(known)}")
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            value = from_dict(hint, value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def parse_override(item: str, known_sections: dict, flag: str = "--set") -> tuple:
    """One ``section.field=value`` override (a ``--set`` flag's value) -> (section, field,
    value), checked against ``known_sections`` ({name: section dataclass type}).

    The value is read as JSON when it parses (numbers, booleans, lists, objects), else kept
    as the text; a list becomes a tuple and an object given for a ``*_support`` field a
    :class:`SupportConfig`. Raises :class:`ConfigError` naming what is wrong and what is known.
    The field's own range checks run when the section is rebuilt with the value."""
    match = re.fullmatch(r"(\w+)\.(\w+)=(.*)", item, re.S)
    if not match or match.group(1) not in known_sections:
        raise ConfigError(f"{flag}={item!r} must look like section.field=value with section in "
                          f"{', '.join(known_sections)}")
    section, field, text = match.groups()
    known = {f.name for f in dataclasses.fields(known_sections[section])}
    if field not in known:
        raise ConfigError(f"{flag}: {section} has no field {field!r}; fields: {', '.join(sorted(known))}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if field.endswith("_support") and isinstance(value, dict):
        keys = [f.name for f in dataclasses.fields(SupportConfig)]
        if set(value) - set(keys):
            raise ConfigError(f"{flag}={item!r}: {section}.{field} takes keys {', '.join(keys)}; got "
                              f"{', '.join(sorted(value))}")
        value = SupportConfig(**value)
    if isinstance(value, list):
        value = tuple(value)
    return section, field, value
