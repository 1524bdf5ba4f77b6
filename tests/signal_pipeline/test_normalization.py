"""Tests for signal_pipeline.normalization."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from signal_pipeline.normalization import GlobalStandardizer, PerWindowStandardizer

STANDARDIZERS = (PerWindowStandardizer, GlobalStandardizer)


@parametrize_with_checks([PerWindowStandardizer(), GlobalStandardizer()])  # type: ignore[untyped-decorator]
def test_sklearn_estimator_contract(estimator: BaseEstimator, check: Callable[[Any], None]) -> None:
    # Execute / Assert: scikit-learn's own suite of estimator checks
    check(estimator)


@pytest.mark.parametrize("standardizer", STANDARDIZERS)
def test_clone_and_get_params_round_trip(standardizer: type[BaseEstimator]) -> None:
    # Prepare
    estimator = standardizer(eps=1e-3)

    # Execute
    copy = clone(estimator)

    # Assert
    assert copy is not estimator
    assert copy.get_params() == {"eps": 1e-3}


@pytest.mark.parametrize("standardizer", STANDARDIZERS)
def test_fit_returns_self(standardizer: type[BaseEstimator]) -> None:
    # Prepare
    estimator = standardizer()

    # Execute / Assert
    assert estimator.fit(np.ones((2, 4), dtype=np.float32)) is estimator
    assert estimator.n_features_in_ == 4


@pytest.mark.parametrize("standardizer", STANDARDIZERS)
def test_transform_before_fit_raises(standardizer: type[BaseEstimator]) -> None:
    # Execute / Assert
    with pytest.raises(NotFittedError, match="not fitted yet"):
        standardizer().transform(np.ones((2, 4), dtype=np.float32))


@pytest.mark.parametrize("standardizer", STANDARDIZERS)
@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_fit_rejects_bad_eps(standardizer: type[BaseEstimator], eps: float) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=rf"eps must be a positive finite float, got {eps!r}"):
        standardizer(eps=eps).fit(np.ones((2, 4), dtype=np.float32))


@pytest.mark.parametrize("standardizer", STANDARDIZERS)
def test_rejects_non_finite_windows(standardizer: type[BaseEstimator]) -> None:
    # Prepare
    windows = np.array([[1.0, np.nan, 3.0]], dtype=np.float32)

    # Execute / Assert
    with pytest.raises(ValueError, match="Input X contains NaN"):
        standardizer().fit(windows)


@pytest.mark.parametrize("standardizer", STANDARDIZERS)
def test_input_is_not_modified_and_output_is_float32(standardizer: type[BaseEstimator]) -> None:
    # Prepare
    windows = np.array([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 4.0, 4.0]], dtype=np.float32)
    original = windows.copy()

    # Execute
    scaled = standardizer().fit_transform(windows)

    # Assert
    np.testing.assert_array_equal(windows, original)
    assert scaled.dtype == np.float32
    assert not np.shares_memory(scaled, windows)


def test_per_window_standardizer_hand_checked() -> None:
    # Prepare: row 0 has mean 2 and std 1; row 1 has mean 10 and std 2
    windows = np.array([[1.0, 3.0, 1.0, 3.0], [8.0, 12.0, 12.0, 8.0]], dtype=np.float32)

    # Execute
    scaled = PerWindowStandardizer().fit_transform(windows)

    # Assert
    np.testing.assert_allclose(scaled, [[-1, 1, -1, 1], [-1, 1, 1, -1]], atol=1e-6)


def test_per_window_standardizer_floors_std_for_constant_window() -> None:
    # Execute
    scaled = PerWindowStandardizer(eps=0.5).fit_transform(np.full((1, 5), 7.0, np.float32))

    # Assert
    np.testing.assert_array_equal(scaled, np.zeros((1, 5)))


def test_per_window_standardizer_three_d_scales_each_channel() -> None:
    # Prepare: (1 window, 2 channels, 4 samples)
    windows = np.array([[[1.0, 3.0, 1.0, 3.0], [0.0, 10.0, 0.0, 10.0]]], dtype=np.float32)

    # Execute
    scaled = PerWindowStandardizer().fit_transform(windows)

    # Assert
    np.testing.assert_allclose(scaled, [[[-1, 1, -1, 1], [-1, 1, -1, 1]]], atol=1e-6)


def test_global_standardizer_learns_scalar_statistics_hand_checked() -> None:
    # Prepare: all samples {0, 2, 4, 6} twice: mean 3, population std sqrt(5)
    train = np.array([[0.0, 2.0, 4.0, 6.0], [6.0, 4.0, 2.0, 0.0]], dtype=np.float32)

    # Execute
    scaler = GlobalStandardizer().fit(train)

    # Assert
    assert scaler.mean_.shape == ()
    assert float(scaler.mean_) == pytest.approx(3.0)
    assert float(scaler.scale_) == pytest.approx(np.sqrt(5.0))


def test_global_standardizer_transforms_test_with_train_statistics() -> None:
    # Prepare: train has mean 3 and std 1; test is far away
    train = np.array([[2.0, 4.0], [4.0, 2.0]], dtype=np.float32)
    test = np.array([[13.0, 23.0]], dtype=np.float32)
    scaler = GlobalStandardizer().fit(train)

    # Execute
    scaled = scaler.transform(test)

    # Assert: (13 - 3) / 1 and (23 - 3) / 1, not test's own mean 18 and std 5
    np.testing.assert_allclose(scaled, [[10.0, 20.0]])


def test_global_standardizer_three_d_has_per_channel_statistics() -> None:
    # Prepare: channel 0 holds {0, 2} (mean 1, std 1); channel 1 holds {10, 30} (mean 20, std 10)
    train = np.array([[[0.0, 2.0], [10.0, 30.0]], [[2.0, 0.0], [30.0, 10.0]]], dtype=np.float32)
    scaler = GlobalStandardizer().fit(train)

    # Execute
    scaled = scaler.transform(np.array([[[1.0, 3.0], [20.0, 40.0]]], dtype=np.float32))

    # Assert
    np.testing.assert_allclose(scaler.mean_, [1.0, 20.0])
    np.testing.assert_allclose(scaler.scale_, [1.0, 10.0])
    np.testing.assert_allclose(scaled, [[[0.0, 2.0], [0.0, 2.0]]])


def test_global_standardizer_rejects_other_dimensionality_than_fitted() -> None:
    # Prepare
    scaler = GlobalStandardizer().fit(np.ones((3, 2, 8), dtype=np.float32))

    # Execute / Assert
    with pytest.raises(
        ValueError, match="X has 2 dimensions but GlobalStandardizer was fitted on 3-D"
    ):
        scaler.transform(np.ones((3, 2), dtype=np.float32))


def test_global_standardizer_rejects_other_channel_count() -> None:
    # Prepare
    scaler = GlobalStandardizer().fit(np.ones((3, 2, 8), dtype=np.float32))

    # Execute / Assert
    with pytest.raises(ValueError, match="X has 3 features, but GlobalStandardizer is expecting 2"):
        scaler.transform(np.ones((3, 3, 8), dtype=np.float32))


@pytest.mark.parametrize("standardizer", STANDARDIZERS)
def test_rejects_one_dimensional_input(standardizer: type[BaseEstimator]) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        standardizer().fit(np.ones(8, dtype=np.float32))
