"""What every algorithm's networks are made of: TensorFlow building blocks (``layers``:
dense, conv, layer norm, MLP, residual blocks, a conv stem, variable copying and
averaging), the model-free torsos (``torsos``), optimisers and learning-rate schedules
(``optimizers``), the value transform h (``transforms``), and the choices a network config
may name with their checks (``options``, free of TensorFlow)."""
