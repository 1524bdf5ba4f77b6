"""Live diagnosis with ONNX Runtime: verified loading, hot swap, and a store that survives restarts.

The coordinator publishes each cluster's model as ONNX bytes with their SHA-256 digest (see
:mod:`coordinator.adapters.onnx_export`). :class:`OnnxDiagnoser` checks the digest, builds an ONNX
Runtime session, checks the graph's input and outputs and runs one warm-up window before the
new model replaces the active one, so a bad payload never interrupts diagnosis. Agents of
one process that load the same model share its session (:mod:`edge_agent.onnx_sessions`).
:class:`~edge_agent.model_store.ModelStore` keeps the active model on disk so that a restarted
agent diagnoses at once, before the broker delivers the retained model again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from edge_agent.onnx_runner import (
    INPUT_NAME,
    PROBABILITIES_OUTPUT,
    LoadedModel,
    Prediction,
    SingleWindowRunner,
    _Session,
)
from edge_agent.onnx_sessions import shared_session
from faultfleet.errors import FaultfleetError, UsageError
from faultfleet.types import FloatArray

logger = logging.getLogger(__name__)

_CPU = "CPUExecutionProvider"
_CUDA = "CUDAExecutionProvider"


class ModelIntegrityError(FaultfleetError, ValueError):
    """A model payload or stored model is unusable: wrong digest, unloadable ONNX, wrong shape."""


class NoModelError(FaultfleetError, RuntimeError):
    """A prediction was asked for before any model was loaded."""


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
        self._current: SingleWindowRunner | None = None
        self._swap_lock = threading.Lock()
        self._load_lock = threading.Lock()

    @property
    def active(self) -> LoadedModel | None:
        """Metadata of the model :meth:`predict` uses now, or None before the first load."""
        with self._swap_lock:
            return None if self._current is None else self._current.model

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
            session = shared_session(
                actual,
                self.providers,
                self.intra_op_threads,
                lambda: self._session(onnx_bytes, version),
            )
            n_classes = self._checked_graph(session, version)
            loaded = LoadedModel(
                version, cluster_id, actual, self.sample_shape, n_classes, tuple(class_names)
            )
            runner = SingleWindowRunner(session, loaded)
            with self._swap_lock:
                self._current = runner
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
        with self._swap_lock:
            runner = self._current
        single = (self.sample_shape, runner.window.shape) if runner is not None else ()
        if runner is not None and isinstance(windows, np.ndarray) and windows.shape in single:
            return runner.predict_one(windows)  # one window: the agent's live path
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
        if runner is None:
            raise NoModelError("no model loaded yet; call load() before predict()")
        return runner.predict_batch(batch)

    def predict_top(self, window: FloatArray) -> tuple[LoadedModel, int, float]:
        """The most probable class of one window, as :meth:`predict` gives it, without the
        arrays: the model, the class id and its probability (a float32 as a Python float).

        The agent's diagnosis thread calls this for every window. ``window`` has the sample
        shape, or ``(1, *sample_shape)``; other shapes go through :meth:`predict` (first
        window of a batch) and raise as there.
        """
        runner = self._current  # one reference, read at once: session and model agree
        if runner is not None and isinstance(window, np.ndarray) and window.shape in runner.shapes:
            top = runner.top_one(window)
            if top is not None:
                return runner.model, top[0], top[1]
        prediction = self.predict(window)
        class_id = int(prediction.class_ids[0])
        return prediction.model, class_id, prediction.probabilities.item(0, class_id)

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


__all__ = [
    "INPUT_NAME",
    "PROBABILITIES_OUTPUT",
    "LoadedModel",
    "ModelIntegrityError",
    "NoModelError",
    "OnnxDiagnoser",
    "Prediction",
    "default_providers",
]
