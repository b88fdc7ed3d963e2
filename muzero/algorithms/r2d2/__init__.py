"""R2D2 (recurrent replay distributed DQN) on step-streaming unrolls.

    config.py     R2D2Config: network, acting, replay and training sections
    networks.py   R2D2Network: torso -> LSTM -> dueling Q head (with a no-memory switch)
    learning.py   value rescaling, n-step double-Q targets, priorities, R2D2Policy
                  (epsilon-greedy acting) and R2D2Learner (prioritized sequence replay)
    builder.py    BUILDER: per-env defaults and the run loop's wiring

Importing this package imports no TensorFlow (``networks`` and ``learning`` do).
"""
