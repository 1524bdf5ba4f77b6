"""Model keys every strategy shares: one spelling for a cluster's model and the global one.

A strategy holds its models in a dict keyed by name (:attr:`Strategy.models_
<coordinator.strategies.base.Strategy.models_>`). Cluster models are ``cluster-<label>``
in every strategy (FLACC's entities, IFCA's and JGL's k models, CFL's halves, FL+HC's
cut, FAACL's merged clusters, FedAC's centres, the fixed clusters); a single shared model
is ``global``. Keys travel in tasks and checkpoints, so they are spelt here only.
"""

from __future__ import annotations

GLOBAL = "global"
"""Key of the one model every client shares (FedAvg, FLACC before separation, FL+HC's
warm-up and its unclustered clients)."""

CLUSTER_PREFIX = "cluster-"


def cluster_key(label: int | str) -> str:
    """Model key of cluster ``label``: ``"cluster-<label>"``."""
    return f"{CLUSTER_PREFIX}{label}"


def cluster_number(key: str) -> int:
    """The number in a key ``cluster_key(n)`` made; a ValueError for any other key."""
    if not key.startswith(CLUSTER_PREFIX):
        raise ValueError(f"{key!r} is not a cluster key (cluster-<n>)")
    return int(key.removeprefix(CLUSTER_PREFIX))
