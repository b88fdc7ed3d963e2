"""What a network config may choose from the network kit, and the checks of the fields
every model-free learner's config shares (the optimiser's and the torso's).

The names live here, apart from the TensorFlow modules that build them
(``muzero.network.torsos``, ``muzero.network.optimizers``), so that config modules stay
free of TensorFlow. Imports only ``muzero.config``.
"""
from __future__ import annotations

from muzero.config import check_choice, check_float, check_int, check_sizes

# Torsos of the model-free networks: "auto" takes the Atari conv stack for image
# observations and the MLP for everything else.
TORSOS = ("auto", "mlp", "atari")
# Nonlinearities after hidden layers.
ACTIVATIONS = ("relu", "tanh")
# Learning-rate schedules (``optimizers.learning_rate_schedule``): constant; linear decay
# to 0 at ``decay_steps``; cosine decay to ``alpha`` times the rate; cosine with restarts.
LR_SCHEDULES = ("constant", "linear", "cosine", "cosine_restarts")


def check_torso(config, sizes: tuple = ("mlp_hidden_sizes",), torso: bool = True,
                atari_dense_size: bool = True) -> None:
    """Checks a model-free network config's ``activation`` and hidden-size fields (``sizes``),
    and its ``torso`` and ``atari_dense_size`` where it has them."""
    if torso:
        check_choice(config, "torso", TORSOS)
    check_choice(config, "activation", ACTIVATIONS)
    for name in sizes:
        check_sizes(config, name)
    if atari_dense_size:
        check_int(config, "atari_dense_size", 1, 65_536)


def check_optimizer(config, learning_rates: tuple = ("learning_rate",), schedules: tuple = (),
                    adam_epsilon: bool = True) -> None:
    """Checks a training config's learning rates (each in (0, 10]), ``gradient_clip_norm``
    (>= 0, 0 is off), ``adam_epsilon`` (in (0, 1]) where it has one and, with ``schedules``
    (the names it accepts from LR_SCHEDULES), ``lr_schedule`` and ``lr_decay_steps`` (>= 1)."""
    for name in learning_rates:
        check_float(config, name, 0.0, 10.0, lo_open=True)
    if schedules:
        check_choice(config, "lr_schedule", schedules)
        check_int(config, "lr_decay_steps", 1)
    if adam_epsilon:
        check_float(config, "adam_epsilon", 0.0, 1.0, lo_open=True)
    check_float(config, "gradient_clip_norm", 0.0)
