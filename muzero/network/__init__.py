"""TensorFlow building blocks every algorithm's networks are made of (``layers``): dense,
conv, layer norm, MLP, residual blocks, a conv stem, and variable copying and averaging."""
