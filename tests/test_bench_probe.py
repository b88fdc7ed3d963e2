"""The linear probe of bench/pretrain_finetune.py (balanced accuracy of a weighted ridge classifier)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from learn import reached  # noqa: E402
from pretrain_finetune import ridge_probe  # noqa: E402

# Training rows x = 0, 1, 2, 3 labelled F, F, T, T: the fitted line crosses zero at x = 1.5.
TRAIN_X = [0.0, 1.0, 2.0, 3.0]
TRAIN_Y = [False, False, True, True]


def probe(test_x, test_y):
    x = np.array(TRAIN_X + test_x)[:, None]
    y = np.array(TRAIN_Y + test_y)
    train = np.arange(len(x)) < len(TRAIN_X)
    return ridge_probe(x, y, train, l2=1e-6)


def test_separable_held_out_rows_score_one():
    assert probe([0.5, 1.2, 1.8, 2.9], [False, False, True, True]) == pytest.approx(1.0)


def test_inverted_held_out_labels_score_zero():
    assert probe([0.5, 2.5], [True, False]) == pytest.approx(0.0)


def test_balanced_accuracy_averages_the_two_classes():
    # Held out: x = 0, 0.5, 3 are negatives, x = 2.5 positive. Predictions (x > 1.5):
    # F, F, T, T -> positives 1/1 right, negatives 2/3 right -> (1 + 2/3) / 2.
    assert probe([0.0, 0.5, 3.0, 2.5], [False, False, False, True]) == pytest.approx((1 + 2 / 3) / 2)


def test_classes_weighted_equally():
    # Training: negatives at x = 0 (nine times) and -1, positives at 1 and 2. With each
    # class weighing 1/2 the weighted means are -0.1 and 1.5 and the line crosses zero at
    # their midpoint x = 0.7 (slope 0.8 / 0.81 about the weighted mean 0.7, where the
    # weighted mean label is 0). Unweighted least squares would cross at 0.875
    # (x-bar 1/6, y-bar -2/3, slope 5.33 / 5.67), calling the held-out positive at 0.8
    # negative.
    x = np.array([0.0] * 9 + [1.0, 2.0, -1.0, 0.8, 0.1])[:, None]
    y = np.array([False] * 9 + [True, True, False, True, False])
    train = np.arange(len(x)) < 12
    assert ridge_probe(x, y, train, l2=1e-6) == pytest.approx(1.0)


def test_one_class_is_refused():
    with pytest.raises(ValueError, match="held-out rows hold only one class"):
        probe([0.5, 2.5], [False, False])


def test_env_steps_to_reach_need_twenty_evaluation_episodes():
    # bench/learn.py's reached(), which pretrain_finetune's env_steps_ratio uses.
    recs = [{"time": 60.0, "return_eval": 12.0, "episodes_eval": 5, "env_steps": 100},
            {"time": 120.0, "return_eval": 9.0, "episodes_eval": 25, "env_steps": 200},
            {"time": 180.0, "return_eval": 11.0, "episodes_eval": 30, "env_steps": 300}]
    assert reached(recs, 10.0)[1] == 300.0
    assert reached(recs, 20.0)[1] == float("inf")


def test_scores_ahead_stops_at_the_episode_end():
    from pretrain_finetune import scores_ahead
    # One env, 6 steps: the step from position 3 scores; the step from position 1 ends
    # the episode (position 2 starts a new one). Horizon 3 covers positions t, t+1, t+2.
    scores = np.array([[0], [0], [0], [1], [0], [0]], bool)
    done = np.array([[0], [1], [0], [0], [0], [0]], bool)
    # Positions 0..3 have a full horizon. 0: steps 0-2, but the episode ends at step 1 -> no.
    # 1: its own step ends the episode -> no. 2: steps 2, 3 -> yes. 3: scores itself -> yes.
    assert scores_ahead(scores, done, 3)[:, 0].tolist() == [False, False, True, True]
    # Horizon 1 is the step's own score.
    assert scores_ahead(scores, done, 1)[:, 0].tolist() == [False, False, False, True, False, False]
    with pytest.raises(ValueError, match="no position with a full horizon"):
        scores_ahead(scores, done, 7)


def test_first_snapshot_is_the_earliest_export_at_the_threshold():
    # bench/learn.py --snapshot_every_s: (env steps, training step, mean return) per export,
    # by env steps; a later dip below the threshold does not matter.
    from learn import first_snapshot
    snapshots = [(250, 100, 23.0), (600, 420, 201.5), (900, 700, 150.0), (1300, 1100, 500.0)]
    assert first_snapshot(snapshots, 195.0) == 600.0
    assert first_snapshot(snapshots, 475.0) == 1300.0
    assert first_snapshot(snapshots, 501.0) == float("inf")
    assert first_snapshot([], 195.0) == float("inf")


def test_network_health_counts_live_units_and_gains():
    # bench/network_health.py's layer_report on one hidden layer of width 2 fed x = 1 and -1.
    # Dense w = [[1, -1]], b = 0 gives [x, -x]; LayerNorm of two values is (+1, -1) or
    # (-1, +1) whatever x (mean 0, unit variance; eps 1e-5 moves it by < 1e-5). Gains
    # (1, 0) and offsets (0, -0.5): unit 0 outputs +1 for x = 1 and -1 for x = -1 -> live;
    # unit 1 outputs -0.5 for every input -> dead. Live 1/2, active per state (1 + 0) / 4,
    # mean |gain| (1 + 0) / 2.
    import tensorflow as tf
    from network_health import layer_report
    from muzero.network.layers import MLP
    mlp = MLP(1, [2], 1, np.random.default_rng(0))
    mlp.hidden[0].w.assign([[1.0, -1.0]])
    mlp.hidden[0].b.assign([0.0, 0.0])
    mlp.norms[0].scale.assign([1.0, 0.0])
    mlp.norms[0].offset.assign([0.0, -0.5])
    [(gain, live, active)] = layer_report(mlp, tf.constant([[1.0], [-1.0]]))
    assert (gain, live, active) == (pytest.approx(0.5), pytest.approx(0.5), pytest.approx(0.25))
