"""V-trace (IMPALA, Espeholt et al. 2018) as SEED RL's V-trace learner: ``--algo=vtrace``.

    config.py    VTraceConfig (sections network, training)
    networks.py  PolicyValueNetwork: shared torso (MLP or the Atari conv torso), logits + baseline
    learning.py  vtrace_targets, the loss, VTraceLearner, VTracePolicy (the streaming policy)
    builder.py   BUILDER: the muzero.core.Builder that makes the parts of a run

Importing this package imports no TensorFlow.
"""
