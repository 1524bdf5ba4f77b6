"""One loaded ONNX model, run on one window at a time through buffers bound to its session.

:class:`~edge_agent.inference.OnnxDiagnoser` loads and swaps models; what it runs is a
:class:`SingleWindowRunner`: the session with its input and output buffers bound once (ONNX
Runtime IO binding), and the metadata of the model (:class:`LoadedModel`) every
:class:`Prediction` names.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import onnxruntime as ort

from faultfleet.types import FloatArray, IntArray

INPUT_NAME = "window"
PROBABILITIES_OUTPUT = "probabilities"

_Session = Any
"""An ``onnxruntime.InferenceSession``; onnxruntime ships no type information."""


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
        return self._names

    @cached_property
    def _names(self) -> tuple[str, ...]:
        """:meth:`names`, worked out once (the agent asks for every window)."""
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


class SingleWindowRunner:
    """A loaded model's session with pre-allocated single-window buffers bound to it.

    An agent diagnoses one window at a time. :meth:`predict_one` copies the window into a
    buffer bound to the session's input and runs the session into a buffer bound to its
    output (ONNX Runtime IO binding), so no feed dictionary, input tensor or output array
    is built per call; only the returned ``(1, n_classes)`` probabilities are copied out,
    because the buffer is overwritten by the next window. A call that finds the buffers
    in use by another thread runs through plain ``session.run`` rather than wait.
    """

    def __init__(self, session: _Session, model: LoadedModel) -> None:
        self.session = session
        self.model = model
        self.window = np.zeros((1, *model.input_shape), dtype=np.float32)
        self.probabilities = np.zeros((1, model.n_classes), dtype=np.float32)
        self.shapes = (model.input_shape, self.window.shape)
        """The shapes of one window this runner takes."""
        # The OrtValues share the buffers' memory; kept here so they live as long as the
        # binding that holds them.
        self._values = (
            ort.OrtValue.ortvalue_from_numpy(self.window),
            ort.OrtValue.ortvalue_from_numpy(self.probabilities),
        )
        self._binding = session.io_binding()
        self._binding.bind_ortvalue_input(INPUT_NAME, self._values[0])
        self._binding.bind_ortvalue_output(PROBABILITIES_OUTPUT, self._values[1])
        self._busy = threading.Lock()

    def predict_one(self, window: FloatArray) -> Prediction:
        """Diagnose one window, of shape ``input_shape`` or ``(1, *input_shape)``."""
        if not self._busy.acquire(blocking=False):
            return self.predict_batch(np.ascontiguousarray(window, dtype=np.float32))
        try:
            np.copyto(self.window, window, casting="unsafe")
            self.session.run_with_iobinding(self._binding)
            probabilities = self.probabilities.copy()
        finally:
            self._busy.release()
        class_ids = probabilities.argmax(axis=1).astype(np.int64, copy=False)
        return Prediction(class_ids=class_ids, probabilities=probabilities, model=self.model)

    def top_one(self, window: FloatArray) -> tuple[int, float] | None:
        """The most probable class of one window and its probability, read straight from
        the bound output; None when another thread uses the buffers."""
        if not self._busy.acquire(blocking=False):
            return None
        try:
            np.copyto(self.window, window, casting="unsafe")
            self.session.run_with_iobinding(self._binding)
            class_id = int(self.probabilities.argmax())  # flat index: row 0's class
            return class_id, self.probabilities.item(class_id)
        finally:
            self._busy.release()

    def predict_batch(self, batch: FloatArray) -> Prediction:
        """Diagnose a checked float32 batch of shape (n, *input_shape) (or one window)."""
        if batch.ndim == len(self.model.input_shape):
            batch = batch[np.newaxis]
        (probabilities,) = self.session.run([PROBABILITIES_OUTPUT], {INPUT_NAME: batch})
        probabilities = np.asarray(probabilities, dtype=np.float32)
        class_ids = np.argmax(probabilities, axis=1).astype(np.int64)
        return Prediction(class_ids=class_ids, probabilities=probabilities, model=self.model)
