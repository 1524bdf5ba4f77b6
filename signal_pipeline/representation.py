"""Model inputs computed from vibration windows: raw samples, FFT or envelope spectrum.

The spectra come from :mod:`signal_pipeline.spectrum`; this module only chooses one by
name, so that a configuration string (or a scikit-learn grid search over
:class:`SpectralTransformer`'s ``kind``) selects the representation.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal, get_args

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from faultfleet.types import Float64Array, FloatArray
from signal_pipeline.spectrum import envelope_spectrum, fft_magnitude

Representation = Literal["raw", "fft", "envelope"]
"""``raw``: the samples; ``fft``: one-sided FFT magnitude; ``envelope``: envelope spectrum."""

REPRESENTATIONS: tuple[Representation, ...] = get_args(Representation)


def _check_parameters(kind: str, fs_hz: float, band_hz: tuple[float, float] | None) -> None:
    if kind not in REPRESENTATIONS:
        raise ValueError(
            f"kind must be one of {', '.join(map(repr, REPRESENTATIONS))}, got {kind!r}"
        )
    if isinstance(fs_hz, bool) or not isinstance(fs_hz, numbers.Real) or not 0 < fs_hz < math.inf:
        raise ValueError(f"fs_hz must be a positive sampling rate in Hz, got {fs_hz!r}")
    if band_hz is not None and kind != "envelope":
        raise ValueError(
            f"band_hz={band_hz!r} only applies to kind='envelope', got kind={kind!r}; "
            "pass band_hz=None or use kind='envelope'"
        )


def output_length(window_length: int, kind: Representation) -> int:
    """Length of one represented window.

    Parameters
    ----------
    window_length : int
        Samples per window.
    kind : Representation

    Returns
    -------
    int
        ``window_length`` for ``raw``; ``window_length // 2 + 1`` frequency bins otherwise.
    """
    return window_length if kind == "raw" else window_length // 2 + 1


def represent(
    windows: FloatArray,
    kind: Representation,
    fs_hz: float,
    band_hz: tuple[float, float] | None = None,
) -> FloatArray:
    """Turn windows into the chosen representation along their last axis.

    Parameters
    ----------
    windows : array of shape (..., window_length)
        For example (n_windows, window_length) or (n_windows, n_channels, window_length).
    kind : {"raw", "fft", "envelope"}
        ``raw`` returns a float32 copy; ``fft`` the one-sided amplitude spectrum
        (:func:`~signal_pipeline.spectrum.fft_magnitude`); ``envelope`` the envelope
        spectrum (:func:`~signal_pipeline.spectrum.envelope_spectrum`).
    fs_hz : float
        Sampling rate in Hz.
    band_hz : (low, high) in Hz, optional
        Demodulation band for ``envelope``; must be ``None`` for the other kinds.

    Returns
    -------
    array of shape (..., output_length(window_length, kind)), float32
        Bin ``k`` of a spectrum is at ``k * fs_hz / window_length`` Hz.

    Raises
    ------
    ValueError
        For an unknown ``kind`` (the message lists the allowed ones), a non-positive
        ``fs_hz``, ``band_hz`` with a kind other than ``envelope``, or 0-D input.
    """
    _check_parameters(kind, fs_hz, band_hz)
    data = np.asarray(windows, dtype=np.float32)
    if data.ndim == 0:
        raise ValueError("windows must have at least one axis (window_length,), got a scalar")
    if kind == "raw":
        return data.copy()
    flat = data.reshape(-1, data.shape[-1])
    if kind == "fft":
        spectrum = fft_magnitude(flat)
    else:
        _, spectrum = envelope_spectrum(flat, fs_hz, band_hz)
    return spectrum.reshape(*data.shape[:-1], spectrum.shape[-1])


class SpectralTransformer(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """scikit-learn transformer wrapping :func:`represent`.

    Parameters
    ----------
    kind : {"raw", "fft", "envelope"}, default "fft"
    fs_hz : float, default 12000.0
        Sampling rate in Hz (12 kHz is the CWRU drive-end rate).
    band_hz : (low, high) in Hz, optional
        Demodulation band for ``kind="envelope"``.

    Attributes
    ----------
    n_features_in_ : int
        ``X.shape[1]`` seen in ``fit``: the window length for 2-D input, the number of
        channels for 3-D input.
    window_length_ : int
        Samples per window seen in ``fit`` (the last axis of ``X``).
    frequencies_hz_ : array of shape (window_length // 2 + 1,), float64, or None
        Frequency of each output bin; ``None`` for ``kind="raw"``.
    """

    window_length_: int
    frequencies_hz_: Float64Array | None

    def __init__(
        self,
        *,
        kind: Representation = "fft",
        fs_hz: float = 12000.0,
        band_hz: tuple[float, float] | None = None,
    ) -> None:
        self.kind = kind
        self.fs_hz = fs_hz
        self.band_hz = band_hz

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags

    def fit(self, X: Any, y: Any = None) -> SpectralTransformer:
        """Validate parameters and ``X`` of shape (n_windows, [n_channels,] window_length)."""
        _check_parameters(self.kind, self.fs_hz, self.band_hz)
        windows: FloatArray = validate_data(self, X, allow_nd=True, dtype=np.float32)
        self.window_length_ = int(windows.shape[-1])
        self.frequencies_hz_ = (
            None
            if self.kind == "raw"
            else np.fft.rfftfreq(windows.shape[-1], d=1.0 / float(self.fs_hz)).astype(np.float64)
        )
        return self

    def transform(self, X: Any) -> FloatArray:
        """Represent each window; see :func:`represent` for the output shape."""
        check_is_fitted(self)
        windows: FloatArray = validate_data(self, X, reset=False, allow_nd=True, dtype=np.float32)
        if windows.shape[-1] != self.window_length_:
            raise ValueError(
                f"X has windows of {windows.shape[-1]} samples, but {type(self).__name__} "
                f"was fitted on windows of {self.window_length_}; refit or re-window"
            )
        return represent(windows, self.kind, self.fs_hz, self.band_hz)
