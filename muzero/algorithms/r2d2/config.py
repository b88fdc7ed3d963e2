"""Settings of an R2D2 run: ``R2D2Config`` and its sections.

``R2D2Config`` is made of four frozen sections, ``network``, ``acting``, ``replay`` and
``training``; the CLI's ``--set=training.n_step=3`` addresses a field of a section. The
dataclass defaults are the R2D2 paper's Atari settings (Kapturowski et al. 2019, table 2)
as SEED RL implements them (``seed_rl/agents/r2d2/learner.py``, ``atari/r2d2_main.py``,
``atari/networks.py``); where SEED's flag defaults differ from the paper the comment names
both. Per-env defaults (``builder.R2D2Builder.default_settings``) override them.
Validation happens in ``__post_init__``; a bad value raises
:class:`muzero.config.ConfigError` naming the field, the value and the accepted range.

Imports only the standard library and ``muzero.config``.
"""
from __future__ import annotations

import dataclasses

from muzero.config import SectionedConfig, check_bool, check_float, check_int, fail_field
from muzero.network.options import check_optimizer, check_torso



@dataclasses.dataclass(frozen=True)
class R2D2NetworkConfig:
    """The recurrent dueling Q-network (``muzero.algorithms.r2d2.networks``).

      observation -> torso -> concat(torso output, one-hot previous action,
                                     previous reward clipped to [-1, 1]) -> LSTM
                  -> value head V [1] and advantage head Adv [A]
      Q = V + Adv - mean_a Adv                                   [A], in h-rescaled units

    The torso is V-trace's: an MLP for vector observations, SEED/IMPALA's shallow Atari conv
    torso (three convolutions and a dense layer) for image observations.
    """

    # "auto": the Atari conv torso for image envs, the MLP for everything else
    # (observations flattened); "mlp" or "atari" force one.
    torso: str = "auto"
    # Hidden layer widths of the MLP torso (at least one layer).
    mlp_hidden_sizes: tuple[int, ...] = (512,)
    # Nonlinearity after each hidden layer of the MLP torso and of the dueling heads.
    activation: str = "relu"
    # Width of the dense layer after the three convolutions of the Atari torso (SEED: 512).
    atari_dense_size: int = 512
    # Units of the LSTM (state parts h and c, each [lstm_size]). R2D2 / SEED: 512.
    lstm_size: int = 512
    # Hidden width of each dueling head (value and advantage: Dense -> activation -> linear);
    # 0 makes both heads linear. SEED: 512.
    head_hidden_size: int = 512
    # False: the "no memory" control. The LSTM state AND the previous action / reward inputs
    # are zero at every step, acting and training alike, so Q is a function of the current
    # observation only (a feed-forward Q-network with the same layers).
    use_memory: bool = True

    def __post_init__(self):
        check_torso(self)
        check_int(self, "lstm_size", 1, 65_536)
        check_int(self, "head_hidden_size", 0, 65_536)
        check_bool(self, "use_memory")


@dataclasses.dataclass(frozen=True)
class R2D2ActingConfig:
    """Epsilon-greedy exploration of the acting policy (Ape-X / R2D2 / SEED).

    Training env i of N (ids [0, N), N = num_actors * envs_per_actor) acts with

      epsilon_i = epsilon_base ** (1 + epsilon_alpha * i / (N - 1))      (N = 1: epsilon_base)

    (0.4 ** 1 = 0.4 down to 0.4 ** 8 ~ 0.00066 with the defaults); evaluation envs act with
    ``eval_epsilon``. A random action replaces the greedy one with that probability.
    """

    # Ape-X / R2D2 / SEED: 0.4.
    epsilon_base: float = 0.4
    # Ape-X / R2D2 / SEED: 7.
    epsilon_alpha: float = 7.0
    # Epsilon of evaluation envs. SEED: 1e-3.
    eval_epsilon: float = 1e-3

    def __post_init__(self):
        check_float(self, "epsilon_base", 0.0, 1.0)
        check_float(self, "epsilon_alpha", 0.0, 1000.0)
        check_float(self, "eval_epsilon", 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class R2D2ReplayConfig:
    """Prioritized sequence replay (``muzero.algorithms.item_replay.ItemReplay``).

    One item is one unroll of ``burn_in + unroll_length + 1`` steps with the recurrent state
    before its first step. An unroll enters with the priority of its n-step double-Q TD
    errors computed from the behaviour Q-values stored in it (R2D2's "realistic initial
    priorities"); after every training step the sampled sequences get the priority of their
    fresh TD errors. Priority of a sequence: eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t|.
    """

    # Sequences kept (the oldest are overwritten). R2D2 paper: 100,000; SEED's flag: 1,000.
    capacity: int = 1_000
    # Sequences stored before the first training step. SEED: 10.
    min_size: int = 10
    # Sequences sampled per sequence inserted (the replay ratio); the actors wait when the
    # learner is behind and the learner waits when it is ahead. 0 = no ratio (the learner
    # trains as fast as it can). SEED: 1.5 (batch_size / 1.5 sequences inserted per step).
    samples_per_insert: float = 1.5
    # alpha of P(i) ~ priority_i ** alpha. R2D2 / SEED: 0.9.
    priority_exponent: float = 0.9
    # beta of the importance weights (N * P(i)) ** -beta, normalised by the batch's largest.
    # R2D2 / SEED: 0.6.
    importance_sampling_exponent: float = 0.6
    # eta of the sequence priority mix. R2D2 / SEED: 0.9.
    priority_eta: float = 0.9

    def __post_init__(self):
        check_int(self, "capacity", 1, 100_000_000)
        check_int(self, "min_size", 1)
        if self.min_size > self.capacity:
            fail_field(self, "min_size", self.min_size, f"must be <= capacity = {self.capacity}")
        check_float(self, "samples_per_insert", 0.0, 1e6)
        check_float(self, "priority_exponent", 0.0, 10.0)
        check_float(self, "importance_sampling_exponent", 0.0, 10.0)
        check_float(self, "priority_eta", 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class R2D2TrainingConfig:
    """Sequences, targets and the optimiser (``muzero.algorithms.r2d2.learning``).

    Per training step: sample ``batch_size`` sequences; run the online and the target
    network over the first ``burn_in`` steps from the stored state (no gradient), then over
    the remaining ``unroll_length + 1`` steps; for each of the ``unroll_length`` trained
    transitions t (k = min(n_step, steps left in the sequence)):

      target_t = h( sum_{i<k} discount^i r_{t+i+1}
                    + discount^k h^-1(Q_target(x_{t+k}, argmax_a Q_online(x_{t+k}, a))) )

    cut at the first episode end inside the window (termination: nothing after it;
    truncation: discount^(i+1) * the stored bootstrap value instead). Loss:
    mean over sequences of w_b * 0.5 * sum_t (Q_online(x_t, a_t) - target_t)^2 (w: importance weights).
    """

    # Agent steps trained per sequence, T. R2D2 paper: 80 (sequence 80 with burn-in 40 as part
    # of it); SEED: 100 (+ burn-in, stored separately as here).
    unroll_length: int = 100
    # Steps at the start of each sequence only used to warm up the LSTM state; consecutive
    # sequences of an env overlap by burn_in + 1 steps. R2D2 / SEED: 40.
    burn_in: int = 40
    # Sequences per training step. R2D2 / SEED: 64.
    batch_size: int = 64
    # n of the n-step targets. R2D2 / SEED: 5.
    n_step: int = 5
    # Discount per agent step. R2D2 / SEED: 0.997.
    discount: float = 0.997
    # Adam step size. R2D2 paper: 1e-4 (SEED's Atari main: 4.8e-4).
    learning_rate: float = 1e-4
    # Adam's epsilon. R2D2 / SEED: 1e-3.
    adam_epsilon: float = 1e-3
    # Global-norm gradient clipping; 0 = off. SEED: 40.
    gradient_clip_norm: float = 40.0
    # The target network is a copy of the online one, refreshed every this many training
    # steps. R2D2 paper: 2,500 (SEED's flag: 400).
    target_update_period: int = 2_500
    # Value-function rescaling h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps * x (Pohlen et al. 2018):
    # Q-values are learnt in h units. R2D2 / SEED: on, eps 1e-3.
    value_rescaling: bool = True
    value_rescaling_epsilon: float = 1e-3
    # Rewards are clipped to [-max_abs_reward, max_abs_reward] in the targets; 0 = off
    # (R2D2 does not clip; the network input reward is always clipped to [-1, 1]).
    max_abs_reward: float = 0.0

    def __post_init__(self):
        check_int(self, "unroll_length", 1, 10_000)
        check_int(self, "burn_in", 0, 10_000)
        check_int(self, "batch_size", 1, 65_536)
        check_int(self, "n_step", 1, 1_000)
        if self.n_step > self.unroll_length:
            fail_field(self, "n_step", self.n_step,
                       f"must be <= unroll_length = {self.unroll_length} (the n-step window lies "
                       "inside the trained part of a sequence)")
        check_float(self, "discount", 0.0, 1.0)
        check_optimizer(self)
        check_int(self, "target_update_period", 1)
        check_bool(self, "value_rescaling")
        check_float(self, "value_rescaling_epsilon", 0.0, 1.0)
        check_float(self, "max_abs_reward", 0.0)

    @property
    def sequence_length(self) -> int:
        """Steps per stored sequence: burn_in + unroll_length + 1."""
        return self.burn_in + self.unroll_length + 1


@dataclasses.dataclass(frozen=True)
class R2D2Config(SectionedConfig):
    """Everything an R2D2 run needs beyond ``RunSettings``; saved in ``config.json``."""

    network: R2D2NetworkConfig = R2D2NetworkConfig()
    acting: R2D2ActingConfig = R2D2ActingConfig()
    replay: R2D2ReplayConfig = R2D2ReplayConfig()
    training: R2D2TrainingConfig = R2D2TrainingConfig()

    def __post_init__(self):
        self.coerce_sections()
