"""Support codecs: h / h^-1, two-hot encoding, decoding (NumPy and TensorFlow twins)."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from muzero.algorithms.muzero.config import SupportConfig
from muzero.algorithms.muzero.network import support as S

ATARI = SupportConfig()  # 601 bins over h-space [-300, 300], eps 0.001
LINEAR5 = SupportConfig(low=-2.0, high=2.0, num_bins=5, use_transform=False)
FAST = settings(max_examples=60, deadline=None)


def test_h_known_values():
    # h(3) = (sqrt(4) - 1) + 0.001 * 3 = 1.003; h(-8) = -(sqrt(9) - 1) - 0.008 = -2.008.
    assert S.np_h_transform(3.0) == pytest.approx(1.003, abs=1e-12)
    assert S.np_h_transform(-8.0) == pytest.approx(-2.008, abs=1e-12)
    assert S.np_h_transform(0.0) == 0.0
    # Without the eps term: h(15) = sqrt(16) - 1 = 3, and h^-1(3) = (3 + 1)^2 - 1 = 15.
    assert S.np_h_transform(15.0, eps=0.0) == pytest.approx(3.0)
    assert S.np_h_inverse(3.0, eps=0.0) == pytest.approx(15.0)
    assert S.np_h_inverse(1.003) == pytest.approx(3.0, abs=1e-9)


def test_float32_h_and_its_inverse_keep_precision_near_zero():
    # Reference: the textbook formulas in float64 (errors ~1e-13 here). In float32 the textbook
    # inverse squares a number near 1 and subtracts 1, which is off by up to 8e-5 near 0 (a
    # decoded value of 0.01 read as 0.00992); the forms used must stay within float32 rounding.
    y = np.linspace(-0.05, 0.05, 101)
    root = (np.sqrt(1.0 + 4.0 * 0.001 * (np.abs(y) + 1.0 + 0.001)) - 1.0) / (2.0 * 0.001)
    textbook_inverse = np.sign(y) * (root ** 2 - 1.0)
    got = S.tf_h_inverse(tf.constant(y, tf.float32)).numpy().astype(np.float64)
    np.testing.assert_allclose(got, textbook_inverse, rtol=1e-6, atol=1e-9)
    x = np.array([1e-6, -3e-4, 0.02], np.float32)
    textbook_h = np.sign(x) * (np.sqrt(np.abs(x.astype(np.float64)) + 1.0) - 1.0) + 0.001 * x
    np.testing.assert_allclose(S.tf_h_transform(tf.constant(x)).numpy(), textbook_h, rtol=1e-6)
    np.testing.assert_allclose(S.tf_h_inverse(S.tf_h_transform(tf.constant(x))).numpy(), x, rtol=1e-5)


@FAST
@given(st.floats(-1e6, 1e6), st.sampled_from([0.001, 0.01, 0.0]))
def test_h_round_trip(x, eps):
    y = S.np_h_transform(x, eps)
    assert S.np_h_inverse(y, eps) == pytest.approx(x, rel=1e-9, abs=1e-7)


@FAST
@given(st.lists(st.floats(-5e4, 5e4), min_size=1, max_size=8))
def test_tf_h_matches_numpy(xs):
    x = np.asarray(xs, np.float32)
    np.testing.assert_allclose(S.tf_h_transform(tf.constant(x)).numpy(),
                               S.np_h_transform(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    y = S.np_h_transform(x.astype(np.float64))
    np.testing.assert_allclose(S.tf_h_inverse(tf.constant(y, tf.float32)).numpy(),
                               S.np_h_inverse(y), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("x, expected", [
    # bins at -2, -1, 0, 1, 2
    (0.5, [0, 0, 0.5, 0.5, 0]),
    (-1.25, [0.25, 0.75, 0, 0, 0]),  # 0.25 away from -1, 0.75 away from -2
    (2.0, [0, 0, 0, 0, 1]),
    (-2.0, [1, 0, 0, 0, 0]),
    (7.0, [0, 0, 0, 0, 1]),      # clipped to high
    (-3.5, [1, 0, 0, 0, 0]),     # clipped to low
    (1.0, [0, 0, 0, 1, 0]),
])
def test_two_hot_linear_by_hand(x, expected):
    np.testing.assert_allclose(S.np_scalar_to_two_hot(x, LINEAR5), expected, atol=1e-7)
    np.testing.assert_allclose(S.tf_scalar_to_two_hot(tf.constant(x), LINEAR5).numpy(),
                               expected, atol=1e-6)


def test_two_hot_atari_by_hand():
    # Bins are the integers -300..300 (index i holds i - 300).
    # x = 3: h = 1.003 -> 0.997 on bin 1 (index 301), 0.003 on bin 2 (index 302).
    # x = -8: h = -2.008 -> 0.008 on bin -3 (index 297), 0.992 on bin -2 (index 298).
    enc = S.np_scalar_to_two_hot(np.array([3.0, -8.0]), ATARI)
    assert enc.shape == (2, 601)
    assert enc[0, 301] == pytest.approx(0.997, abs=1e-6)
    assert enc[0, 302] == pytest.approx(0.003, abs=1e-6)
    assert enc[1, 297] == pytest.approx(0.008, abs=1e-6)
    assert enc[1, 298] == pytest.approx(0.992, abs=1e-6)
    assert np.count_nonzero(enc) == 4
    tf_enc = S.tf_scalar_to_two_hot(tf.constant([3.0, -8.0]), ATARI).numpy()
    np.testing.assert_allclose(tf_enc, enc, atol=1e-5)


H_MAX = float(S.np_h_inverse(300.0))  # 58705.58: the largest value the Atari support holds


@FAST
@given(st.floats(-H_MAX, H_MAX))
def test_decode_encode_atari(x):
    probs = S.np_scalar_to_two_hot(np.float64(x), ATARI).astype(np.float64)
    assert probs.sum() == pytest.approx(1.0, abs=1e-6)
    # float32 storage of the two weights limits the precision of large values.
    assert S.np_probs_to_scalar(probs, ATARI) == pytest.approx(x, rel=2e-4, abs=1e-3)


@FAST
@given(st.floats(-2.0, 2.0))
def test_decode_encode_linear(x):
    probs = S.np_scalar_to_two_hot(x, LINEAR5)
    assert S.np_probs_to_scalar(probs, LINEAR5) == pytest.approx(x, abs=1e-6)


def test_tf_decode_of_log_two_hot_matches():
    xs = np.array([-1000.0, -3.0, 0.0, 0.25, 42.0, 5000.0])
    probs = S.np_scalar_to_two_hot(xs, ATARI)
    with np.errstate(divide="ignore"):
        logits = np.log(probs)  # -inf outside the two bins: softmax gives the probs back
    np.testing.assert_allclose(S.tf_logits_to_scalar(tf.constant(logits), ATARI).numpy(), xs,
                               rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(S.np_logits_to_scalar(logits, ATARI), xs, rtol=1e-4, atol=1e-3)


def test_uniform_logits_decode_to_middle():
    # A uniform distribution over a symmetric support has expectation 0 in h-space.
    assert S.np_logits_to_scalar(np.zeros(601), ATARI) == pytest.approx(0.0, abs=1e-9)
    # Linear support [-2, 1] with 4 bins: the mean of -2, -1, 0, 1 is -0.5.
    sup = SupportConfig(low=-2.0, high=1.0, num_bins=4, use_transform=False)
    assert S.np_logits_to_scalar(np.zeros(4), sup) == pytest.approx(-0.5)


def test_wrong_bin_count_names_shapes():
    with pytest.raises(ValueError, match="num_bins=5.*\\(3, 4\\)"):
        S.np_probs_to_scalar(np.ones((3, 4)) / 4, LINEAR5)
