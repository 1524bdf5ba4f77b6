"""Read and write real vibration recordings, one file format per module.

:func:`read_recording` dispatches on the file suffix (case-insensitive):

========  ==========================================================  ================
suffix    format                                                      module
========  ==========================================================  ================
``.mat``  MATLAB v4 to v7, CWRU bearing data (``X097_DE_time``, ...)   :mod:`.cwru`
``.csv``  one sample per row, optional header and time column         :mod:`.tabular`
``.wav``  PCM or float WAV; rate from the header                      :mod:`.audio`
``.npy``  bare 1-D or (n_samples, n_channels) array                   :mod:`.arrays`
``.npz``  ``signal`` plus ``fs``/``rpm``/``label`` and metadata       :mod:`.arrays`
========  ==========================================================  ================

Every failure — missing, unreadable or corrupt file, wrong channel, unknown rate, NaN
samples — is a :class:`~signal_pipeline.recording.RecordingError` naming the file, the
problem and what to do. Nothing is silently cut, padded or resampled.

A manifest (:mod:`.manifest`) lists many recordings with their machine and label.
"""

from __future__ import annotations

from signal_pipeline.readers.dispatch import (
    SUPPORTED_SUFFIXES,
    WRITABLE_SUFFIXES,
    read_recording,
    write_recording,
)
from signal_pipeline.readers.manifest import ManifestEntry, load_manifest, read_manifest

__all__ = [
    "SUPPORTED_SUFFIXES",
    "WRITABLE_SUFFIXES",
    "ManifestEntry",
    "load_manifest",
    "read_manifest",
    "read_recording",
    "write_recording",
]
