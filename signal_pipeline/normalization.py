"""Amplitude normalisation of vibration windows, as scikit-learn transformers.

Two choices, with different leakage behaviour:

* :class:`PerWindowStandardizer` scales each window by its own mean and standard
  deviation. It learns nothing, so it cannot leak, but it discards absolute amplitude,
  which carries fault severity.
* :class:`GlobalStandardizer` learns one mean and one scale from the *training* windows
  and applies them everywhere; fit it on the train split only, so validation and test
  windows are scaled with statistics they did not contribute to.

Both follow scikit-learn's estimator contract (``__init__`` stores keyword parameters,
``fit`` validates and returns ``self``, learned attributes end in ``_``), accept windows of
shape (n_windows, window_length) or (n_windows, n_channels, window_length), return new
float32 arrays and never modify their input.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from faultfleet.types import Float64Array, FloatArray


def _check_eps(eps: float) -> None:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < math.inf:
        raise ValueError(f"eps must be a positive finite float, got {eps!r}; pass e.g. 1e-8")


def _validate_windows(estimator: BaseEstimator, X: Any, *, reset: bool) -> FloatArray:
    """Check windows with scikit-learn's validation, as float32 of 2 or 3 dimensions."""
    windows: FloatArray = validate_data(estimator, X, reset=reset, allow_nd=True, dtype=np.float32)
    if windows.ndim not in (2, 3):
        raise ValueError(
            f"X must have shape (n_windows, window_length) or "
            f"(n_windows, n_channels, window_length), got shape {windows.shape}"
        )
    return windows


class _WindowTransformer(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """Tags shared by the transformers in this module: 3-D input, float32 output."""

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags


class PerWindowStandardizer(_WindowTransformer):
    """Scale every window (every channel of every window) to zero mean and unit std.

    Parameters
    ----------
    eps : float, default 1e-8
        Floor on the standard deviation, in the signal's unit, so a constant window maps
        to zeros instead of dividing by zero.

    Attributes
    ----------
    n_features_in_ : int
        ``X.shape[1]`` seen in ``fit``: the window length for 2-D input, the number of
        channels for 3-D input.

    Notes
    -----
    Stateless: ``fit`` only validates ``X`` and ``eps``. It still has to be called
    (scikit-learn's contract), which ``fit_transform`` or a Pipeline does.
    """

    def __init__(self, *, eps: float = 1e-8) -> None:
        self.eps = eps

    def fit(self, X: Any, y: Any = None) -> PerWindowStandardizer:
        """Validate ``X`` of shape (n_windows, [n_channels,] window_length); return self."""
        _check_eps(self.eps)
        _validate_windows(self, X, reset=True)
        return self

    def transform(self, X: Any) -> FloatArray:
        """Standardise each window along its last axis.

        Parameters
        ----------
        X : array of shape (n_windows, window_length) or (n_windows, n_channels, window_length)

        Returns
        -------
        array of the same shape, float32
        """
        check_is_fitted(self)
        windows = _validate_windows(self, X, reset=False)
        mean = windows.mean(axis=-1, keepdims=True, dtype=np.float64)
        std = np.maximum(windows.std(axis=-1, keepdims=True, dtype=np.float64), self.eps)
        scaled: FloatArray = (windows - mean.astype(np.float32)) / std.astype(np.float32)
        return scaled


class GlobalStandardizer(_WindowTransformer):
    """Standardise with one mean and scale learned from the training windows.

    The statistics pool every sample of every training window (per channel for 3-D
    input). A vibration signal is stationary over a recording: a sample's distribution
    does not depend on where in the window it falls, because window starts are arbitrary.
    A per-position scaler (scikit-learn's ``StandardScaler`` on (n, L) data) would fit
    ``window_length`` near-identical noisy estimates and imprint that noise on every
    window; one pooled estimate per channel is both correct and far more precise.

    Parameters
    ----------
    eps : float, default 1e-8
        Floor on the learned scale, in the signal's unit.

    Attributes
    ----------
    mean_ : array of shape () or (n_channels,), float64
        Mean over all training samples; shape () for 2-D input, (n_channels,) for 3-D.
    scale_ : array of shape () or (n_channels,), float64
        Standard deviation over all training samples, floored at ``eps``.
    n_features_in_ : int
        ``X.shape[1]`` seen in ``fit``: the window length for 2-D input, the number of
        channels for 3-D input.
    """

    mean_: Float64Array
    scale_: Float64Array

    def __init__(self, *, eps: float = 1e-8) -> None:
        self.eps = eps

    def fit(self, X: Any, y: Any = None) -> GlobalStandardizer:
        """Learn ``mean_`` and ``scale_`` from training windows.

        Parameters
        ----------
        X : array of shape (n_windows, window_length) or (n_windows, n_channels, window_length)
            Training windows only; fitting on validation or test windows leaks them.
        y : ignored

        Returns
        -------
        self
        """
        _check_eps(self.eps)
        windows = _validate_windows(self, X, reset=True)
        axes = (0, 1) if windows.ndim == 2 else (0, 2)
        self.mean_ = np.asarray(windows.mean(axis=axes, dtype=np.float64))
        std = np.asarray(windows.std(axis=axes, dtype=np.float64))
        self.scale_ = np.maximum(std, self.eps)
        return self

    def transform(self, X: Any) -> FloatArray:
        """Apply the training statistics.

        Parameters
        ----------
        X : array with the dimensionality and ``X.shape[1]`` seen in ``fit``

        Returns
        -------
        array of the same shape, float32
            ``(X - mean_) / scale_``, per channel for 3-D input.
        """
        check_is_fitted(self)
        windows = _validate_windows(self, X, reset=False)
        expected_ndim = self.mean_.ndim + 2
        if windows.ndim != expected_ndim:
            raise ValueError(
                f"X has {windows.ndim} dimensions but {type(self).__name__} was fitted on "
                f"{expected_ndim}-D windows; transform windows shaped like the training ones"
            )
        mean = self.mean_.astype(np.float32)[..., np.newaxis]
        scale = self.scale_.astype(np.float32)[..., np.newaxis]
        scaled: FloatArray = (windows - mean) / scale
        return scaled
