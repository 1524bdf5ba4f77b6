"""One ONNX Runtime session per distinct model in a process, however many agents run it.

``faultfleet agent --machines 0-23`` runs 24 agents in one process, and the agents of a
cluster all diagnose with the same model: the same ONNX bytes, identified by their SHA-256
digest. Each building its own :class:`onnxruntime.InferenceSession` would hold the model's
weights and ONNX Runtime's buffers once per agent (17.6 MB of weights per agent for the
``paper`` model). :func:`shared_session` hands every agent that loads the same bytes with
the same session settings the same session instead. ONNX Runtime allows concurrent
``run`` calls on one session; each agent keeps its own input and output buffers
(:class:`edge_agent.inference.OnnxDiagnoser` binds them per agent).

Sessions are held weakly: once no agent diagnoses with a model any more (every agent of the
cluster swapped to its next version), its session is freed as before.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

_SessionKey = tuple[str, tuple[str, ...], int]
"""(SHA-256 of the ONNX bytes, execution providers, intra-op threads)."""

_sessions: weakref.WeakValueDictionary[_SessionKey, Any] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def shared_session(
    sha256: str,
    providers: tuple[str, ...],
    intra_op_threads: int,
    build: Callable[[], Any],
) -> Any:
    """The live session of the model ``sha256`` with these settings, or a new one from
    ``build`` (which may raise; nothing is kept then).

    ``sha256`` must be the digest of the bytes ``build`` loads, checked by the caller.
    """
    key = (sha256, providers, intra_op_threads)
    with _lock:  # one build per model at a time: two agents never build the same session
        session = _sessions.get(key)
        if session is None:
            session = build()
            _sessions[key] = session
        return session


def live_sessions() -> int:
    """Sessions some agent of this process still holds."""
    with _lock:
        return len(_sessions)
