"""Settings of a SAC run: ``SACConfig`` and its sections ``network`` and ``training``.

Defaults are Stable-Baselines3's SAC (Haarnoja et al. 2018 with the learned temperature):
two 256-unit ReLU layers for the actor and each critic, Adam 3e-4 for all three losses,
batch 256, discount 0.99, Polyak tau 0.005, a 1M-transition uniform replay, 100 transitions
before the first update and one update per env step. ``--set=training.discount=0.95``
addresses a field of a section; a bad value raises ``muzero.config.ConfigError`` naming it.

Imports only the standard library and ``muzero.config``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from muzero.config import SectionedConfig, check_choice, check_float, check_int, fail_field
from muzero.network.options import check_optimizer, check_torso

HER_STRATEGIES = ("future", "final")


@dataclasses.dataclass(frozen=True)
class SACNetworkConfig:
    """The actor and the twin critics (``muzero.algorithms.sac.networks``), MLPs over the flat
    observation. Continuous actions: the actor outputs the mean and log-std of a Gaussian whose
    sample goes through tanh and is scaled into the env's bounds; each critic takes the
    observation and the action (in [-1, 1] units) and outputs one Q. Discrete actions: the
    actor outputs logits [A] and each critic outputs Q [A]."""

    # Hidden layer widths of the actor (SB3: 256, 256).
    actor_hidden_sizes: tuple[int, ...] = (256, 256)
    # Hidden layer widths of each critic (SB3: 256, 256).
    critic_hidden_sizes: tuple[int, ...] = (256, 256)
    # Nonlinearity after each hidden layer.
    activation: str = "relu"
    # The Gaussian's log standard deviation is clipped into [log_std_min, log_std_max]
    # (SB3: -20, 2).
    log_std_min: float = -20.0
    log_std_max: float = 2.0

    def __post_init__(self):
        check_torso(self, sizes=("actor_hidden_sizes", "critic_hidden_sizes"), torso=False, atari_dense_size=False)
        check_float(self, "log_std_min", -100.0, 100.0)
        check_float(self, "log_std_max", -100.0, 100.0)
        if self.log_std_min >= self.log_std_max:
            fail_field(self, "log_std_min", self.log_std_min, f"must be < log_std_max={self.log_std_max}")


@dataclasses.dataclass(frozen=True)
class SACTrainingConfig:
    """Replay, the three losses and the optional hindsight relabelling
    (``muzero.algorithms.sac.learning``).

    Per update, on a batch of transitions (s, a, r, s', discount):
      y         = reward_scale * r + discount * (min_j Q'_j(s', a') - alpha * log pi(a'|s')),  a' ~ pi(s')
      critics   = 0.5 * mean((Q_1(s, a) - y)^2) + 0.5 * mean((Q_2(s, a) - y)^2)
      actor     = mean(alpha * log pi(a~|s) - min_j Q_j(s, a~)),  a~ ~ pi(s) reparametrised
      alpha     = log(alpha) * (entropy - target_entropy)   (alpha grows when entropy is low)
      targets   Q'_j <- (1 - tau) Q'_j + tau Q_j
    (discrete actions: expectations over the policy's probabilities instead of samples).
    """

    # Transitions per update (SB3: 256).
    batch_size: int = 256
    # Agent steps per streamed unroll: an env's transitions reach the replay in groups of
    # this many (smaller = fresher data, more calls into the learner).
    unroll_length: int = 4
    # Adam step sizes of the actor, the critics and the temperature (SB3: 3e-4 each).
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    alpha_learning_rate: float = 3e-4
    # Discount per agent step (SB3: 0.99).
    discount: float = 0.99
    # Polyak averaging of the target critics per update (SB3: 0.005).
    tau: float = 0.005
    # Temperature alpha at the start (SB3 "auto": 1.0).
    initial_alpha: float = 1.0
    # Entropy the temperature steers toward. None: -d for a d-dimensional box (Haarnoja
    # et al.), 0.98 * log(A) for A discrete actions (Christodoulou 2019).
    target_entropy: Optional[float] = None
    # Rewards are multiplied by this in the critic target.
    reward_scale: float = 1.0
    # Transitions kept in the uniform replay (SB3: 1e6).
    replay_capacity: int = 1_000_000
    # Transitions stored before the first update (SB3 learning_starts: 100).
    min_replay: int = 100
    # Updates per env step (training env steps; SB3 train_freq 1, gradient_steps 1: 1).
    # Kept both ways: the learner waits for data, and actors wait for the learner.
    replay_ratio: float = 1.0
    # Global-norm gradient clipping of each loss; 0 = off (SB3: off).
    gradient_clip_norm: float = 0.0
    # Hindsight experience replay (goal envs only): relabelled copies stored per transition;
    # 0 = off. Andrychowicz et al. 2017 / SB3: 4.
    her_relabels: int = 0
    # "future": goals achieved later in the same episode; "final": the episode's last one.
    her_strategy: str = "future"

    def __post_init__(self):
        check_int(self, "batch_size", 1, 65_536)
        check_int(self, "unroll_length", 1, 10_000)
        check_optimizer(self, ("actor_learning_rate", "critic_learning_rate", "alpha_learning_rate"),
                        adam_epsilon=False)
        check_float(self, "discount", 0.0, 1.0)
        check_float(self, "tau", 0.0, 1.0, lo_open=True)
        check_float(self, "initial_alpha", 0.0, 1e6, lo_open=True)
        if self.target_entropy is not None:
            check_float(self, "target_entropy", -1e6, 1e6)
        check_float(self, "reward_scale", 0.0, 1e6, lo_open=True)
        check_int(self, "replay_capacity", 1, 1 << 31)
        check_int(self, "min_replay", 1, self.replay_capacity if isinstance(self.replay_capacity, int) else None)
        check_float(self, "replay_ratio", 0.0, 1e4)
        check_int(self, "her_relabels", 0, 64)
        check_choice(self, "her_strategy", HER_STRATEGIES)


@dataclasses.dataclass(frozen=True)
class SACConfig(SectionedConfig):
    """Everything a SAC run needs beyond ``RunSettings``; saved in ``config.json``."""

    network: SACNetworkConfig = SACNetworkConfig()
    training: SACTrainingConfig = SACTrainingConfig()

    def __post_init__(self):
        self.coerce_sections()
