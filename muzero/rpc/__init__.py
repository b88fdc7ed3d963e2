"""gRPC serving for the SEED shape: tensor codec, batching server, latent cache, client.

Modules: ``wire`` (tensor messages), ``config`` (ServerConfig, ClientConfig), ``server``
(BatchingServer), ``latent_cache`` (leases and the hidden-state cache),
``muzero_service`` (MuZeroService, serve), ``client`` (InferenceClient), ``testing``
(ToyModel). The protocol is specified in docs/PROTOCOL.md.

Importing this package imports nothing; ``client`` and ``wire`` never import TensorFlow.
"""
