"""Soft actor-critic (``--algo=sac``): twin critics, a learned temperature, uniform replay and
optional hindsight relabelling, for box and discrete action spaces, on the step-streaming path."""
