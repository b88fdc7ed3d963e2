"""Per-env defaults of a MuZero run (``--algo=muzero``), in one place.

``run_defaults(env_name)`` returns a :class:`RunSettings` whose fields are what
``python -m muzero.learner`` uses unless a flag overrides them. The learner prints
the resulting settings at start and saves them as ``config.json`` in the log
directory. Values below were chosen for a 2-core CPU machine; where they differ
from the MuZero paper or SEED RL the comment says why, and a value chosen by measurement
names its comparison in one line; every such comparison is a row of docs/RESULTS.md,
"Why the defaults are what they are" (WHY below).
"""
from __future__ import annotations

import dataclasses
import math

import envs
from muzero.algorithms.muzero.config import (MuZeroConfig, NetworkConfig, ReplayConfig, SupportConfig,
                                             TargetConfig, TrainingConfig)
from muzero.mcts.config import SearchConfig
from muzero.core import Preset
from muzero.settings import RunSettings, replace_sections


def _cartpole() -> RunSettings:
    # Discount 0.99 (not 0.997): CartPole returns reach 500; with 0.99 values stay below 100,
    # so a small value support (21 bins in h-space, up to h^-1(10) ~ 120) covers them.
    discount = 0.99
    return RunSettings(
        env="cartpole", algo="muzero",
        config=MuZeroConfig(
            # Gumbel root: value_scale 0.02, not mctx's 0.1, which with two actions turns any Q
            # difference into a near one-hot target. 5 of 6 seeds solved at 0.02, 4 of 6 at 0.1 (WHY).
            search=SearchConfig(num_simulations=25, discount=discount, temperature=1.0,
                                temperature_steps=(3_000, 6_000), temperature_factors=(1.0, 0.5, 0.25),
                                gumbel_value_scale=0.02),
            # Value targets bootstrap from the trained network: in a replay that keeps the whole
            # run stored root values go stale. Seed 2: ~330 with them, 475 at 8.1 min without (WHY).
            targets=TargetConfig(num_unroll_steps=5, td_steps=10, stack_frames=1,
                                 reanalyse_values=True),
            # Prioritized with EfficientZero's alpha = 0.6, beta = 0.4: the rare states near the
            # track's edge get trained. 9 of 9 seed runs at 475, 7 of 9 uniform; 1 / 1 stalls (WHY).
            # A replay that holds the whole run: with 100k steps the return fell from its peak in
            # 3 of 4 runs once only near-perfect episodes were left; with 1M it held (WHY).
            replay=ReplayConfig(capacity_steps=1_000_000, segment_length=50, min_steps_to_sample=1_000,
                                priority_exponent=0.6, importance_sampling_exponent=0.4,
                                samples_per_insert=8.0, samples_per_insert_tolerance=20_000.0),
            network=NetworkConfig(value_support=SupportConfig(-10.0, 10.0, 21, True),
                                  reward_support=SupportConfig(-2.0, 2.0, 5, True),
                                  mlp_hidden_size=64, mlp_num_layers=2, latent_size=64, mlp_bias=False,
                                  head_hidden_size=64),
            # Value loss weight 1 (the paper's 0.25 is for Atari with reanalyse) and 8 samples per
            # inserted step: 195 after 1.7 min against 2.2 min with 0.25 and 4.
            # Cosine decay from 3e-3 to 3e-4 over 20k steps (~10 minutes here), then constant (WHY).
            # No L2 penalty: under Adam it shrinks whole heads to constants (docs/NETWORK.md,
            # "Weight decay with Adam"); MinAtar, Atari and tic-tac-toe keep 1e-4, unmeasured (WHY).
            # No biases in the hidden Dense layers: 475 within 5 min on 10 of 10 runs, median 1.68
            # min, against 4 of 5 with them; gym: ids and the few_env_steps preset keep them (WHY).
            # Mirror augmentation (the negated state with swapped pushes, half of each batch): 475
            # within 5 min on 5 of 5 seeds with it, 3 of 5 without (WHY).
            training=TrainingConfig(batch_size=128, learning_rate=3e-3, lr_schedule="cosine",
                                    lr_decay_steps=20_000, lr_alpha=0.1,
                                    weight_decay=0.0, value_loss_weight=1.0, augment_symmetries=True),
        ),
        # One acting process with many envs: on 2 cores a second process only adds gRPC round
        # trips, and each simulation is one RPC whatever the batch. 128 envs: 4,400 training
        # steps in 90 s against 2,800-3,600 with 64 (WHY). 20 evaluation envs play the 20
        # episodes the solve criterion averages at once.
        num_actors=1, envs_per_actor=128, num_eval_actors=1, eval_envs_per_actor=20,
        checkpoint_every_secs=120.0,
    )


def _tictactoe() -> RunSettings:
    # Board games: discount 1 and Monte-Carlo value targets (paper), known bounds (-1, 1),
    # linear 3-bin supports over [-1, 1] (outcomes are -1, 0, +1). 50 simulations with 8
    # samples per insert. The first 4 moves of a game are sampled at temperature 1 and the
    # rest are the most visited move (greedy_after_moves, SEED's play_max_after_moves), so
    # that openings stay varied all run while Monte-Carlo targets score positions under
    # strong play; every sampled position is trained under one of the board's 8
    # symmetries (augment_symmetries). With both: 0 losses in 100 games to the perfect
    # player after 15 minutes in 3 of 3 runs, 9 with neither (WHY).
    return RunSettings(
        env="tictactoe", algo="muzero",
        config=MuZeroConfig(
            search=SearchConfig(num_simulations=50, discount=1.0, known_bounds=(-1.0, 1.0), two_player=True,
                                dirichlet_alpha=0.3, temperature=1.0, temperature_steps=(),
                                temperature_factors=(1.0,), greedy_after_moves=4),
            targets=TargetConfig(num_unroll_steps=5, td_steps=-1, stack_frames=1),
            # A replay that holds the whole run (~130-300k env steps in 15 minutes).
            replay=ReplayConfig(capacity_steps=400_000, segment_length=9, min_steps_to_sample=500,
                                priority_exponent=0.0, importance_sampling_exponent=0.0,
                                samples_per_insert=8.0, samples_per_insert_tolerance=20_000.0),
            network=NetworkConfig(value_support=SupportConfig(-1.0, 1.0, 3, False),
                                  reward_support=SupportConfig(-1.0, 1.0, 3, False),
                                  conv_channels=32, conv_num_blocks=2, conv_downsample=False,
                                  head_hidden_size=64),
            training=TrainingConfig(batch_size=128, learning_rate=2e-3, lr_schedule="constant",
                                    weight_decay=1e-4, value_loss_weight=1.0, augment_symmetries=True),
        ),
        num_actors=2, envs_per_actor=32, num_eval_actors=0, checkpoint_every_secs=120.0,
    )


def _atari() -> RunSettings:
    # CPU-friendly: 8 stacked frames (paper 32), a narrow residual net; the rest as the paper
    # (K=5, n=10, discount 0.997, 601-bin supports, value loss weight 0.25).
    return RunSettings(
        env="atari", algo="muzero",
        config=MuZeroConfig(
            search=SearchConfig(num_simulations=50),
            targets=TargetConfig(num_unroll_steps=5, td_steps=10, stack_frames=8),
            # Short segments and a small warm-up: each of 32 envs makes 2-3 steps/s on 2 cores, so
            # 200-step segments reached the replay after 76 s; with 20, first env steps at 15 s (WHY).
            replay=ReplayConfig(capacity_steps=200_000, segment_length=20, min_steps_to_sample=1_000,
                                samples_per_insert=2.0),
            network=NetworkConfig(conv_channels=32, conv_num_blocks=1, conv_downsample_blocks=1),
            training=TrainingConfig(batch_size=64),
        ),
        num_actors=2, envs_per_actor=16, num_eval_actors=0,
    )


def _gym() -> RunSettings:
    # Vector observations: the CartPole settings with hidden MLP biases (LunarLander-v3: 200
    # after a median 8.3 min with them, 18.5 without; WHY); fit_to_env then sizes the supports
    # and turns mirror augmentation back on where the env has a mirror. Evaluation actors stay on.
    settings = dataclasses.replace(_cartpole(), env="gym")
    return replace_sections(settings, {"training": {"augment_symmetries": False}, "network": {"mlp_bias": True}})


def _gym_image() -> RunSettings:
    # Image observations (e.g. gym:ALE/Pong-v5): the Atari settings (stacked frames, the conv
    # torso with downsampling); fit_to_env sizes the supports from the env.
    return dataclasses.replace(_atari(), env="gym")


def _minatar(env: str) -> RunSettings:
    # MinAtar (minatar:<Game>, docs/MINATAR.md): 10 x 10 frames of 0/1 object planes, at most
    # 6 actions, rewards of 1 per hit (Seaquest's surfacing bonus pays up to 10 at once).
    discount = 0.99   # as the MinAtar paper's DQN; values of 1-per-step rewards stay below 100
    return RunSettings(
        env=env, algo="muzero",
        config=MuZeroConfig(
            # 25 simulations (CartPole's): at most 6 actions; the search's cost per env step
            # is what limits acting on 2 cores.
            # Evaluation by Gumbel's root (argmax of log prior + sigma(completed Q) over searched
            # actions): pUCT's 25 simulations seldom visit actions of small prior, and its most
            # visited move scored lower on 8 of 9 MinAtar exports (Asterix 1.78 against 6.00,
            # SpaceInvaders 38.8 against 48.3; docs/MINATAR.md).
            search=SearchConfig(num_simulations=25, discount=discount, temperature=1.0,
                                temperature_steps=(5_000, 10_000), temperature_factors=(1.0, 0.5, 0.25),
                                eval_root_selection="gumbel"),
            # 4 stacked frames: the trail planes already show motion (the paper's DQN sees one
            # frame), but timers do not (Freeway's chicken moves every 3rd step, shots cool
            # down for 5); the last frames and actions show some of them. On 10 x 10 frames the
            # extra input channels cost little. Fresh bootstrap values from the trained
            # network (reanalyse_values) for a replay that keeps the whole run, as CartPole.
            targets=TargetConfig(num_unroll_steps=5, td_steps=10, stack_frames=4,
                                 reanalyse_values=True),
            # Holds the whole run (a 30-minute run acts a few hundred thousand steps); a
            # Seaquest frame is 1 kB, so 500k steps are ~0.5 GB. Priorities as CartPole's.
            replay=ReplayConfig(capacity_steps=500_000, segment_length=100, min_steps_to_sample=2_000,
                                priority_exponent=0.6, importance_sampling_exponent=0.4,
                                samples_per_insert=4.0, samples_per_insert_tolerance=20_000.0),
            # Supports: values up to h^-1(10) ~ 120 cover returns of 1-per-step rewards at
            # discount 0.99 (< 100) and the tens MinAtar episodes score; rewards up to
            # h^-1(3) ~ 15 cover Seaquest's surfacing bonus (<= 10) plus hits.
            # A small residual torso at the frame's own 10 x 10 resolution: no downsampling
            # (the Atari stack would shrink 10 x 10 to 1 x 1), one block of 16 channels (the
            # paper's DQN conv): 4-5 training steps/s in a Breakout run against 2.2-3.0 at 32 (WHY).
            network=NetworkConfig(value_support=SupportConfig(-10.0, 10.0, 21, True),
                                  reward_support=SupportConfig(-3.0, 3.0, 7, True),
                                  conv_channels=16, conv_num_blocks=1, conv_downsample=False,
                                  head_hidden_size=64),
            # Tic-tac-toe's conv learning rate and CartPole's value loss weight (fresh value
            # targets; the paper's 0.25 is for stale reanalysed Atari targets).
            training=TrainingConfig(batch_size=128, learning_rate=2e-3, lr_schedule="constant",
                                    weight_decay=1e-4, value_loss_weight=1.0),
        ),
        # Sized for 2 cores: one acting process (a second one only adds gRPC round trips and
        # competes with the trainer) with 64 envs per search batch, and one evaluation actor
        # whose 8 greedy envs give the progress line's evaluation return.
        num_actors=1, envs_per_actor=64, num_eval_actors=1, eval_envs_per_actor=8,
        # Evaluation episodes end after 2,500 steps (Freeway's own length) instead of the env's
        # 10,000: an evaluation actor makes ~3 steps/s per env here, and in a Seaquest run whose
        # early greedy play scored nothing and never died no evaluation episode ended in 52
        # minutes (docs/MINATAR.md).
        eval_env_options={"max_episode_steps": 2_500},
        checkpoint_every_secs=120.0,
    )


_DEFAULTS = {"cartpole": _cartpole, "tictactoe": _tictactoe, "atari": _atari}


# -- Presets (--preset=<name>; docs/PRESETS.md) ----------------------------------------------------------

# few_env_steps: learn from as few env steps as possible when steps are expensive (a real
# robot, a slow simulator), paying in training compute per env step. Measured on CartPole:
# docs/PRESETS.md gives each value's reason and the measurement.
FEW_ENV_STEPS = Preset(
    description="few env steps per unit of learning: 4 envs, segments of 10 steps, 128 samples "
                "(one batch of 128) per env step, sampling from 200 stored steps, 50 simulations, "
                "half of each actor's envs playing the most visited action, "
                "the temporal consistency loss at weight 2, 20-step targets one step shorter per "
                "250 env steps of the data's age, no L2 penalty (under Adam it shrinks the heads "
                "to nothing), hidden MLP biases",
    sections={"replay": {"samples_per_insert": 128.0, "samples_per_insert_tolerance": 1_000.0,
                         "min_steps_to_sample": 200, "segment_length": 10},
              "search": {"num_simulations": 50, "greedy_env_fraction": 0.5},
              "targets": {"td_steps": 20, "td_shrink_every_steps": 250},
              "training": {"consistency_loss_weight": 2.0, "weight_decay": 0.0},
              "network": {"mlp_bias": True}},
    top={"envs_per_actor": 4},
)

# offline: train on recorded episodes alone (--dataset; MuZero Unplugged's setting): no
# training actors, so no env steps; the evaluation actors play the current network. Half of
# each batch comes from positions the reanalyse worker has searched again with the current
# weights (policy targets better than the recorded actions); value targets bootstrap from
# the current network where the env's defaults say so. docs/PRETRAINING.md, "Offline".
# Reanalysed targets alone let the search drift onto actions the data never shows: on
# CartPole the greedy return reached 500 by training step 1,500 and fell to 10 (one action)
# after 3,500; with the recorded action mixed in at half weight it reached 500 by step 2,600
# and stayed at 440-500 to step 6,000 (docs/RESULTS.md, "Pretraining").
OFFLINE = Preset(
    description="train on a recorded dataset (--dataset) alone: no training actors, no replay ratio, "
                "half of each batch reanalysed by the current network's search, policy targets half "
                "the recorded action",
    sections={"replay": {"samples_per_insert": 0.0},
              "targets": {"reanalyse_fraction": 0.5, "recorded_action_weight": 0.5}},
    top={"num_actors": 0},
)

# small_network: a smaller conv network for image envs (Atari) on a CPU: half the channels
# and half the stacked frames: on Atari's 96 x 96 frames a fourth of the default's
# multiply-adds per representation call, a third per dynamics call (docs/PRESETS.md gives the
# counts and the measured acting and training rates).
SMALL_NETWORK = Preset(
    description="image envs: a 16-channel residual torso (default 32), 4 stacked frames (8), "
                "8 channels into the heads (16): a quarter to a third of the multiply-adds per "
                "inference and training step",
    sections={"network": {"conv_channels": 16, "conv_reduced_channels": 8},
              "targets": {"stack_frames": 4}},
    kinds=("image",),
)

PRESETS = {"few_env_steps": FEW_ENV_STEPS, "offline": OFFLINE, "small_network": SMALL_NETWORK}


def run_defaults(env: str) -> RunSettings:
    """Defaults for ``env``. ``gym:<ID>`` ids start from the CartPole settings;
    :func:`fit_run_defaults` then fits them to the env. ``minatar:<Game>``: :func:`_minatar`."""
    if env.startswith("gym:"):
        return dataclasses.replace(_gym(), env=env)
    if env.startswith("minatar:"):
        return _minatar(env)
    if env not in _DEFAULTS:
        raise ValueError(f"no defaults for env {env!r}; known: {sorted(_DEFAULTS)}, gym:<ID> and minatar:<Game>")
    return _DEFAULTS[env]()


# -- Defaults derived from the env ---------------------------------------------------------------------

# Widest support the fit produces: the MuZero paper's 601 bins over [-300, 300] in h-space
# (returns up to about 9e4 in size).
MAX_SUPPORT_HALF_WIDTH = 300


def _h(x: float, eps: float = 0.001) -> float:
    """The value transform h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (muzero.algorithms.muzero.network.support)."""
    return math.copysign(math.sqrt(abs(x) + 1.0) - 1.0, x) + eps * x


def _support(half_width: int) -> SupportConfig:
    return SupportConfig(-float(half_width), float(half_width), 2 * half_width + 1, True)


def discounted_horizon(discount: float, max_episode_steps) -> float:
    """sum_{t < T} discount^t: how many rewards of size 1 a return can add up to (inf when
    discount is 1 and the episode has no step limit)."""
    if discount >= 1.0:
        return float(max_episode_steps) if max_episode_steps else math.inf
    if not max_episode_steps:
        return 1.0 / (1.0 - discount)
    return (1.0 - discount ** max_episode_steps) / (1.0 - discount)


def fitted_supports(reward_scale: float, discount: float, max_episode_steps, typical_reward=None) -> tuple:
    """(value_support, reward_support, value_bound) for rewards of size at most
    ``reward_scale`` whose ordinary steps pay about ``typical_reward`` (default:
    ``reward_scale``, every step as large as the largest).

    The value support covers ``value_bound = typical_reward * discounted_horizon +
    (reward_scale - typical_reward)``: every step of the horizon paying the typical reward
    except one that pays the largest (a landing bonus, a crash penalty, a goal). The reward
    support covers ``reward_scale``. Each is a whole number of units in h-space with one
    bin per unit (the reward support one unit wider, so rarer larger rewards are not
    clipped at once), at most MAX_SUPPORT_HALF_WIDTH. CartPole (reward 1, discount 0.99,
    500 steps) gets exactly the built-in env's 21 and 5 bins."""
    typical = reward_scale if typical_reward is None else min(float(typical_reward), reward_scale)
    horizon = discounted_horizon(discount, max_episode_steps)
    if math.isinf(horizon):   # discount 1 and no step limit: unbounded unless ordinary steps pay 0
        value_bound = math.inf if typical > 0 else reward_scale
    else:
        value_bound = typical * horizon + (reward_scale - typical)
    value_half = MAX_SUPPORT_HALF_WIDTH if math.isinf(value_bound) else \
        min(MAX_SUPPORT_HALF_WIDTH, max(1, math.ceil(_h(value_bound))))
    reward_half = min(MAX_SUPPORT_HALF_WIDTH, math.ceil(_h(reward_scale)) + 1)
    return _support(value_half), _support(reward_half), value_bound


# Discounts the gym: fit chooses between: CartPole's 0.99 (a 100-step horizon) and the MuZero
# paper's 0.997 (about 333 steps). The shorter one is kept while its horizon spans at least
# a fifth of the episode step limit; longer or unlimited episodes get 0.997. On LunarLander-v3
# (1,000 steps) with 0.99 the landing bonus 200 steps ahead is worth 0.13 of itself and the
# agent hovers (WHY).
SHORT_DISCOUNT, LONG_DISCOUNT = 0.99, 0.997


def fitted_discount(max_episode_steps) -> float:
    """SHORT_DISCOUNT if its horizon 1 / (1 - discount) is at least a fifth of the step
    limit, else LONG_DISCOUNT (also for episodes without a limit)."""
    if max_episode_steps and 1.0 / (1.0 - SHORT_DISCOUNT) >= max_episode_steps / 5.0 - 1e-9:
        return SHORT_DISCOUNT
    return LONG_DISCOUNT


# The CartPole acting temperature falls from 1 to 0.25 by training step 6,000 (about 2 minutes
# here). Vector tasks with long episodes (those fitted_discount gives LONG_DISCOUNT) act at
# temperature 1 for the whole run: on LunarLander-v3 CartPole's schedule leaves it crashing or
# hovering (WHY).
_TEMPERATURE_FIELDS = ("temperature", "temperature_steps", "temperature_factors")

# They also train at a constant learning rate of LONG_LEARNING_RATE instead of CartPole's
# cosine decay (which suits a task solved in 2-4 minutes): LunarLander-v3 3 of 3 in each of
# two runs at 2e-3, 2 of 3 at 1e-3 or a longer cosine decay (WHY). The replay ratio stays 8:
# 16 makes 35-60 % more training steps but passes 1 of 3 seeds (WHY).
LONG_LEARNING_RATE = 2e-3
_LR_FIELDS = ("learning_rate", "lr_schedule", "lr_decay_steps", "lr_alpha")


def fit_run_defaults(settings: RunSettings, descriptor, changes: dict, probe=None) -> tuple:
    """Fits a ``gym:`` run's defaults to the env (``core.Builder.fit_to_env``); other envs
    are returned unchanged. ``settings`` are :func:`run_defaults`' (plus env options),
    ``changes`` the user's overrides still to be applied ({section: {field: value}}).

    - Image observations switch to the Atari settings (stacked frames, conv torso).
    - ``search.discount`` (the search's and the value targets') follows the episode step
      limit (:func:`fitted_discount`) unless the user sets it.
    - Vector tasks whose step limit gets LONG_DISCOUNT there (or that have none) act at
      temperature 1 for the whole run, unless the user sets a temperature field, and
      train at a constant learning rate of LONG_LEARNING_RATE, unless the user sets a
      learning-rate field (``training.learning_rate``, ``lr_schedule``, ``lr_decay_steps``
      or ``lr_alpha``).
    - Vector tasks whose env has a mirror (``envs.mirror_actions``: Gymnasium's CartPole)
      train with ``training.augment_symmetries``, as the built-in ``cartpole`` does.
    - ``network.value_support`` and ``network.reward_support`` are sized by
      :func:`fitted_supports` from the reward scale (the env's declared ``reward_range``
      when it has one, else the largest |reward| a random policy met, with the mean
      |reward| of its steps that did not end an episode as the typical reward, see
      :mod:`envs.probe`; ``probe`` overrides that probe for tests), the episode step
      limit and the discount (the user's if given).
    Fields the user sets are left alone. Returns (settings, notes): one line per derived
    default, saying where it came from.
    """
    if not settings.env.startswith("gym:") or settings.algo != "muzero" or descriptor.action_kind != "discrete":
        return settings, []   # continuous actions: the run loop refuses the env for MuZero with its reason
    notes = []
    if descriptor.kind == "image":
        settings = dataclasses.replace(_gym_image(), env=settings.env, env_options=settings.env_options)
        notes.append(f"image observations {tuple(descriptor.observation_shape)}: the Atari defaults "
                     "(stacked frames, residual conv torso with downsampling)")
    fixed = {f"{section}.{field}" for section, fields in changes.items() for field in fields}
    limit = descriptor.max_episode_steps
    episodes = f"episodes of {f'up to {limit}' if limit else 'unlimited'} steps"
    long_vector_task = descriptor.kind != "image" and fitted_discount(limit) == LONG_DISCOUNT
    sections = {}
    if "search.discount" in fixed:
        discount = changes["search"]["discount"]
    else:
        discount = fitted_discount(limit)
        sections = {"search": {"discount": discount}}
        why = (f"the {1 / (1 - SHORT_DISCOUNT):.0f}-step horizon of {SHORT_DISCOUNT:g} spans at least a fifth of "
               f"the {limit}-step episode limit") if discount == SHORT_DISCOUNT else \
            (f"{episodes}, longer than 5 x the "
             f"{1 / (1 - SHORT_DISCOUNT):.0f}-step horizon of {SHORT_DISCOUNT:g}")
        notes.append(f"search.discount = {discount:g}: {why}")
    search = settings.config.search
    if long_vector_task and search.temperature_steps and not any(f"search.{f}" in fixed for f in _TEMPERATURE_FIELDS):
        sections.setdefault("search", {}).update(temperature=1.0, temperature_steps=(), temperature_factors=(1.0,))
        notes.append(f"search.temperature = 1 for the whole run, not falling to {search.temperature_factors[-1]:g} "
                     f"by training step {search.temperature_steps[-1]:,} as for CartPole: {episodes} need "
                     "exploring for longer")
    training = settings.config.training
    if long_vector_task and training.lr_schedule == "cosine" \
            and not any(f"training.{f}" in fixed for f in _LR_FIELDS):
        sections.setdefault("training", {}).update(learning_rate=LONG_LEARNING_RATE, lr_schedule="constant")
        notes.append(f"training.learning_rate = {LONG_LEARNING_RATE:g}, constant, not CartPole's cosine decay from "
                     f"{training.learning_rate:g} over {training.lr_decay_steps:,} steps: {episodes} take longer "
                     "to learn than the decay to its floor allows")
    if descriptor.kind != "image" and "training.augment_symmetries" not in fixed \
            and envs.mirror_actions(settings.env) is not None:
        sections.setdefault("training", {})["augment_symmetries"] = True
        notes.append("training.augment_symmetries = true: the env has a mirror (negated observation, actions "
                     "permuted), so half of each batch trains mirrored, as for cartpole")
    wanted = [f for f in ("network.value_support", "network.reward_support") if f not in fixed]
    if not wanted:
        return replace_sections(settings, sections), notes
    typical = None
    if descriptor.reward_range is not None:
        scale = max(abs(float(v)) for v in descriptor.reward_range)
        source = f"the env's declared reward range {tuple(descriptor.reward_range)}"
    else:
        if probe is None:
            from envs.probe import probe_rewards
            seen = probe_rewards(settings.env, settings.env_options)
        else:
            seen = probe()
        scale = seen.max_abs_reward
        source = (f"the largest |reward| in {seen.env_steps} random-policy steps "
                  f"({seen.episodes} episodes, rewards {seen.min_reward:g}..{seen.max_reward:g})")
        if scale == 0.0:
            scale = 1.0
            source += "; every reward was 0, so 1 is assumed for every step"
        elif seen.typical_abs_reward is not None:
            typical = seen.typical_abs_reward
            source += f"; a step that did not end an episode paid {typical:.4g} in |reward| on average"
    value, reward, bound = fitted_supports(scale, discount, limit, typical)
    network = {}
    if "network.value_support" in wanted:
        network["value_support"] = value
        horizon = f"the discounted horizon of {limit or 'unlimited'} steps at discount {discount:g}"
        how = f"reward scale {scale:g} x {horizon}" if typical is None else \
            (f"typical |reward| {typical:.4g} x {horizon} ({discounted_horizon(discount, limit):.4g}), "
             f"plus {scale - min(typical, scale):.4g} for one step paying the reward scale {scale:g}")
        notes.append(f"network.value_support = [{value.low:g}, {value.high:g}] in h-space, {value.num_bins} bins: "
                     f"returns up to {bound:.4g} = {how}")
    if "network.reward_support" in wanted:
        network["reward_support"] = reward
        notes.append(f"network.reward_support = [{reward.low:g}, {reward.high:g}] in h-space, {reward.num_bins} "
                     f"bins: one step's reward up to {scale:g}, plus one unit")
    notes.append(f"reward scale {scale:g}: {source}")
    sections["network"] = network
    return replace_sections(settings, sections), notes
