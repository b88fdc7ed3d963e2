"""MuZero (the default algorithm): search actors push trajectories; see builder.py."""
