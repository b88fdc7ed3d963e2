"""MuZero's typed settings: targets, replay, network, training, pretraining, the latent-cache
service, and ``MuZeroConfig`` which gathers them with the search settings (``muzero.mcts.config``).

Defaults follow SEED RL's MuZero (its Atari settings; docs/ARCHITECTURE.md, "Where the defaults come
from") except where a comment says ``paper:``: there the MuZero paper (Schrittwieser et al. 2020,
Appendix) is followed instead, and the SEED value is named. A bad value raises ``ConfigError``
naming the field, the value and the accepted range.

This module imports only the standard library, ``muzero.config`` and ``muzero.mcts.config``.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from muzero.config import SectionedConfig, _fail, check_bool, check_choice, check_float, check_int
from muzero.config import check_float as _num
from muzero.config import check_int as _int
from muzero.mcts.config import SearchConfig


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    """How training targets are built from stored trajectories (``muzero.replay``). Their
    discount is the search's: ``search.discount``."""

    # config.json files that held a discount here load with it moved to the search.
    MOVED_FIELDS: ClassVar[dict] = {"discount": "search.discount"}

    # paper: K = 5. SEED's Atari setting is 10.
    num_unroll_steps: int = 5
    # n of the n-step value target; -1 bootstraps nothing (Monte-Carlo return).
    td_steps: int = 10
    # Off-policy correction (EfficientZero): a sampled position's n shrinks by one for
    # every this many env steps stored after it, down to 1, so that targets of data acted
    # by an old policy bootstrap sooner from the current value instead of summing more
    # of that policy's rewards: n_b = max(1, td_steps - floor(age_b / this)). 0: every
    # sample uses td_steps. EfficientZero uses 0.3 times the run's env steps. CartPole's
    # few_env_steps preset sets 250 (docs/PRESETS.md).
    td_shrink_every_steps: int = 0
    # Policy targets of recorded positions (--dataset) mixed toward the recorded action:
    # (1 - w) x the stored target (the search's, once reanalysed) + w x one-hot(recorded
    # action); keeps an offline run's search from drifting onto actions the data never
    # shows (--preset=offline sets 0.5). 0: the stored targets as they are.
    recorded_action_weight: float = 0.0
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
    # trained weights themselves. 100 makes the few_env_steps preset's snapshots worse on 3 of
    # 3 seeds (docs/RESULTS.md, "Negative results").
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
        check_int(self, "stack_frames", 1, 256)
        check_float(self, "recorded_action_weight", 0.0, 1.0)

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
    # Recorded episodes (a Minari dataset: an id in the Minari root or a folder; --dataset)
    # put into the replay when a run starts, beside what the actors push; with no training
    # actors (--preset=offline) the run trains on them alone. docs/PRETRAINING.md.
    dataset: str = ""
    # Share of each batch drawn (by priority) from the recorded episodes' positions while the
    # replay holds any; 0: they are drawn in proportion to their priority among all positions.
    dataset_fraction: float = 0.0

    def __post_init__(self):
        if not isinstance(self.dataset, str):
            _fail("ReplayConfig", "dataset", self.dataset, "must be a string (a Minari dataset id or folder)")
        check_float(self, "dataset_fraction", 0.0, 1.0)
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
    # torso) refuse it. Within the seeds' spread on CartPole's few_env_steps preset.
    mlp_residual_dynamics: bool = False
    # MLP torso and heads (vector observations): the hidden layers add a bias before their
    # LayerNorm. Without one the representation sees only the direction of the observation
    # vector, not its size (LayerNorm(W o) = LayerNorm(W c o) for c > 0): on CartPole states
    # near the track's edge looked like states halfway there, the values of the last 30
    # steps of episodes that ran off the track were flat at 16-20, and few_env_steps runs
    # stalled near 200 (docs/NETWORK.md). The built-in cartpole sets False (docs/RESULTS.md,
    # "Why the defaults are what they are"); so do runs made before this setting existed
    # (2026-12-04), to resume their checkpoints. Image and board networks (conv torsos,
    # bias-free head layers) are the same either way.
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
    # Projection / predictor heads of the self-supervised losses (muzero.algorithms.muzero.network.ssl;
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
    # (muzero/algorithms/muzero/augment.py).
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
    and the pretrain head (``muzero.algorithms.muzero.network.ssl``: projection, predictor) to map two
    augmented views of one replay observation close together (``muzero.algorithms.muzero.network.pretrain``).
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
        shares = self.targets.reanalyse_fraction + self.replay.dataset_fraction
        if shares > 1.0:
            _fail("MuZeroConfig", "replay.dataset_fraction", self.replay.dataset_fraction,
                  f"plus targets.reanalyse_fraction ({self.targets.reanalyse_fraction:g}) must be <= 1: "
                  f"both are shares of one batch")


@dataclasses.dataclass(frozen=True)
class CacheServiceConfig:
    """Settings of the latent-cache inference service (MuZero's ``MuZeroService``): how its
    two inference methods batch and how large its cache of hidden states is."""

    # Batching: a batch closes when it holds max_batch rows (leaves / envs) or when
    # max_wait_ms has passed since its first request arrived, whichever is first.
    initial_max_batch: int = 1024
    initial_max_wait_ms: float = 2.0
    recurrent_max_batch: int = 4096
    recurrent_max_wait_ms: float = 2.0
    # Also close a cache-mode batch as soon as it holds one request per live lease
    # (no further actor can be waiting to join it).
    close_when_all_leases_waiting: bool = True
    # Latent cache: slots (one per actor env) x nodes per slot (num_simulations + 1).
    cache_slots: int = 1024
    max_nodes: int = SearchConfig().num_nodes   # num_simulations + 1 of the default search
    # Leases of actors silent this long are reclaimed.
    lease_timeout_s: float = 300.0
    # A register naming an actor_id that holds a live lease ends that lease only when it
    # comes from the same run_id (the same run re-registering, e.g. after a server
    # restart) or when the old lease has been unused this long (a restarted actor's
    # predecessor is dead, so its lease is idle); otherwise it is answered UNAVAILABLE
    # (clients retry with back-off) and the live lease keeps working. Without this, any
    # process that can reach the server could end an active actor's lease.
    supersede_idle_s: float = 3.0
    # Most cache slots one lease may take, as a fraction of cache_slots (at least one
    # slot); register asks with a larger num_envs are refused (INVALID_ARGUMENT).
    # model_info and register report the resulting max_envs.
    max_lease_slots_fraction: float = 0.5
    # TensorFlow device of the latent cache (None: TensorFlow's default placement).
    device: Optional[str] = None

    def __post_init__(self):
        _int(self, "initial_max_batch", 1, 2**20)
        _num(self, "initial_max_wait_ms", 0.0, 60_000.0)
        _int(self, "recurrent_max_batch", 1, 2**20)
        _num(self, "recurrent_max_wait_ms", 0.0, 60_000.0)
        check_bool(self, "close_when_all_leases_waiting")
        _int(self, "cache_slots", 1, 2**24)
        _int(self, "max_nodes", 2, 1_000_001)
        _num(self, "lease_timeout_s", 0.0, 1e9, lo_open=True)
        _num(self, "supersede_idle_s", 0.0, 1e9)
        _num(self, "max_lease_slots_fraction", 0.0, 1.0, lo_open=True)
        if self.device is not None and (not isinstance(self.device, str) or not self.device):
            _fail("CacheServiceConfig", "device", self.device, "must be None or a device name such as '/GPU:0'")
