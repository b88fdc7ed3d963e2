"""gRPC serving for the SEED shape: tensor codec, batching server, latent cache, client.

Modules: ``wire`` (tensor messages), ``config`` (ServerConfig, ClientConfig), ``server``
(BatchingServer), ``latent_cache`` (leases and the hidden-state cache),
``client`` (InferenceClient), ``testing``
(ToyModel). Services live with their algorithms (``muzero.algorithms.muzero.service``,
``muzero.algorithms.streaming``). The protocol is specified in docs/PROTOCOL.md.

Importing this package imports nothing; ``client`` and ``wire`` never import TensorFlow.
"""
