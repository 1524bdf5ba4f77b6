"""The active model on disk, so that a restarted agent diagnoses at once.

:class:`ModelStore` keeps the ONNX bytes the agent's :class:`~edge_agent.inference.OnnxDiagnoser`
runs and their metadata, each file replaced atomically, and reads them back checked against
their digest before the broker delivers the retained model again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edge_agent.inference import LoadedModel, ModelIntegrityError
from faultfleet.files import atomic_write

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
