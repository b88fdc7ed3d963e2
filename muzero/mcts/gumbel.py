"""Gumbel MuZero's root schedule and root inputs (``SearchConfig.root_selection = "gumbel"``).

Sequential halving (Karnin et al. 2013, as Danihelka et al. 2022 use it and mctx's
``seq_halving.py`` computes it) splits the simulations among the considered root actions
in rounds: every considered action gets the same number of extra visits per round, then
the better half stays. The search never tracks rounds; at simulation s it only asks "how
many visits must the action I pick now have?", the entry ``table[m, s]`` for m considered
actions, and picks the best root action with exactly that many visits.

Imports NumPy only.
"""
from __future__ import annotations

import functools
import math

import numpy as np


def considered_visit_sequence(max_num_considered: int, num_simulations: int) -> list:
    """Visit count the root action chosen at simulation s must have, for s = 0 .. S-1.

    With m <= 1 considered actions it is 0, 1, 2, ... (one action takes every visit).
    Otherwise rounds of ``max(1, floor(S / (ceil(log2 m) * k)))`` passes over the k actions
    still considered (each pass visits each of them once), k starting at m and halving
    (never below 2) after each round, until S entries exist. E.g. m = 4, S = 8:
    0 0 0 0 | 1 1 2 2.
    """
    if max_num_considered <= 1:
        return list(range(num_simulations))
    log2max = int(math.ceil(math.log2(max_num_considered)))
    sequence: list = []
    visits = [0] * max_num_considered
    num_considered = max_num_considered
    while len(sequence) < num_simulations:
        passes = max(1, int(num_simulations / (log2max * num_considered)))
        for _ in range(passes):
            sequence.extend(visits[:num_considered])
            for i in range(num_considered):
                visits[i] += 1
        num_considered = max(2, num_considered // 2)
    return sequence[:num_simulations]


@functools.lru_cache(maxsize=64)
def considered_visit_table(max_num_considered: int, num_simulations: int) -> np.ndarray:
    """[max_num_considered + 1, S] int32: row m is :func:`considered_visit_sequence` (m, S),
    for trees where fewer than ``max_num_considered`` actions are legal. Read-only."""
    table = np.array([considered_visit_sequence(m, num_simulations) for m in range(max_num_considered + 1)],
                     np.int32)
    table.flags.writeable = False
    return table


def root_log_prior(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """log softmax over each row's legal actions, float64 [B, A]; -inf at illegal actions."""
    x = np.where(legal, logits.astype(np.float64), -np.inf)
    top = x.max(axis=1, keepdims=True)
    shifted = x - top
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
