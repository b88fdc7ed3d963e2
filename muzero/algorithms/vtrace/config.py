"""Settings of a V-trace (IMPALA) run: ``VTraceConfig`` and its sections.

``VTraceConfig`` is made of two frozen sections, ``network`` and ``training``; the CLI's
``--set=training.learning_rate=1e-3`` addresses a field of a section. Defaults follow
SEED RL's V-trace learner (``seed_rl/agents/vtrace/learner.py`` and its Atari/DMLab mains)
unless a comment says otherwise. Validation happens in ``__post_init__``; a bad value
raises :class:`muzero.config.ConfigError` naming the field, the value and the accepted range.

Imports only the standard library and ``muzero.config``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from muzero.config import SectionedConfig, check_float, check_int, fail_field
from muzero.network.options import check_optimizer, check_torso


@dataclasses.dataclass(frozen=True)
class VTraceNetworkConfig:
    """The policy + baseline network (``muzero.algorithms.vtrace.networks``).

    One shared torso feeds two linear heads: policy logits [A] and the baseline (state
    value). Vector observations go through an MLP; image observations (uint8 frames,
    divided by 255 in the network) through SEED/IMPALA's shallow Atari conv torso.
    """

    # "auto": the Atari conv torso for image envs, the MLP for everything else
    # (observations flattened); "mlp" or "atari" force one.
    torso: str = "auto"
    # Hidden layer widths of the MLP torso (at least one layer).
    mlp_hidden_sizes: tuple[int, ...] = (64, 64)
    # Nonlinearity after each hidden layer of the MLP torso.
    activation: str = "relu"
    # Width of the dense layer after the three convolutions of the Atari torso (SEED: 512).
    atari_dense_size: int = 512
    # Initial weight scale of the policy-logits head (Glorot uniform times this): small
    # values start with a near-uniform policy (PPO practice: 0.01).
    policy_init_scale: float = 0.01

    def __post_init__(self):
        check_torso(self)
        check_float(self, "policy_init_scale", 0.0, 100.0, lo_open=True)


@dataclasses.dataclass(frozen=True)
class VTraceTrainingConfig:
    """Optimiser, unrolls and the V-trace loss (``muzero.algorithms.vtrace.learning``).

    Loss per update, averaged over the T * B steps of a batch (SEED's):
      policy   = -mean(log pi(a_t|x_t) * pg_advantage_t)
      baseline = baseline_cost * 0.5 * mean((v_s - V(x_t))^2)
      entropy  = -entropy_cost * mean(H(pi(.|x_t)))
    """

    # Unrolls per update (each of unroll_length + 1 steps, from one env). SEED: 32.
    batch_size: int = 32
    # Agent steps per unroll, T; an unroll carries T + 1 observations and overlaps the
    # next one by one step. SEED: 100 (Atari/DMLab).
    unroll_length: int = 20
    # Adam's step size at training step 0. SEED DMLab: 4.8e-4.
    learning_rate: float = 5e-4
    # "constant", or "linear": decays linearly to 0 at lr_decay_steps training steps and
    # stays 0 after (SEED's PolynomialDecay to the final iteration).
    lr_schedule: str = "constant"
    # Training steps over which the "linear" schedule reaches 0 (unused when constant).
    lr_decay_steps: int = 100_000
    # Adam's first-moment decay (SEED: 0, i.e. RMSProp-like) and epsilon (SEED DMLab 3.125e-7).
    adam_beta1: float = 0.9
    adam_epsilon: float = 1e-7
    # Discount per agent step. SEED: 0.99.
    discount: float = 0.99
    # V-trace lambda (trace cutting c_t = lambda * min(1, pi/mu)). SEED: 1.
    lambda_: float = 1.0
    # Weight of the baseline (value) loss. SEED: 0.5 (times the 0.5 of the squared error).
    baseline_cost: float = 0.5
    # Weight of the entropy bonus; with target_entropy it is the initial value of the
    # adjusted coefficient (then it must be > 0). SEED: 2.5e-4.
    entropy_cost: float = 0.01
    # None: entropy_cost is fixed. A number (nats): the coefficient is learnt, as a
    # log-parameter times entropy_adjustment_speed, to push the mean policy entropy
    # toward this value (SEED's Lagrange-multiplier-style adjustment).
    target_entropy: Optional[float] = None
    # How fast the learnt entropy coefficient moves (SEED: 10).
    entropy_adjustment_speed: float = 10.0
    # Rewards are clipped to [-max_abs_reward, max_abs_reward] in the loss; 0 = off. SEED: 0.
    max_abs_reward: float = 0.0
    # Global-norm gradient clipping; 0 = off. SEED: off.
    gradient_clip_norm: float = 40.0
    # rho-bar: truncation of the importance weights in the value targets v_s. SEED: 1.
    clip_rho_threshold: float = 1.0
    # Truncation of the importance weights of the policy-gradient advantages. SEED: 1.
    clip_pg_rho_threshold: float = 1.0

    def __post_init__(self):
        check_int(self, "batch_size", 1, 65_536)
        check_int(self, "unroll_length", 1, 10_000)
        check_optimizer(self, schedules=("constant", "linear"))
        check_float(self, "adam_beta1", 0.0, 1.0, hi_open=True)
        check_float(self, "discount", 0.0, 1.0)
        check_float(self, "lambda_", 0.0, 1.0)
        check_float(self, "baseline_cost", 0.0)
        check_float(self, "entropy_cost", 0.0)
        if self.target_entropy is not None:
            check_float(self, "target_entropy", -1e6, 1e6)
            if self.entropy_cost <= 0:
                fail_field(self, "entropy_cost", self.entropy_cost,
                      "must be > 0 when target_entropy is set (it is the initial learnt coefficient)")
        check_float(self, "entropy_adjustment_speed", 0.0, 1e4, lo_open=True)
        check_float(self, "max_abs_reward", 0.0)
        check_float(self, "clip_rho_threshold", 0.0, lo_open=True)
        check_float(self, "clip_pg_rho_threshold", 0.0, lo_open=True)


@dataclasses.dataclass(frozen=True)
class VTraceConfig(SectionedConfig):
    """Everything a V-trace run needs beyond ``RunSettings``; saved in ``config.json``."""

    network: VTraceNetworkConfig = VTraceNetworkConfig()
    training: VTraceTrainingConfig = VTraceTrainingConfig()

    def __post_init__(self):
        self.coerce_sections()
