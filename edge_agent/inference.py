"""Live diagnosis with ONNX Runtime: verified loading, hot swap, and a store that survives restarts.

The coordinator publishes each cluster's model as ONNX bytes with their SHA-256 digest (see
:mod:`coordinator.adapters.onnx_export`). :class:`OnnxDiagnoser` checks the digest, builds an ONNX
Runtime session, checks the graph's input and outputs and runs one warm-up window before the
new model replaces the active one, so a bad payload never interrupts diagnosis.
:class:`ModelStore` keeps the active model on disk so that a restarted agent diagnoses at once,
before the broker delivers the retained model again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from faultfleet.errors import FaultfleetError, UsageError
from faultfleet.files import atomic_write
from faultfleet.types import FloatArray, IntArray

logger = logging.getLogger(__name__)

INPUT_NAME = "window"
PROBABILITIES_OUTPUT = "probabilities"
_CPU = "CPUExecutionProvider"
_CUDA = "CUDAExecutionProvider"
_METADATA_TYPES: dict[str, type] = {
    "version": int,
    "cluster_id": str,
    "sha256": str,
    "input_shape": list,
    "n_classes": int,
    "class_names": list,
}
_OPTIONAL_METADATA = frozenset({"class_names"})
"""Keys a ``model.json`` written before they existed may lack."""

_Session = Any
"""An ``onnxruntime.InferenceSession``; onnxruntime ships no type information."""


class ModelIntegrityError(FaultfleetError, ValueError):
    """A model payload or stored model is unusable: wrong digest, unloadable ONNX, wrong shape."""


class NoModelError(FaultfleetError, RuntimeError):
    """A prediction was asked for before any model was loaded."""


@dataclass(frozen=True)
class LoadedModel:
    """Metadata of a model an :class:`OnnxDiagnoser` runs.

    Attributes
    ----------
    version : int
        Model version the coordinator announced (≥ 0).
    cluster_id : str
        Cluster whose model this is.
    sha256 : str
        Hex SHA-256 digest of the ONNX bytes, lower case.
    input_shape : tuple[int, ...]
        Shape of one window without the batch dimension, e.g. (1, 1024).
    n_classes : int
        Width of the probabilities output.
    class_names : tuple[str, ...]
        Name of each output class, as the coordinator announced them with the model;
        empty when unknown (a model saved before names were stored).
    """

    version: int
    cluster_id: str
    sha256: str
    input_shape: tuple[int, ...]
    n_classes: int
    class_names: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """One name per output class: the announced names, or ``class <i>`` when they are
        missing or do not fit the model's width."""
        if len(self.class_names) == self.n_classes:
            return self.class_names
        return tuple(f"class {i}" for i in range(self.n_classes))


@dataclass(frozen=True)
class Prediction:
    """Diagnosis of a batch of windows.

    Attributes
    ----------
    class_ids : IntArray
        Most probable class per window, shape (n,).
    probabilities : FloatArray
        Class probabilities, shape (n, n_classes); rows sum to 1.
    model : LoadedModel
        The model that computed every row of this prediction.
    """

    class_ids: IntArray
    probabilities: FloatArray
    model: LoadedModel


def default_providers() -> tuple[str, ...]:
    """CUDA then CPU where this onnxruntime build offers CUDA, otherwise CPU alone."""
    available = ort.get_available_providers()
    return (_CUDA, _CPU) if _CUDA in available else (_CPU,)


class OnnxDiagnoser:
    """Runs the active ONNX model on windows and swaps in new models without a gap.

    Parameters
    ----------
    sample_shape : tuple[int, ...]
        Shape of one window without the batch dimension, e.g. (1, 1024); every model must
        take it.
    intra_op_threads : int, default 1
        Threads ONNX Runtime may use inside one operator.
    providers : sequence of str or None
        ONNX Runtime execution providers in order of preference; by default
        :func:`default_providers`.

    Notes
    -----
    Thread-safe. :meth:`predict` takes the current (session, metadata) pair under a lock and
    runs outside it, so a :meth:`load` in another thread never blocks, drops or mixes a
    batch in flight: every row of a :class:`Prediction` comes from ``prediction.model``.
    Loads are serialised among themselves. :meth:`load` accepts any version, older or equal
    to the active one included: whether to roll back is the caller's decision.
    """

    def __init__(
        self,
        sample_shape: tuple[int, ...],
        *,
        intra_op_threads: int = 1,
        providers: Sequence[str] | None = None,
    ) -> None:
        shape = tuple(sample_shape)
        if not shape or not all(isinstance(n, int) and n >= 1 for n in shape):
            raise UsageError(
                f"sample_shape={sample_shape!r} must be a non-empty tuple of positive ints, "
                "e.g. (1, 1024)"
            )
        if intra_op_threads < 1:
            raise UsageError(f"intra_op_threads={intra_op_threads} must be at least 1")
        chosen = default_providers() if providers is None else tuple(providers)
        missing = [p for p in chosen if p not in ort.get_available_providers()]
        if not chosen or missing:
            raise UsageError(
                f"providers={list(chosen)} must be a non-empty list of available ONNX Runtime "
                f"providers; unavailable: {missing}; available: {ort.get_available_providers()}"
            )
        self.sample_shape = shape
        self.intra_op_threads = intra_op_threads
        self.providers = chosen
        self._current: tuple[_Session, LoadedModel] | None = None
        self._swap_lock = threading.Lock()
        self._load_lock = threading.Lock()

    @property
    def active(self) -> LoadedModel | None:
        """Metadata of the model :meth:`predict` uses now, or None before the first load."""
        with self._swap_lock:
            return None if self._current is None else self._current[1]

    def load(
        self,
        onnx_bytes: bytes,
        *,
        sha256: str,
        version: int,
        cluster_id: str,
        class_names: tuple[str, ...] = (),
    ) -> LoadedModel:
        """Verify an ONNX model and make it the active one.

        Parameters
        ----------
        onnx_bytes : bytes
            Serialised ONNX model with input ``"window"`` (batch, *sample_shape) and an output
            ``"probabilities"`` (batch, n_classes).
        sha256 : str
            Expected hex SHA-256 digest of ``onnx_bytes``.
        version : int
            Version to report with predictions (≥ 0); need not exceed the active one.
        cluster_id : str
            Cluster the model belongs to.
        class_names : tuple of str
            Names of the output classes, kept with the model (see :meth:`LoadedModel.names`).

        Returns
        -------
        LoadedModel
            Metadata of the now active model.

        Raises
        ------
        ModelIntegrityError
            If the digest differs, ONNX Runtime cannot load or run the bytes, or the graph's
            input or outputs do not fit. The previously active model stays active.
        ValueError
            For a negative version.
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version={version!r} must be an int ≥ 0")
        actual = hashlib.sha256(onnx_bytes).hexdigest()
        if actual != sha256.lower():
            raise ModelIntegrityError(
                f"model v{version} of cluster {cluster_id!r}: SHA-256 of the {len(onnx_bytes)} "
                f"bytes is {actual}, expected {sha256}; the payload is corrupt or was altered, "
                "keep the current model and wait for the next announcement"
            )
        with self._load_lock:
            session = self._session(onnx_bytes, version)
            n_classes = self._checked_graph(session, version)
            loaded = LoadedModel(
                version, cluster_id, actual, self.sample_shape, n_classes, tuple(class_names)
            )
            with self._swap_lock:
                self._current = (session, loaded)
        logger.info(
            "diagnosing with model v%d of cluster %s (sha256 %s, providers %s)",
            version,
            cluster_id,
            actual[:12],
            session.get_providers(),
        )
        return loaded

    def predict(self, windows: FloatArray) -> Prediction:
        """Diagnose windows with the active model.

        Parameters
        ----------
        windows : FloatArray
            Shape (n, *sample_shape), or sample_shape for a single window; cast to float32.

        Returns
        -------
        Prediction
            Class ids (n,), probabilities (n, n_classes) and the model that computed them.

        Raises
        ------
        ValueError
            If the windows do not have the diagnoser's sample shape.
        NoModelError
            Before the first successful :meth:`load`.
        """
        batch = np.ascontiguousarray(windows, dtype=np.float32)
        if batch.shape == self.sample_shape:
            batch = batch[np.newaxis]
        if batch.shape[1:] != self.sample_shape or batch.ndim != len(self.sample_shape) + 1:
            raise ValueError(
                f"windows of shape {np.shape(windows)} do not fit sample_shape="
                f"{self.sample_shape}; pass (n, {', '.join(map(str, self.sample_shape))}) "
                "or a single window"
            )
        if batch.shape[0] == 0:
            raise ValueError("windows hold no window (shape starts with 0); pass at least one")
        with self._swap_lock:
            current = self._current
        if current is None:
            raise NoModelError("no model loaded yet; call load() before predict()")
        session, model = current
        (probabilities,) = session.run([PROBABILITIES_OUTPUT], {INPUT_NAME: batch})
        probabilities = np.asarray(probabilities, dtype=np.float32)
        class_ids = np.argmax(probabilities, axis=1).astype(np.int64)
        return Prediction(class_ids=class_ids, probabilities=probabilities, model=model)

    def _session(self, onnx_bytes: bytes, version: int) -> _Session:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.intra_op_threads
        try:
            return ort.InferenceSession(onnx_bytes, options, providers=list(self.providers))
        # ONNX Runtime's errors (InvalidProtobuf, Fail, ...) derive directly from Exception.
        except Exception as error:
            raise ModelIntegrityError(
                f"model v{version}: ONNX Runtime cannot load the {len(onnx_bytes)} bytes "
                f"({type(error).__name__}: {error}); keep the current model"
            ) from error

    def _checked_graph(self, session: _Session, version: int) -> int:
        """Check input and outputs, run one warm-up window, return n_classes."""
        inputs = session.get_inputs()
        outputs = [o.name for o in session.get_outputs()]
        shape = tuple(inputs[0].shape) if len(inputs) == 1 else ()
        fits = (
            len(inputs) == 1
            and inputs[0].name == INPUT_NAME
            and inputs[0].type == "tensor(float)"
            and len(shape) == len(self.sample_shape) + 1
            and not isinstance(shape[0], int)
            and shape[1:] == self.sample_shape
        )
        if not fits or PROBABILITIES_OUTPUT not in outputs:
            found = [(i.name, i.type, i.shape) for i in inputs]
            raise ModelIntegrityError(
                f"model v{version} takes inputs {found} and gives outputs {outputs}; the agent "
                f"needs one float input {INPUT_NAME!r} of shape ['batch', "
                f"{', '.join(map(str, self.sample_shape))}] and an output "
                f"{PROBABILITIES_OUTPUT!r}; was it exported for another sample_shape?"
            )
        warm_up = np.zeros((1, *self.sample_shape), dtype=np.float32)
        try:
            (probabilities,) = session.run([PROBABILITIES_OUTPUT], {INPUT_NAME: warm_up})
        # As above: ONNX Runtime's errors derive directly from Exception.
        except Exception as error:
            raise ModelIntegrityError(
                f"model v{version} fails on a warm-up window ({type(error).__name__}: "
                f"{error}); keep the current model"
            ) from error
        if probabilities.ndim != 2 or probabilities.shape[0] != 1 or probabilities.shape[1] < 2:
            raise ModelIntegrityError(
                f"model v{version} gives probabilities of shape {probabilities.shape} for one "
                "window; expected (1, n_classes) with n_classes ≥ 2"
            )
        return int(probabilities.shape[1])


class ModelStore:
    """The active model on disk: ``model.onnx`` (bytes) and ``model.json`` (metadata).

    Parameters
    ----------
    directory : Path
        Folder of the two files; created on the first :meth:`save`.

    Notes
    -----
    Each file is replaced atomically, the bytes first and the metadata second, so
    ``model.json`` commits a save. A crash between the two writes leaves metadata whose
    digest does not match the bytes, which :meth:`load` reports as
    :class:`ModelIntegrityError`; the agent then starts without a stored model.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.onnx_path = self.directory / "model.onnx"
        self.metadata_path = self.directory / "model.json"

    def save(self, onnx_bytes: bytes, model: LoadedModel) -> None:
        """Persist ``onnx_bytes`` as the active model described by ``model``.

        Raises
        ------
        ModelIntegrityError
            If the bytes' SHA-256 differs from ``model.sha256``.
        """
        actual = hashlib.sha256(onnx_bytes).hexdigest()
        if actual != model.sha256:
            raise ModelIntegrityError(
                f"refusing to store model v{model.version}: SHA-256 of the bytes is {actual}, "
                f"metadata says {model.sha256}; pass the bytes that were loaded"
            )
        metadata = json.dumps({**asdict(model), "input_shape": list(model.input_shape)})
        atomic_write(self.onnx_path, lambda handle: handle.write(onnx_bytes))
        atomic_write(self.metadata_path, lambda handle: handle.write(metadata.encode()))

    def load(self) -> tuple[bytes, LoadedModel] | None:
        """The stored model, or None when nothing was saved.

        Raises
        ------
        ModelIntegrityError
            If the files are unreadable, malformed or their digests disagree; the message
            names the files to delete.
        """
        if not self.metadata_path.exists():
            return None
        try:
            model = _model_from_json(json.loads(self.metadata_path.read_text()))
            onnx_bytes = self.onnx_path.read_bytes()
        except (OSError, ValueError) as error:
            raise self._corrupt(f"{type(error).__name__}: {error}") from error
        actual = hashlib.sha256(onnx_bytes).hexdigest()
        if actual != model.sha256:
            raise self._corrupt(
                f"SHA-256 of {self.onnx_path} is {actual}, {self.metadata_path} says {model.sha256}"
            )
        return onnx_bytes, model

    def clear(self) -> None:
        """Delete the stored model (both files), e.g. after :meth:`load` reported corruption."""
        self.metadata_path.unlink(missing_ok=True)
        self.onnx_path.unlink(missing_ok=True)

    def _corrupt(self, reason: str) -> ModelIntegrityError:
        return ModelIntegrityError(
            f"stored model in {self.directory} is corrupt ({reason}); delete "
            f"{self.metadata_path} and {self.onnx_path} (ModelStore.clear() does) to start "
            "without a stored model"
        )


def _model_from_json(data: Any) -> LoadedModel:
    """Rebuild :class:`LoadedModel` from its JSON form; ValueError if malformed."""
    required = set(_METADATA_TYPES) - _OPTIONAL_METADATA
    if not isinstance(data, dict) or not required <= set(data) <= set(_METADATA_TYPES):
        raise ValueError(f"expected exactly the keys {sorted(_METADATA_TYPES)}, not {data!r:.200}")
    data = {"class_names": [], **data}
    wrong = [key for key, kind in _METADATA_TYPES.items() if not isinstance(data[key], kind)]
    if wrong or not all(isinstance(n, int) for n in data["input_shape"]):
        raise ValueError(f"fields {wrong or ['input_shape']} have the wrong type in {data!r:.200}")
    if not all(isinstance(name, str) for name in data["class_names"]):
        raise ValueError(f"class_names must be strings in {data!r:.200}")
    return LoadedModel(
        **{
            **data,
            "input_shape": tuple(data["input_shape"]),
            "class_names": tuple(data["class_names"]),
        }
    )
