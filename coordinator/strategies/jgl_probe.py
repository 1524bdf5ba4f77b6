"""JGL's probe answers, one at a time: a device's identity by eq. 4 and what is kept of it.

:class:`~coordinator.strategies.jgl.JointGradientLoss` decides each device's identity from
that device's answer alone (its K losses and gradients, and the clusters' last updates), so
the answers need not be held together. Under sketches the strategy takes them as a stream
(:class:`GradientProbe`, a :class:`~coordinator.strategies.probe_streaming.GradientStream`):
each answer is checked, its identity chosen and its K gradients reduced to unit sketches as
it arrives, and its arrays are let go. It keeps K·d numbers per device instead of K·n (at
2,500 devices, K = 6 and the compact model: about 85 MB instead of 3.6 GB), and full
gradients only under ``reference = "gradient"``, which averages them after training: a
cluster's Δw_k is minus the mean gradient for k's model of the devices that trained k, and
a device trains its identity's model unless the empty-cluster fix moves it into a cluster
no answer chose. So each answer keeps its identity's gradient, and those of the clusters no
answer had chosen yet when it arrived; once an answer chooses a cluster, the gradients of
that cluster kept from earlier answers (of other identities) are let go. Where every
cluster is chosen early in the stream, that is one gradient per device instead of K; a
cluster nobody chooses keeps every device's gradient for it, as the list does.

:func:`check_answer` and :func:`choose_identity` are the rules both the list and the stream
apply; the stream's identities, similarities and evidence equal the list's under sketches.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from coordinator.strategies.jgl_identity import Similarity, descent_similarity, identity_scores
from coordinator.strategies.sketch import UpdateSketcher
from faultfleet.tasks import GradientResult
from faultfleet.types import FloatArray


def check_answer(
    result: GradientResult, probed: Collection[str], keys: Sequence[str], size: int
) -> None:
    """Raise ValueError unless ``result`` answers the probe: a probed device, every model of
    ``keys`` (and no other), gradients of shape (size,)."""
    if result.client_id not in probed:
        raise ValueError(f"probe answer from {result.client_id!r}, which was not probed")
    if set(result.losses) != set(keys) or set(result.gradients) != set(keys):
        raise ValueError(
            f"client {result.client_id!r} answered for models {sorted(result.gradients)}, "
            f"expected {list(keys)}"
        )
    for key, gradient in result.gradients.items():
        if gradient.shape != (size,):
            raise ValueError(
                f"client {result.client_id!r} sent a gradient of shape {gradient.shape} for "
                f"{key!r}, expected ({size},)"
            )


def choose_identity(
    result: GradientResult,
    keys: Sequence[str],
    last_update: FloatArray | None,
    similarity: Similarity,
    lam: float,
) -> tuple[int, float]:
    """Eq. 4: the device's cluster (ties to the lowest) and S of that cluster; S = 0 for all
    clusters while ``last_update`` is None (not every cluster updated yet)."""
    losses = np.array([result.losses[k] for k in keys], dtype=np.float64)
    scores = np.zeros(len(keys))
    if last_update is not None:
        gradients = np.stack([np.asarray(result.gradients[k], np.float64) for k in keys])
        scores = descent_similarity(gradients, last_update, similarity)
    k = int(np.argmax(identity_scores(losses, scores, lam)))
    return k, float(scores[k])


@dataclass(frozen=True)
class ProbeAnswer:
    """What a streamed probe keeps of one device's answer."""

    identity: int
    """The cluster eq. 4 chose."""
    similarity: float
    """S of that cluster (0 before every cluster was updated once)."""
    sketches: FloatArray
    """Unit sketches of the K gradients, shape (K, d), in the models' order."""
    gradients: dict[int, FloatArray] | None
    """Gradients by cluster number, shape (n,), float32, under ``reference = "gradient"``
    only: the identity's, and those of clusters no answer had chosen (see the module
    docstring)."""


class GradientProbe:
    """One probe step's answers taken as they arrive (see the module docstring).

    Parameters
    ----------
    probed : collection of str
        The devices asked.
    keys : sequence of str
        The K cluster models, in order.
    size : int
        Parameters of the model.
    last_update : array of shape (K, n) or None
        Δw_k of every cluster; None while some cluster was never updated (S = 0).
    similarity, lam
        Eq. 3's measure and eq. 4's λ.
    sketcher : UpdateSketcher
        Sketches each gradient for the devices' evidence.
    keep_gradients : bool
        Keep the gradients ``reference = "gradient"`` may read (see the module docstring).
    """

    def __init__(
        self,
        *,
        probed: Collection[str],
        keys: Sequence[str],
        size: int,
        last_update: FloatArray | None,
        similarity: Similarity,
        lam: float,
        sketcher: UpdateSketcher,
        keep_gradients: bool,
    ) -> None:
        self.probed = frozenset(probed)
        self.keys = tuple(keys)
        self.size = size
        self.last_update = last_update
        self.similarity = similarity
        self.lam = lam
        self.sketcher = sketcher
        self.keep_gradients = keep_gradients
        self._answers: dict[str, ProbeAnswer] = {}
        self._unchosen = set(range(len(self.keys)))
        """Cluster numbers no answer taken so far chose."""
        self._lock = threading.Lock()

    def add(self, result: GradientResult) -> None:
        """Check one answer, choose its identity and sketch its gradients.

        Raises
        ------
        ValueError
            As :func:`check_answer`, or the device answered already.
        """
        check_answer(result, self.probed, self.keys, self.size)
        identity, similarity = choose_identity(
            result, self.keys, self.last_update, self.similarity, self.lam
        )
        sketches = np.stack([self.sketcher.unit_sketch(result.gradients[k]) for k in self.keys])
        with self._lock:
            if result.client_id in self._answers:
                raise ValueError(f"client {result.client_id!r} answered the probe more than once")
            gradients = None
            if self.keep_gradients:
                gradients = {
                    k: np.array(result.gradients[self.keys[k]], dtype=np.float32)
                    for k in sorted(self._unchosen | {identity})
                }
                if identity in self._unchosen:  # chosen now: earlier answers let it go
                    for earlier in self._answers.values():
                        if earlier.gradients is not None and earlier.identity != identity:
                            earlier.gradients.pop(identity, None)
            self._unchosen.discard(identity)
            self._answers[result.client_id] = ProbeAnswer(identity, similarity, sketches, gradients)

    def answered(self) -> frozenset[str]:
        """The devices whose answers were taken."""
        with self._lock:
            return frozenset(self._answers)

    def answers(self) -> dict[str, ProbeAnswer]:
        """What was kept of each answer, by device."""
        with self._lock:
            return dict(self._answers)
