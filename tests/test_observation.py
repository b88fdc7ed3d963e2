"""Frame stacking with action planes, checked on a hand-built example."""
import numpy as np
import pytest

from muzero.observation import action_plane_values, assemble_image_input, network_input_shape


def test_action_plane_values_by_hand():
    # A = 4: 255 * (a + 1) / 4 = 63.75, 127.5, 191.25, 255 -> 64, 128 (half to even), 191, 255;
    # no action (-1) -> 0.
    np.testing.assert_array_equal(action_plane_values(np.array([-1, 0, 1, 2, 3]), 4),
                                  [0, 64, 128, 191, 255])


def test_assemble_two_frames_two_channels():
    # One sample, T = 2 frames of 1x2 pixels with C = 2 channels.
    frames = np.zeros((1, 2, 1, 2, 2), np.uint8)
    frames[0, 0] = [[[1, 2], [3, 4]]]      # older frame
    frames[0, 1] = [[[5, 6], [7, 8]]]      # newer frame
    actions = np.array([[-1, 1]])          # no action before the first frame; action 1 led to the second
    out = assemble_image_input(frames, actions, num_actions=2)
    assert out.shape == (1, 1, 2, 2 * 2 + 2) and out.dtype == np.uint8
    # Pixel (0, 0): older frame's channels, newer frame's channels, then planes 0 and 255.
    np.testing.assert_array_equal(out[0, 0, 0], [1, 2, 5, 6, 0, 255])
    np.testing.assert_array_equal(out[0, 0, 1], [3, 4, 7, 8, 0, 255])


def test_shapes_and_errors():
    assert network_input_shape((96, 96, 1), True, 32) == (96, 96, 64)
    assert network_input_shape((4,), False, 1) == (4,)
    with pytest.raises(ValueError, match="stack_frames=4"):
        network_input_shape((4,), False, 4)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        assemble_image_input(np.zeros((1, 2, 1, 1, 1), np.uint8), np.zeros((1, 3)), 2)
