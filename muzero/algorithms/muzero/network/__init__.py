"""TensorFlow MuZero networks, value/reward support codecs, the K-step loss and export.

Public API: ``make_network``, ``MuZeroNetwork``, ``compute_loss``, ``make_train_step``,
``export_saved_model`` and the support codecs in ``muzero.algorithms.muzero.network.support``.
See docs/NETWORK.md.
"""
from muzero.algorithms.muzero.network.export import export_saved_model
from muzero.algorithms.muzero.network.loss import compute_loss, make_train_step
from muzero.algorithms.muzero.network.networks import MuZeroNetwork, make_network

__all__ = ["make_network", "MuZeroNetwork", "compute_loss", "make_train_step",
           "export_saved_model"]
