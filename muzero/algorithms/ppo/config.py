"""Settings of a PPO (actor-critic) run: ``PPOConfig`` and its sections.

``PPOConfig`` is made of two frozen sections, ``network`` and ``training``; the CLI's
``--set=training.clip_epsilon=0.1`` addresses a field of a section. The dataclass defaults
are CleanRL's classic-control PPO (4 epochs of 4 minibatches, lr 2.5e-4 annealed, clip 0.2,
lambda 0.95, discount 0.99, entropy 0.01, value 0.5, gradient norm 0.5); per-env defaults
(``builder.PPOBuilder.default_settings``) override them. The two-model layout, separate
optimisers, value-target scaling and Q-value baselines follow Trax's actor-critic trainer.
Validation happens in ``__post_init__``; a bad value raises
:class:`muzero.config.ConfigError` naming the field, the value and the accepted range.

Imports only the standard library and ``muzero.config``.
"""
from __future__ import annotations

import dataclasses

from muzero.config import SectionedConfig, check_bool, check_choice, check_float, check_int, fail_field
from muzero.network.options import check_optimizer, check_torso

SCHEDULES = ("constant", "linear")
Q_AGGREGATES = ("max", "mean")
# Layers of the Atari conv torso (8x8/4 32, 4x4/2 64, 3x3/1 64), counted by shared_layers.
ATARI_CONV_LAYERS = 3


@dataclasses.dataclass(frozen=True)
class PPONetworkConfig:
    """The policy model and the value model (``muzero.algorithms.ppo.networks``).

    Each model is a torso (its layers: for image envs the three Atari convolutions, then one
    dense layer per hidden size) and a linear output (policy logits [A], or one value). The
    first ``shared_layers`` torso layers are one set of weights used by both models.
    """

    # "auto": the Atari conv torso for image envs, an MLP for everything else
    # (observations flattened); "mlp" or "atari" force one.
    torso: str = "auto"
    # Dense hidden layer widths of the policy model (after the convolutions for "atari").
    policy_hidden_sizes: tuple[int, ...] = (64, 64)
    # Dense hidden layer widths of the value model (after the convolutions for "atari").
    value_hidden_sizes: tuple[int, ...] = (64, 64)
    # How many first torso layers the value model shares with the policy model (Trax's
    # n_shared_layers): 0 = two separate models; convolutions count first (3 for "atari").
    # Shared dense layers must have the same width in both models.
    shared_layers: int = 0
    # Nonlinearity after each dense hidden layer (the convolutions always use ReLU).
    activation: str = "tanh"
    # Initial weight scale of the policy-logits layer (Glorot uniform times this): small
    # values start from a near-uniform policy (PPO practice: 0.01).
    policy_init_scale: float = 0.01
    # Initial weight scale of the value output layer.
    value_init_scale: float = 1.0

    def __post_init__(self):
        check_torso(self, sizes=("policy_hidden_sizes", "value_hidden_sizes"), atari_dense_size=False)
        most = ATARI_CONV_LAYERS + min(len(self.policy_hidden_sizes), len(self.value_hidden_sizes))
        check_int(self, "shared_layers", 0, most)
        check_float(self, "policy_init_scale", 0.0, 100.0, lo_open=True)
        check_float(self, "value_init_scale", 0.0, 100.0, lo_open=True)


@dataclasses.dataclass(frozen=True)
class PPOTrainingConfig:
    """Unrolls, optimisers and the PPO loss (``muzero.algorithms.ppo.learning``).

    One *batch* is ``batch_size`` unrolls of ``unroll_length`` transitions (N = T * B). It is
    trained for ``epochs`` passes, each split into ``num_minibatches`` shuffled minibatches of
    N / num_minibatches transitions; one minibatch update is one training step. Per update:

      policy  = -mean(min(r * A, clip(r, 1 - eps, 1 + eps) * A)),  r = pi(a|x) / mu(a|x)
      value   = value_cost * 0.5 * mean((V(x) - scale * G)^2)        (scale: see scale_value_targets)
      entropy = -entropy_cost * mean(H(pi(.|x)))

    with A the GAE advantages and G = A + V_behaviour the value targets, both computed once
    per batch from the behaviour values stored in the unrolls.
    """

    # Agent steps per unroll, T; an unroll carries T + 1 observations and overlaps the next
    # one by one step.
    unroll_length: int = 128
    # Unrolls per batch, B (the learner's queue holds exactly one batch: on-policy).
    batch_size: int = 4
    # Passes over each batch.
    epochs: int = 4
    # Minibatches per pass; T * B must be a multiple of it.
    num_minibatches: int = 4
    # PPO's clipping range epsilon of the probability ratio.
    clip_epsilon: float = 0.2
    # "constant", or "linear": epsilon decays linearly to 0 at lr_decay_steps training steps.
    clip_schedule: str = "constant"
    # GAE lambda (0: one-step TD advantages, 1: Monte-Carlo returns minus the baseline).
    gae_lambda: float = 0.95
    # Discount per agent step.
    discount: float = 0.99
    # Weight of the entropy bonus.
    entropy_cost: float = 0.01
    # Weight of the value loss (matters where layers are shared: the value model's own
    # layers have their own optimiser, whose Adam steps barely depend on this factor).
    value_cost: float = 0.5
    # Adam step size of the policy model (and of the shared layers) at training step 0.
    policy_learning_rate: float = 2.5e-4
    # Adam step size of the value model's own layers at training step 0.
    value_learning_rate: float = 2.5e-4
    # "constant", or "linear": both learning rates decay linearly to 0 at lr_decay_steps
    # training steps and stay 0 after.
    lr_schedule: str = "linear"
    # Training steps (minibatch updates) over which "linear" schedules reach 0 (16,000: about
    # CleanRL's 500k env steps at the default 512 transitions and 16 updates per batch).
    lr_decay_steps: int = 16_000
    # Adam's epsilon (CleanRL and SB3: 1e-5).
    adam_epsilon: float = 1e-5
    # Global-norm clipping of each optimiser's gradients (policy, value); 0 = off.
    gradient_clip_norm: float = 0.5
    # Normalise advantages to zero mean and unit variance within each minibatch.
    normalize_advantages: bool = True
    # Predict values in units of (1 - discount) * return (Trax's scale_value_targets: the
    # value output times 1 / (1 - discount) is the value), so networks output numbers of
    # order one whatever the horizon. Behaviour values in unrolls stay in return units.
    scale_value_targets: bool = False
    # Rewards are clipped to [-max_abs_reward, max_abs_reward] before GAE; 0 = off.
    max_abs_reward: float = 0.0
    # Q-value baseline (Trax's q_value): the value model takes the action too (one-hot) and
    # is trained as Q(x, a); a state's baseline is aggregated over actions of the policy.
    q_value: bool = False
    # Actions sampled from the current policy per state for the Q-value baseline.
    q_value_n_samples: int = 4
    # "max" or "mean" of Q over the sampled actions (with q_value_all_actions: max over
    # every action, or the policy-weighted mean sum_a pi(a|x) Q(x, a)).
    q_value_aggregate: str = "mean"
    # Discrete actions: evaluate Q for every action instead of sampling.
    q_value_all_actions: bool = False

    def __post_init__(self):
        check_int(self, "unroll_length", 1, 10_000)
        check_int(self, "batch_size", 1, 65_536)
        check_int(self, "epochs", 1, 10_000)
        check_int(self, "num_minibatches", 1, 65_536)
        check_float(self, "clip_epsilon", 0.0, 10.0, lo_open=True)
        check_choice(self, "clip_schedule", SCHEDULES)
        check_float(self, "gae_lambda", 0.0, 1.0)
        check_float(self, "discount", 0.0, 1.0)
        check_float(self, "entropy_cost", 0.0)
        check_float(self, "value_cost", 0.0)
        check_optimizer(self, ("policy_learning_rate", "value_learning_rate"), schedules=SCHEDULES)
        check_bool(self, "normalize_advantages")
        check_bool(self, "scale_value_targets")
        if self.scale_value_targets and self.discount >= 1.0:
            fail_field(self, "scale_value_targets", True, "needs discount < 1 (the scale is 1 - discount)")
        check_float(self, "max_abs_reward", 0.0)
        check_bool(self, "q_value")
        check_int(self, "q_value_n_samples", 1, 1024)
        check_choice(self, "q_value_aggregate", Q_AGGREGATES)
        check_bool(self, "q_value_all_actions")
        transitions = self.unroll_length * self.batch_size
        if transitions % self.num_minibatches:
            fail_field(self, "num_minibatches", self.num_minibatches,
                  f"must divide unroll_length * batch_size = {transitions}")

    @property
    def updates_per_batch(self) -> int:
        """Training steps taken on one batch: epochs * num_minibatches."""
        return self.epochs * self.num_minibatches

    @property
    def minibatch_size(self) -> int:
        """Transitions per minibatch: unroll_length * batch_size / num_minibatches."""
        return self.unroll_length * self.batch_size // self.num_minibatches


@dataclasses.dataclass(frozen=True)
class PPOConfig(SectionedConfig):
    """Everything a PPO run needs beyond ``RunSettings``; saved in ``config.json``."""

    network: PPONetworkConfig = PPONetworkConfig()
    training: PPOTrainingConfig = PPOTrainingConfig()

    def __post_init__(self):
        self.coerce_sections()
