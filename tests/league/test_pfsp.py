from __future__ import annotations

import numpy as np
import pytest

from lightmarl.league import pfsp, remove_monotonic_suffix

RATES = [0.2, 0.5, 1.0]


@pytest.mark.parametrize(
    ("weighting", "expected"),
    [
        ("squared", [0.64 / 0.89, 0.25 / 0.89, 0.0]),
        ("variance", [0.16 / 0.41, 0.25 / 0.41, 0.0]),
        ("linear", [0.8 / 1.3, 0.5 / 1.3, 0.0]),
        ("linear_capped", [0.5, 0.5, 0.0]),
    ],
)
def test_pfsp_weights_match_hand_computed_values(weighting, expected):
    np.testing.assert_allclose(pfsp(RATES, weighting), expected, rtol=1e-12)


def test_pfsp_is_uniform_when_every_weight_is_zero():
    np.testing.assert_allclose(pfsp([1.0, 1.0, 1.0, 1.0], "squared"), [0.25] * 4)
    np.testing.assert_allclose(pfsp([0.0, 1.0], "variance"), [0.5, 0.5])


def test_pfsp_rejects_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        pfsp([], "squared")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pfsp([0.5, 1.5], "squared")
    with pytest.raises(ValueError, match="cubic"):
        pfsp([0.5], "cubic")


def test_remove_monotonic_suffix_keeps_snapshots_up_to_the_last_rise():
    rates, players = remove_monotonic_suffix([0.9, 0.5, 0.6, 0.4, 0.3], ["a", "b", "c", "d", "e"])
    assert rates == [0.9, 0.5, 0.6]
    assert players == ["a", "b", "c"]
    assert remove_monotonic_suffix([0.9, 0.8, 0.7], ["a", "b", "c"]) == ([], [])
    assert remove_monotonic_suffix([0.3], ["a"]) == ([], [])
