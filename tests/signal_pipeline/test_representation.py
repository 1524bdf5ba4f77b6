"""Tests for signal_pipeline.representation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from faultfleet.types import FloatArray
from signal_pipeline.normalization import GlobalStandardizer
from signal_pipeline.representation import (
    REPRESENTATIONS,
    Representation,
    SpectralTransformer,
    output_length,
    represent,
)
from signal_pipeline.spectrum import envelope_spectrum, fft_magnitude

FS_HZ = 1000.0


def _tone(amplitude: float, bin_index: int, length: int = 100) -> FloatArray:
    """A cosine exactly on FFT bin ``bin_index`` of a window of ``length`` samples."""
    t = np.arange(length) / FS_HZ
    frequency_hz = bin_index * FS_HZ / length
    return (amplitude * np.cos(2 * np.pi * frequency_hz * t)).astype(np.float32)


def _modulated(length: int = 1000) -> FloatArray:
    """A 200 Hz carrier, amplitude-modulated at 10 Hz with depth 0.5."""
    t = np.arange(length) / FS_HZ
    carrier = np.cos(2 * np.pi * 200.0 * t)
    return ((1.0 + 0.5 * np.cos(2 * np.pi * 10.0 * t)) * carrier).astype(np.float32)


@parametrize_with_checks([SpectralTransformer(kind=kind) for kind in REPRESENTATIONS])  # type: ignore[untyped-decorator]
def test_sklearn_estimator_contract(estimator: BaseEstimator, check: Callable[[Any], None]) -> None:
    # Execute / Assert: scikit-learn's own suite of estimator checks
    check(estimator)


def test_raw_is_an_unchanged_copy() -> None:
    # Prepare
    windows = np.arange(12, dtype=np.float32).reshape(3, 4)

    # Execute
    out = represent(windows, "raw", FS_HZ)

    # Assert
    np.testing.assert_array_equal(out, windows)
    assert not np.shares_memory(out, windows)


def test_fft_shows_a_tone_at_its_bin_with_its_amplitude() -> None:
    # Prepare: amplitude 2 at bin 5 (50 Hz), amplitude 0.5 at bin 20 (200 Hz)
    windows = np.stack([_tone(2.0, 5), _tone(0.5, 20)])

    # Execute
    spectrum = represent(windows, "fft", FS_HZ)

    # Assert
    assert spectrum.shape == (2, 51)
    assert spectrum.dtype == np.float32
    np.testing.assert_allclose(spectrum[0, 5], 2.0, rtol=1e-5)
    np.testing.assert_allclose(spectrum[1, 20], 0.5, rtol=1e-5)
    np.testing.assert_array_equal(spectrum, fft_magnitude(windows))


def test_envelope_shows_the_modulation_frequency() -> None:
    # Prepare: 1000 samples at 1 kHz, so bin k is k Hz
    windows = _modulated()[np.newaxis, :]

    # Execute
    spectrum = represent(windows, "envelope", FS_HZ, band_hz=(150.0, 250.0))

    # Assert: the envelope 1 + 0.5 cos(2 pi 10 t) shows a 0.5 line at 10 Hz
    assert int(np.argmax(spectrum[0])) == 10
    np.testing.assert_allclose(spectrum[0, 10], 0.5, rtol=0.05)
    _, expected = envelope_spectrum(windows, FS_HZ, (150.0, 250.0))
    np.testing.assert_array_equal(spectrum, expected)


@pytest.mark.parametrize("kind", REPRESENTATIONS)
def test_three_d_input_is_represented_per_channel(kind: Representation) -> None:
    # Prepare: (2 windows, 3 channels, 64 samples)
    windows = np.random.default_rng(0).standard_normal((2, 3, 64)).astype(np.float32)

    # Execute
    out = represent(windows, kind, FS_HZ)

    # Assert
    assert out.shape == (2, 3, output_length(64, kind))
    np.testing.assert_allclose(out[1, 2], represent(windows[1, 2:3], kind, FS_HZ)[0], rtol=1e-6)


@pytest.mark.parametrize(
    ("kind", "fs_hz", "band_hz", "match"),
    [
        ("wavelet", FS_HZ, None, "kind must be one of 'raw', 'fft', 'envelope', got 'wavelet'"),
        ("fft", 0.0, None, "fs_hz must be a positive sampling rate in Hz, got 0.0"),
        ("fft", FS_HZ, (10.0, 20.0), r"band_hz=\(10\.0, 20\.0\) only applies to kind='envelope'"),
        ("envelope", FS_HZ, (10.0, 600.0), "band_hz must satisfy 0 < low < high < fs/2"),
    ],
)
def test_represent_rejects_bad_arguments(
    kind: Any, fs_hz: float, band_hz: tuple[float, float] | None, match: str
) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        represent(np.zeros((1, 64), dtype=np.float32), kind, fs_hz, band_hz)


def test_spectral_transformer_matches_represent_and_reports_frequencies() -> None:
    # Prepare
    windows = np.stack([_tone(1.0, 3), _tone(2.0, 7)])
    transformer = SpectralTransformer(kind="fft", fs_hz=FS_HZ)

    # Execute
    out = transformer.fit_transform(windows)

    # Assert
    np.testing.assert_array_equal(out, represent(windows, "fft", FS_HZ))
    assert transformer.frequencies_hz_ is not None
    np.testing.assert_allclose(transformer.frequencies_hz_, np.arange(51) * 10.0)
    assert transformer.window_length_ == 100


def test_spectral_transformer_params_and_clone() -> None:
    # Prepare
    transformer = SpectralTransformer(kind="envelope", fs_hz=FS_HZ, band_hz=(100.0, 300.0))

    # Execute
    copy = clone(transformer)

    # Assert
    assert copy.get_params() == {"kind": "envelope", "fs_hz": FS_HZ, "band_hz": (100.0, 300.0)}
    assert SpectralTransformer(kind="raw").fit(np.ones((1, 8))).frequencies_hz_ is None


def test_spectral_transformer_validates_in_fit_not_init() -> None:
    # Prepare: construction must not validate (scikit-learn's contract)
    transformer = SpectralTransformer(kind="wavelet")  # type: ignore[arg-type]

    # Execute / Assert
    with pytest.raises(ValueError, match="kind must be one of 'raw', 'fft', 'envelope'"):
        transformer.fit(np.ones((2, 8), dtype=np.float32))


def test_spectral_transformer_transform_before_fit_raises() -> None:
    # Execute / Assert
    with pytest.raises(NotFittedError, match="not fitted yet"):
        SpectralTransformer().transform(np.ones((2, 8), dtype=np.float32))


def test_spectral_transformer_rejects_other_window_length() -> None:
    # Prepare
    transformer = SpectralTransformer().fit(np.ones((2, 3, 8), dtype=np.float32))

    # Execute / Assert
    with pytest.raises(ValueError, match=r"windows of 16 samples, but .* fitted on windows of 8"):
        transformer.transform(np.ones((2, 3, 16), dtype=np.float32))


def test_pipeline_scales_test_spectra_with_train_statistics() -> None:
    # Prepare
    rng = np.random.default_rng(0)
    train = rng.standard_normal((20, 64)).astype(np.float32)
    test = 10.0 * rng.standard_normal((5, 64)).astype(np.float32)
    pipeline = make_pipeline(SpectralTransformer(fs_hz=FS_HZ), GlobalStandardizer())

    # Execute
    pipeline.fit(train)
    out = pipeline.transform(test)

    # Assert
    scaler = pipeline[-1]
    train_spectra = represent(train, "fft", FS_HZ)
    assert float(scaler.mean_) == pytest.approx(train_spectra.mean(dtype=np.float64), rel=1e-5)
    expected = (represent(test, "fft", FS_HZ) - scaler.mean_) / scaler.scale_
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
