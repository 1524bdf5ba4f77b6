"""Diagnosis messages as JSON without building the pydantic model, byte for byte the same.

An edge agent publishes, logs and keeps one :class:`~faultfleet.wire.messages.Diagnosis` per
window, every 85 ms or so. Building the model (validation) and serialising it costs about
as much Python as everything else the agent does for a window, and nearly all of it is
the same every time: the agent, the model version, the cluster and the class names change
only with the model. :class:`DiagnosisEncoder` keeps those parts of the JSON ready, made
by pydantic's own serialiser once per model, and writes the few values that change with
Python's formatting of ints, floats and strings, which is pydantic's for every value the
agent makes.

What the encoder cannot write the same way goes through the model instead, which also
raises what the model would raise: a float that Python prints with an exponent (pydantic
writes ``0.00001`` where Python writes ``1e-05``), a timestamp or latency that is not a
finite float, a probability outside [0, 1], a label that is not an int, an origin that
is not text UTF-8 can encode. The encoder checks itself when it is built: the JSON of one
diagnosis of every class, made both ways, must be equal; otherwise (a schema that gained a
field) every diagnosis goes through the model. Messages *received* are always validated
with the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence

from pydantic import TypeAdapter

from faultfleet.wire.messages import Diagnosis

_STR_JSON = TypeAdapter(str).dump_json
_FLOAT_JSON = TypeAdapter(float).dump_json

_text: Callable[[str], str] = json.encoder.encode_basestring
"""A JSON string as pydantic writes it: UTF-8, only ``"``, ``\\`` and control characters
escaped (what ``json.JSONEncoder(ensure_ascii=False).encode`` of a str gives, called
directly)."""


def _float(value: float, text: str) -> str:
    """``value`` (finite), whose ``repr`` is ``text``, as pydantic writes it: as ``text``
    but from 1e-5 to 1e-4, which pydantic writes without an exponent (``0.000095``, not
    ``9.5e-05``; a latency of a fast model), and other exponents, which pydantic writes in
    its own way."""
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    if exponent == "-05":
        sign, digits = ("-", mantissa[1:]) if mantissa[0] == "-" else ("", mantissa)
        return f"{sign}0.0000{digits.replace('.', '')}"
    return _FLOAT_JSON(value).decode()


class DiagnosisEncoder:
    """The JSON of the diagnoses one agent makes with one model.

    Parameters
    ----------
    agent_id : str
    model_version : int
    cluster_id : str
    class_names : sequence of str
        The model's class names, in class-id order.

    Raises
    ------
    pydantic.ValidationError
        As :class:`~faultfleet.wire.messages.Diagnosis` for an invalid agent id, cluster id
        or model version.
    """

    def __init__(
        self, agent_id: str, model_version: int, cluster_id: str, class_names: Sequence[str]
    ) -> None:
        self.agent_id = agent_id
        self.model_version = model_version
        self.cluster_id = cluster_id
        self.class_names = tuple(class_names)
        # The model checks the constant fields (ids, version) once, as it would every time.
        Diagnosis(
            agent_id=agent_id,
            window_index=0,
            class_id=0,
            class_name="",
            probability=0.0,
            model_version=model_version,
            cluster_id=cluster_id,
            timestamp=0.0,
        )
        head = (
            f'{{"schema_version":{Diagnosis.model_fields["schema_version"].default},'
            f'"kind":"diagnosis","agent_id":{_STR_JSON(agent_id).decode()},"window_index":'
        )
        model = f',"model_version":{model_version},"cluster_id":{_STR_JSON(cluster_id).decode()}'
        self._head = head
        self._classes = tuple(
            f',"class_id":{i},"class_name":{_STR_JSON(name).decode()},"probability":'
            for i, name in enumerate(self.class_names)
        )
        self._tail = f'{model},"timestamp":'
        self.fast = True
        """False when the self-check failed: every diagnosis goes through the model."""
        check = (7, 0.25, 1.5, 0.001, 3, 'check "é"\n')
        self.fast = all(
            self.encode(check[0], i, *check[1:]) == self._model(check[0], i, *check[1:])
            for i in range(len(self.class_names))
        )

    def encode(
        self,
        window_index: int,
        class_id: int,
        probability: float,
        timestamp: float,
        latency_s: float,
        true_label: int | None,
        origin: str,
    ) -> bytes:
        """``Diagnosis(...).model_dump_json().encode()`` of one window (fields as there;
        the class name is the model's name of ``class_id``).

        Raises
        ------
        pydantic.ValidationError
            Where the model would (e.g. a timestamp that is NaN).
        IndexError
            ``class_id`` is not one of the model's classes.
        """
        if not (
            self.fast
            and type(window_index) is int
            and window_index >= 0
            and type(class_id) is int
            and 0 <= class_id < len(self._classes)
            and type(probability) is float
            and 0.0 <= probability <= 1.0
            and type(timestamp) is float
            and math.isfinite(timestamp)
            and type(latency_s) is float
            and 0.0 <= latency_s < math.inf
            and (true_label is None or type(true_label) is int)
            and type(origin) is str
        ):
            return self._model(
                window_index, class_id, probability, timestamp, latency_s, true_label, origin
            )
        label = "null" if true_label is None else str(true_label)
        p, t, lat = repr(probability), repr(timestamp), repr(latency_s)
        if "e" in lat:  # a latency under 0.1 ms (a small model's): as pydantic writes it
            lat = _float(latency_s, lat)
        if "e" in p or "e" in t:  # rare
            p, t = _float(probability, p), _float(timestamp, t)
        try:
            return (
                f"{self._head}{window_index}{self._classes[class_id]}{p}"
                f'{self._tail}{t},"latency_s":{lat},'
                f'"true_label":{label},"origin":{_text(origin)}}}'
            ).encode()
        except (UnicodeEncodeError, ValueError):  # a lone surrogate; an int too long for str
            return self._model(
                window_index, class_id, probability, timestamp, latency_s, true_label, origin
            )

    def _model(
        self,
        window_index: int,
        class_id: int,
        probability: float,
        timestamp: float,
        latency_s: float,
        true_label: int | None,
        origin: str,
    ) -> bytes:
        """The same through the pydantic model (validation included)."""
        return (
            Diagnosis(
                agent_id=self.agent_id,
                window_index=window_index,
                class_id=class_id,
                class_name=self.class_names[class_id],
                probability=probability,
                model_version=self.model_version,
                cluster_id=self.cluster_id,
                timestamp=timestamp,
                latency_s=latency_s,
                true_label=true_label,
                origin=origin,
            )
            .model_dump_json()
            .encode()
        )
