"""The MuZero network: representation, dynamics and prediction as one ``tf.Module``.

``make_network(descriptor, config, stack_frames, seed)`` picks a torso from the env
descriptor's ``kind``:

* ``vector`` -> MLP. Hidden state [L]; the action enters the dynamics as a one-hot
  vector [A] concatenated to the hidden state.
* ``image``  -> residual conv net. Input: stacked uint8 frames plus action planes
  (``muzero.observation``), divided by 255 inside. The MuZero paper's downsampling stack
  (conv stride 2, conv stride 2, residual blocks, average-pool stride 2, residual
  blocks, average-pool stride 2; the paper's blocks at H/2 are left out for CPU speed)
  shrinks 96x96 to 6x6; hidden state [6, 6, C].
  The action enters the dynamics as A broadcast one-hot planes.
* ``board``  -> the same residual net without downsampling (hidden [H, W, C]). The
  uint8 0/1 planes (stones and a ``to_play`` plane) are used as they are. When the
  number of actions equals the number of cells, the action enters the dynamics as one
  plane with a 1 on the played cell (action = row * W + col); otherwise as broadcast
  one-hot planes.

Hidden states are min-max normalised to [0, 1] per sample, after the representation
and after every dynamics step. Values are from the point of view of the player to move
in the state the value belongs to; rewards are from the point of view of the player
who made the move. Both are categorical over the supports in ``NetworkConfig``.

Variables are grouped by part -- ``representation``, ``dynamics``, ``prediction`` (and
``pretrain_head``, the projection + predictor of ``muzero.algorithms.muzero.network.ssl``, when the network
is built ``with_ssl_head``) -- so a run can train, freeze or restore each part
(``variables_by_part()``, or ``tf.train.Checkpoint(representation=net.representation)``).
The pretrain head is a training aid: inference never uses it and exports leave it out.

Layer skipping (``NetworkConfig.skip_fraction``, Trax's SkippingSerial): in training the
residual torso blocks of the representation and the dynamics (``conv_num_blocks`` each)
take one drawn ``n_forward`` (``draw_n_forward``); block i runs when i < n_forward and is
the identity otherwise. ``initial`` / ``recurrent`` take it as an optional scalar tensor;
without it (inference, evaluation, bootstrap values, exports) every block runs.

Imports TensorFlow, NumPy, ``muzero.config``, ``muzero.observation`` and ``envs.base``
only; never the search, replay or RPC code.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import tensorflow as tf

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import NETWORK_PARTS as PARTS
from muzero.algorithms.muzero.config import NetworkConfig
from muzero.config import ConfigError
from muzero.network import layers
from muzero.algorithms.muzero.network.ssl import SSLHead
from muzero.algorithms.muzero.network.support import tf_logits_to_scalar
from muzero.observation import network_input_shape

OUTPUT_KEYS = ("value", "reward", "policy_logits", "value_logits", "reward_logits",
               "hidden_state")


# ------------------------------------------------------------------ layer skipping

_SKIP_SALT = 0x5C1F


def skip_bounds(step: int, num_blocks: int, skip_fraction: float,
                warmup_steps: int) -> tuple:
    """(low, high) of the n_forward draw at training step ``step``.

    high = num_blocks / skip_fraction; low = warmup * num_blocks with warmup = 1 - step /
    warmup_steps (clipped to [0, 1]; 0 when warmup_steps is 0). Block i (0-based) is
    skipped when n_forward <= i, so after warm-up with probability i * skip_fraction /
    num_blocks.
    """
    if not 0.0 < skip_fraction <= 1.0:
        raise ValueError(f"skip_fraction={skip_fraction} must be in (0, 1] to draw n_forward")
    warmup = 0.0 if warmup_steps <= 0 else min(max(1.0 - step / warmup_steps, 0.0), 1.0)
    return warmup * num_blocks, num_blocks / skip_fraction


def draw_n_forward(seed: int, step: int, num_blocks: int, skip_fraction: float,
                   warmup_steps: int) -> float:
    """One n_forward ~ Uniform(low, high) (``skip_bounds``), a pure function of (seed, step):
    drawn on the host from a NumPy generator seeded with both, so every replica and every
    rerun of the step gets the same number."""
    low, high = skip_bounds(step, num_blocks, skip_fraction, warmup_steps)
    rng = np.random.default_rng([int(seed) % 2**32, int(step), _SKIP_SALT])
    return float(rng.uniform(low, high))


def _run_stem(stem: layers.ConvStem, x: tf.Tensor, n_forward) -> tf.Tensor:
    """``stem(x)`` where residual block i runs only when i < n_forward (a float scalar
    tensor) and is the identity otherwise; n_forward None runs every block."""
    if n_forward is None:
        return stem(x)
    x = stem.conv(x)
    if stem.input_scale != 1.0:
        x = x * stem.input_scale
    x = tf.nn.relu(stem.norm(x))
    for i, block in enumerate(stem.blocks):
        x = tf.cond(tf.less(float(i), n_forward), lambda b=block, v=x: b(v), lambda v=x: v)
    return x


# ------------------------------------------------------------------------ MLP torso

class MLPRepresentation(tf.Module):
    """observation [B, D] -> hidden [B, L] (normalised)."""

    def __init__(self, input_size: int, config: NetworkConfig, rng: np.random.Generator):
        super().__init__(name="representation")
        with self.name_scope:
            self.torso = layers.MLP(input_size, [config.mlp_hidden_size] * config.mlp_num_layers,
                                    config.latent_size, rng, hidden_bias=config.mlp_bias, name="torso")

    def __call__(self, observation: tf.Tensor) -> tf.Tensor:
        return layers.min_max_normalise(self.torso(tf.cast(observation, tf.float32)))


class MLPDynamics(tf.Module):
    """(hidden [B, L], action [B]) -> (next hidden [B, L] normalised, reward logits [B, R])."""

    def __init__(self, num_actions: int, config: NetworkConfig, rng: np.random.Generator):
        super().__init__(name="dynamics")
        self.num_actions = num_actions
        self.residual = config.mlp_residual_dynamics
        latent = config.latent_size
        with self.name_scope:
            self.torso = layers.MLP(latent + num_actions,
                                    [config.mlp_hidden_size] * config.mlp_num_layers, latent, rng,
                                    hidden_bias=config.mlp_bias, name="torso")
            self.reward_head = layers.MLP(latent, [config.head_hidden_size],
                                          config.reward_support.num_bins, rng, final_init_scale=0.01,
                                          hidden_bias=config.mlp_bias, name="reward_head")

    def torso_input(self, hidden: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
        """What the torso sees: the hidden state [B, L] and the action one-hot [B, A], joined."""
        return tf.concat([hidden, tf.one_hot(action, self.num_actions)], axis=-1)

    def __call__(self, hidden: tf.Tensor, action: tf.Tensor):
        change = self.torso(self.torso_input(hidden, action))
        next_hidden = layers.min_max_normalise(hidden + change if self.residual else change)
        return next_hidden, self.reward_head(next_hidden)


class MLPPrediction(tf.Module):
    """hidden [B, L] -> (policy logits [B, A], value logits [B, V])."""

    def __init__(self, num_actions: int, config: NetworkConfig, rng: np.random.Generator):
        super().__init__(name="prediction")
        latent, width = config.latent_size, config.head_hidden_size
        with self.name_scope:
            self.policy_head = layers.MLP(latent, [width], num_actions, rng, final_init_scale=0.01,
                                          hidden_bias=config.mlp_bias, name="policy_head")
            self.value_head = layers.MLP(latent, [width], config.value_support.num_bins, rng,
                                         final_init_scale=0.01, hidden_bias=config.mlp_bias,
                                         name="value_head")

    def __call__(self, hidden: tf.Tensor):
        return self.policy_head(hidden), self.value_head(hidden)


# ------------------------------------------------------------- residual conv torsos

class ConvRepresentation(tf.Module):
    """observation [B, H, W, C_in] -> hidden [B, h, w, C] (normalised).

    With ``downsample`` (image envs) h = ceil(H / 16); otherwise h = H.
    """

    def __init__(self, in_channels: int, config: NetworkConfig, rng: np.random.Generator,
                 downsample: bool, scale: float):
        super().__init__(name="representation")
        channels = config.conv_channels
        with self.name_scope:
            if downsample:
                half = max(channels // 2, 1)
                n = config.conv_downsample_blocks
                # The paper also has residual blocks at H/2; they are the costliest part on
                # a CPU, so the lite stack starts its blocks at H/4.
                self.down1 = layers.ConvStem(in_channels, half, 0, rng, stride=2,
                                             input_scale=scale, name="down1")
                self.down2 = layers.ConvStem(half, channels, n, rng, stride=2, name="down2")
                self.down3 = [layers.ResidualBlock(channels, rng, name=f"down3_{i}")
                              for i in range(n)]
                self.torso = layers.ConvStem(channels, channels, config.conv_num_blocks, rng,
                                             name="torso")
            else:
                self.down1 = None
                self.torso = layers.ConvStem(in_channels, channels, config.conv_num_blocks, rng,
                                             input_scale=scale, name="torso")

    def __call__(self, observation: tf.Tensor, n_forward=None) -> tf.Tensor:
        """n_forward: None (every torso block) or a float scalar (layer skipping)."""
        x = tf.cast(observation, tf.float32)                      # scaled after the first conv
        if self.down1 is not None:
            x = self.down2(self.down1(x))                          # [B, H/4, W/4, C]
            x = tf.nn.avg_pool2d(x, 3, 2, "SAME")                   # [B, H/8, W/8, C]
            for block in self.down3:
                x = block(x)
            x = tf.nn.avg_pool2d(x, 3, 2, "SAME")                   # [B, H/16, W/16, C]
        return layers.min_max_normalise(_run_stem(self.torso, x, n_forward))


class ConvDynamics(tf.Module):
    """(hidden [B, h, w, C], action [B]) -> (next hidden [B, h, w, C], reward logits [B, R])."""

    def __init__(self, hidden_shape: tuple, num_actions: int, config: NetworkConfig,
                 rng: np.random.Generator, cell_actions: bool):
        super().__init__(name="dynamics")
        h, w, channels = hidden_shape
        self.hidden_hw = (h, w)
        self.num_actions = num_actions
        self.cell_actions = cell_actions
        action_planes = 1 if cell_actions else num_actions
        reduced = config.conv_reduced_channels
        with self.name_scope:
            self.torso = layers.ConvStem(channels + action_planes, channels,
                                         config.conv_num_blocks, rng, name="torso")
            self.reward_reduce = layers.Conv2D(channels, reduced, 1, rng, name="reward_reduce")
            # The conv networks' heads keep their bias-free hidden layers (network.mlp_bias is
            # about the vector networks; these were not measured with biases).
            self.reward_head = layers.MLP(h * w * reduced, [config.head_hidden_size],
                                          config.reward_support.num_bins, rng, final_init_scale=0.01,
                                          hidden_bias=False, name="reward_head")

    def action_planes(self, action: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
        """action [B] int32 -> [B, h, w, 1] (cell actions) or [B, h, w, A] (broadcast one-hot)."""
        h, w = self.hidden_hw
        if self.cell_actions:
            return tf.reshape(tf.one_hot(action, h * w), [batch, h, w, 1])
        one_hot = tf.one_hot(action, self.num_actions)[:, None, None, :]
        return tf.tile(one_hot, [1, h, w, 1])

    def __call__(self, hidden: tf.Tensor, action: tf.Tensor, n_forward=None):
        """n_forward: None (every torso block) or a float scalar (layer skipping)."""
        batch = tf.shape(hidden)[0]
        x = tf.concat([hidden, self.action_planes(action, batch)], axis=-1)
        next_hidden = layers.min_max_normalise(_run_stem(self.torso, x, n_forward))
        reduced = tf.nn.relu(self.reward_reduce(next_hidden))
        return next_hidden, self.reward_head(tf.reshape(reduced, [batch, -1]))


class ConvPrediction(tf.Module):
    """hidden [B, h, w, C] -> (policy logits [B, A], value logits [B, V])."""

    def __init__(self, hidden_shape: tuple, num_actions: int, config: NetworkConfig,
                 rng: np.random.Generator):
        super().__init__(name="prediction")
        h, w, channels = hidden_shape
        reduced = config.conv_reduced_channels
        with self.name_scope:
            self.policy_reduce = layers.Conv2D(channels, reduced, 1, rng, name="policy_reduce")
            self.value_reduce = layers.Conv2D(channels, reduced, 1, rng, name="value_reduce")
            # Bias-free hidden layers, as the conv dynamics' reward head.
            self.policy_head = layers.MLP(h * w * reduced, [config.head_hidden_size], num_actions,
                                          rng, final_init_scale=0.01, hidden_bias=False, name="policy_head")
            self.value_head = layers.MLP(h * w * reduced, [config.head_hidden_size],
                                         config.value_support.num_bins, rng, final_init_scale=0.01,
                                         hidden_bias=False, name="value_head")

    def __call__(self, hidden: tf.Tensor):
        batch = tf.shape(hidden)[0]
        policy = tf.reshape(tf.nn.relu(self.policy_reduce(hidden)), [batch, -1])
        value = tf.reshape(tf.nn.relu(self.value_reduce(hidden)), [batch, -1])
        return self.policy_head(policy), self.value_head(value)


# --------------------------------------------------------------- input validation

class CheckedFunction:
    """A ``tf.function`` with an input signature, behind a readable argument check.

    TensorFlow silently casts some mismatched dtypes when binding to an input signature
    (a float image to uint8 would be truncated), and its shape errors are hard to read.
    Calling this object checks every argument's rank, fixed dimensions and dtype first
    (integer actions of any width are cast to the signature's dtype) and raises
    ``ValueError`` naming the expected and received shape or dtype; then it calls
    ``function``. ``function``, ``input_signature`` and ``get_concrete_function`` are the
    underlying ``tf.function``'s.
    """

    def __init__(self, function, names: tuple):
        self.function = function
        self.names = names
        self.input_signature = function.input_signature

    def get_concrete_function(self, *args, **kwargs):
        return self.function.get_concrete_function(*args, **kwargs)

    def __call__(self, *args):
        if len(args) != len(self.input_signature):
            raise TypeError(f"expected {len(self.input_signature)} arguments {self.names}, "
                            f"got {len(args)}")
        checked = []
        batch = None
        for name, spec, value in zip(self.names, self.input_signature, args):
            if not isinstance(value, (tf.Tensor, tf.Variable, np.ndarray)):
                value = np.asarray(value)
            dtype = tf.as_dtype(value.dtype)
            if dtype != spec.dtype:
                if dtype.is_integer and spec.dtype.is_integer:
                    value = tf.cast(value, spec.dtype)
                else:
                    raise ValueError(f"{name}: expected dtype {spec.dtype.name}, received "
                                     f"{dtype.name} (shape {_shape_text(value.shape)})")
            shape = tf.TensorShape(value.shape)
            if not shape.is_compatible_with(spec.shape):
                raise ValueError(f"{name}: expected shape {_shape_text(spec.shape)} "
                                 f"(batch first), received {_shape_text(shape)}")
            if shape.rank and shape[0] is not None:
                if batch is not None and shape[0] != batch:
                    raise ValueError(f"{name}: batch size {shape[0]} differs from the previous "
                                     f"argument's batch size {batch}")
                batch = shape[0]
            checked.append(value)
        return self.function(*checked)


def _shape_text(shape) -> str:
    dims = tf.TensorShape(shape).as_list()
    return "[" + ", ".join("None" if d is None else str(d) for d in dims) + "]"


# ------------------------------------------------------------------- the network

class MuZeroNetwork(tf.Module):
    """Representation, dynamics and prediction with batched inference functions.

    Attributes:
      input_shape: shape of one observation (no batch), e.g. (96, 96, 64).
      input_dtype: tf dtype of observations (uint8 for images and boards).
      num_actions: A.
      hidden_shape: shape of one hidden state (no batch), e.g. (64,) or (6, 6, 64).
      value_support, reward_support: ``SupportConfig`` of the categorical heads.
      initial_inference(observation [B, *input_shape]) -> dict of
        value [B], reward [B] (zeros), policy_logits [B, A], value_logits [B, V],
        reward_logits [B, R] (zeros: no reward precedes the root), hidden_state [B, *hidden_shape].
      recurrent_inference(hidden_state [B, *hidden_shape], action [B] int32) -> the same
        keys, reward being the reward for taking ``action``.
    """

    def __init__(self, kind: str, input_shape: tuple, input_dtype: tf.DType, num_actions: int,
                 hidden_shape: tuple, config: NetworkConfig, representation: tf.Module,
                 dynamics: tf.Module, prediction: tf.Module,
                 pretrain_head: Optional[tf.Module] = None):
        super().__init__(name="muzero_network")
        self.kind = kind
        self.input_shape = tuple(int(d) for d in input_shape)
        self.input_dtype = input_dtype
        self.num_actions = int(num_actions)
        self.hidden_shape = tuple(int(d) for d in hidden_shape)
        self.config = config
        self.value_support = config.value_support
        self.reward_support = config.reward_support
        self.representation = representation
        self.dynamics = dynamics
        self.prediction = prediction
        # muzero.algorithms.muzero.network.ssl.SSLHead (projection + predictor) or None; see make_network.
        self.pretrain_head: Optional[tf.Module] = pretrain_head
        # Residual torso blocks layer skipping acts on (in the representation and in the
        # dynamics); 0 for the MLP torso.
        self.skip_blocks = 0 if kind == "vector" else int(config.conv_num_blocks)
        self.observation_spec = tf.TensorSpec([None, *self.input_shape], input_dtype,
                                              name="observation")
        self.hidden_spec = tf.TensorSpec([None, *self.hidden_shape], tf.float32,
                                         name="hidden_state")
        self.action_spec = tf.TensorSpec([None], tf.int32, name="action")
        jit = bool(config.jit_compile)
        self._initial_fn = tf.function(self.initial, input_signature=[self.observation_spec],
                                       jit_compile=jit)
        self._recurrent_fn = tf.function(self.recurrent,
                                         input_signature=[self.hidden_spec, self.action_spec],
                                         jit_compile=jit)
        self.initial_inference = CheckedFunction(self._initial_fn, ("observation",))
        self.recurrent_inference = CheckedFunction(self._recurrent_fn, ("hidden_state", "action"))

    # Plain (un-wrapped) computations: the loss calls these inside its own tf.function.

    def initial(self, observation: tf.Tensor, n_forward=None) -> dict:
        """observation [B, *input_shape] -> output dict (see the class docstring).

        ``n_forward`` (training only): a float scalar tensor from ``draw_n_forward``; the
        representation's torso block i runs when i < n_forward. None runs every block.
        """
        hidden = self.encode(observation, n_forward)
        out = self._predict(hidden)
        batch = tf.shape(observation)[0]
        out["reward"] = tf.zeros([batch], tf.float32)
        out["reward_logits"] = tf.zeros([batch, self.reward_support.num_bins], tf.float32)
        return out

    def recurrent(self, hidden_state: tf.Tensor, action: tf.Tensor, n_forward=None) -> dict:
        """(hidden [B, *hidden_shape], action [B] int32) -> output dict; ``n_forward`` as in
        ``initial`` (the dynamics' torso blocks)."""
        next_hidden, reward_logits = self.transition(hidden_state, action, n_forward)
        out = self._predict(next_hidden)
        out["reward_logits"] = reward_logits
        out["reward"] = tf_logits_to_scalar(reward_logits, self.reward_support)
        return out

    def encode(self, observation: tf.Tensor, n_forward=None) -> tf.Tensor:
        """The representation alone: observation [B, *input_shape] -> hidden [B, *hidden_shape]."""
        return (self.representation(observation) if n_forward is None
                else self.representation(observation, n_forward))

    def transition(self, hidden_state: tf.Tensor, action: tf.Tensor, n_forward=None) -> tuple:
        """The dynamics alone: (hidden, action [B]) -> (next hidden, reward logits [B, R])."""
        return (self.dynamics(hidden_state, action) if n_forward is None
                else self.dynamics(hidden_state, action, n_forward))

    def _predict(self, hidden: tf.Tensor) -> dict:
        policy_logits, value_logits = self.prediction(hidden)
        return {
            "hidden_state": hidden,
            "policy_logits": policy_logits,
            "value_logits": value_logits,
            "value": tf_logits_to_scalar(value_logits, self.value_support),
        }

    def variables_by_part(self) -> dict:
        """Part name -> list of its tf.Variables (``pretrain_head`` only once it exists)."""
        parts = {name: list(getattr(self, name).trainable_variables) for name in PARTS}
        if self.pretrain_head is not None:
            parts["pretrain_head"] = list(self.pretrain_head.trainable_variables)
        return parts

    def variables_of(self, part_names) -> list:
        """The variables of the named parts, in part order; unknown names raise ValueError."""
        parts = self.variables_by_part()
        unknown = [p for p in part_names if p not in parts]
        if unknown:
            raise ValueError(f"unknown network part(s) {unknown}; known parts: {sorted(parts)}")
        return [v for p in part_names for v in parts[p]]

    def num_parameters(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.trainable_variables))


def _hidden_hw(h: int, w: int, downsample: bool) -> tuple:
    if not downsample:
        return h, w
    for _ in range(4):  # two stride-2 convolutions and two stride-2 average pools (SAME)
        h, w = math.ceil(h / 2), math.ceil(w / 2)
    return h, w


def make_network(descriptor: EnvDescriptor, config: NetworkConfig, stack_frames: int,
                 seed: int = 0, with_ssl_head: bool = False) -> MuZeroNetwork:
    """Builds the MuZero network for an env; weights are a pure function of ``seed``
    (``config.init_seed`` instead when it is >= 0).

    ``stack_frames`` is the number of frames per input for image envs (``TargetConfig``);
    vector and board envs must pass 1. ``with_ssl_head`` also builds ``pretrain_head``
    (``muzero.algorithms.muzero.network.ssl.SSLHead``: projection + predictor sized by ``NetworkConfig``),
    which the consistency loss and pretraining need; the other parts' weights are the
    same with or without it.
    """
    if descriptor.num_actions < 1:
        raise ValueError(f"descriptor.num_actions={descriptor.num_actions} must be >= 1")
    if config.init_seed >= 0:
        seed = config.init_seed
    rng = np.random.default_rng(seed)
    kind = descriptor.kind
    if config.mlp_residual_dynamics and kind != "vector":
        raise ConfigError("NetworkConfig.mlp_residual_dynamics=true is invalid for image and board envs: it "
                          "shapes the MLP torso of vector envs (the conv torso has its own residual "
                          "blocks); set it to false")
    if config.skip_fraction > 0 and kind == "vector":
        raise ConfigError(f"NetworkConfig.skip_fraction={config.skip_fraction} is invalid for vector envs: "
                          "layer skipping needs the residual conv torso (image and board envs); set it to 0")
    input_shape = network_input_shape(tuple(descriptor.observation_shape), kind == "image",
                                      stack_frames)
    num_actions = descriptor.num_actions
    if kind == "vector":
        if len(input_shape) != 1:
            raise ValueError(f"vector observations must be 1-D, got shape {input_shape}")
        input_dtype = tf.as_dtype(descriptor.observation_dtype)
        hidden_shape = (config.latent_size,)
        parts = (MLPRepresentation(input_shape[0], config, rng),
                 MLPDynamics(num_actions, config, rng),
                 MLPPrediction(num_actions, config, rng))
    elif kind in ("image", "board"):
        if len(input_shape) != 3:
            raise ValueError(f"{kind} observations must be (H, W, C), got shape {input_shape}")
        image = kind == "image"
        downsample = image and config.conv_downsample
        input_dtype = tf.uint8 if image else tf.as_dtype(descriptor.observation_dtype)
        h, w = _hidden_hw(input_shape[0], input_shape[1], downsample)
        hidden_shape = (h, w, config.conv_channels)
        cell_actions = (not image) and num_actions == h * w
        parts = (ConvRepresentation(input_shape[2], config, rng, downsample,
                                    scale=1.0 / 255.0 if image else 1.0),
                 ConvDynamics(hidden_shape, num_actions, config, rng, cell_actions),
                 ConvPrediction(hidden_shape, num_actions, config, rng))
    else:
        raise ValueError(f"descriptor.kind={kind!r} is not supported: "
                         f"expected one of ['vector', 'image', 'board']")
    head = SSLHead(hidden_shape, config, seed) if with_ssl_head else None
    return MuZeroNetwork(kind, input_shape, input_dtype, num_actions, hidden_shape, config,
                         *parts, pretrain_head=head)
