"""Why the wire refuses a message, and the bounded JSON reader every parser uses.

Everything a receiver cannot accept raises :class:`WireError` carrying a
:class:`RejectReason`, which the coordinator counts on
``faultfleet_updates_rejected_total{reason=...}`` and an agent on
``faultfleet_tasks_rejected_total{reason=...}``. JSON is bounded before it is parsed
(:data:`MAX_HEADER_BYTES`, :data:`MAX_JSON_DEPTH`, :data:`MAX_JSON_CONTAINERS`) and then
read by pydantic-core's parser, which recurses in no Python frame, refuses lone surrogates
(that could not be written back as UTF-8), NaN and infinities, and numbers of more than a
few thousand digits. :mod:`faultfleet.wire.codec` re-exports all of it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic_core import from_json

from faultfleet.errors import FaultfleetError

MAX_HEADER_BYTES = 1024 * 1024
"""Largest frame header, and largest plain JSON message (status, assignment, diagnosis)."""
MAX_JSON_DEPTH = 16
"""Deepest nesting of arrays and objects in a header; the deepest envelope needs 4."""
MAX_JSON_CONTAINERS = 10_000
"""Most ``[`` and ``{`` characters in a header (inside strings included)."""


class RejectReason(StrEnum):
    """Why a message from an agent was refused (a label of the rejection counter)."""

    MALFORMED = "malformed"
    """Not a frame, bad JSON, or an unreadable tensor body."""
    OVERSIZED = "oversized"
    """Larger than ``broker.max_payload_bytes`` (or inflates beyond it)."""
    SCHEMA = "schema"
    """A header that does not validate: unknown field, wrong type, other schema version."""
    WRONG_SHAPE = "wrong_shape"
    """Tensors missing, extra, or of the wrong length or dtype for the model."""
    NOT_FINITE = "not_finite"
    """NaN or infinite weights."""
    UNKNOWN_TASK = "unknown_task"
    """An answer to no task of this run (another run, a forged id, another agent's topic)."""
    DUPLICATE = "duplicate"
    """A second answer for the same (round, agent): kept once, idempotently."""
    LATE = "late"
    """An answer that arrived after its round's deadline."""
    TOO_MANY_SAMPLES = "too_many_samples"
    """An update claiming more training samples than its agent declared when it came online,
    or an agent status declaring more than the coordinator's plausible limit."""


class WireError(FaultfleetError, ValueError):
    """A message that cannot be accepted; :attr:`reason` says which rule it broke."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def load_json(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object of at most :data:`MAX_HEADER_BYTES` bytes, nesting and containers bounded.

    Parameters
    ----------
    data : bytes
        UTF-8 JSON text.
    what : str
        What the bytes are, for the error message ("frame header", "message").

    Raises
    ------
    WireError
        OVERSIZED above :data:`MAX_HEADER_BYTES`; MALFORMED for anything that is not a JSON
        object within the nesting limits.
    """
    if len(data) > MAX_HEADER_BYTES:
        raise WireError(
            RejectReason.OVERSIZED,
            f"{what} of {len(data)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit for JSON",
        )
    _count_containers(data, what)
    try:
        # pydantic-core's parser stops at 200 levels without recursing in Python.
        value = from_json(data, allow_inf_nan=False)
    except ValueError as error:  # also UTF-8 errors, lone surrogates, overlong numbers
        raise WireError(RejectReason.MALFORMED, f"{what} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise WireError(RejectReason.MALFORMED, f"{what} is not a JSON object")
    _check_depth(value, what)
    return value


def _count_containers(data: bytes, what: str) -> None:
    """Refuse more than :data:`MAX_JSON_CONTAINERS` brackets, counted in C before parsing."""
    containers = data.count(b"[") + data.count(b"{")
    if containers > MAX_JSON_CONTAINERS:
        raise WireError(
            RejectReason.MALFORMED,
            f"{what} holds {containers} '[' and '{{' characters, more than the "
            f"{MAX_JSON_CONTAINERS} any message needs",
        )


def _check_depth(value: dict[str, Any], what: str) -> None:
    """Refuse arrays and objects nested deeper than :data:`MAX_JSON_DEPTH`.

    Iterative, and it visits at most :data:`MAX_JSON_CONTAINERS` containers.
    """
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise WireError(
                RejectReason.MALFORMED,
                f"{what} nests arrays or objects deeper than {MAX_JSON_DEPTH} levels",
            )
        items = container.values() if isinstance(container, dict) else container
        stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))
