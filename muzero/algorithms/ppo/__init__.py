"""PPO (clipped-surrogate actor-critic) on step-streaming unrolls.

    config.py     PPOConfig: network and training sections
    networks.py   PPONetworks (policy model + value model, optional shared layers, Q-value
                  baselines) and PPOPolicy (the acting policy the streaming service calls)
    learning.py   GAE, the PPO losses and PPOLearner
    builder.py    BUILDER: per-env defaults and the run loop's wiring

Importing this package imports no TensorFlow (``networks`` and ``learning`` do).
"""
