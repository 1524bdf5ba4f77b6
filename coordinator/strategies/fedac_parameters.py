"""FedAC's hyper-parameters, declared once (:mod:`coordinator.strategies.parameters`).

Zhang, Chen, Lin, Chen & Zhao, "FedAC: an adaptive clustered federated learning framework
for heterogeneous data" (2024): eq. 3, Algorithms 1–3 and §5.1's values; the warm-up and
the map's buffer are ours (:mod:`coordinator.strategies.fedac`).
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.strategies.parameters import FRACTION, Param

PARAMETERS: tuple[Param, ...] = (
    replace(FRACTION, reference="FedAC §5.1: 25 of 100 clients"),
    Param(
        "n_clusters",
        "int",
        2,
        "the initial number of clusters K (tuning changes it)",
        "FedAC Algorithm 1",
        low=1,
    ),
    Param(
        "mu",
        "float",
        0.03,
        "μ, the pull of the whole model towards the client's cluster centre",
        "FedAC eq. 3",
        low=0.0,
    ),
    Param(
        "lam",
        "float",
        0.01,
        "λ, the pull of the embedding part towards the global embedding Φ",
        "FedAC eq. 3",
        low=0.0,
    ),
    Param(
        "components",
        "int",
        50,
        "D, the dimension of the low-rank space",
        "FedAC Algorithm 2; 50 in §4.3",
        low=1,
    ),
    Param(
        "map_every",
        "int",
        10,
        "the rounds between refits of the PCA map once it has D directions",
        low=1,
    ),
    Param(
        "buffer_size",
        "int",
        100,
        "the client-model deviations kept to fit the PCA map (more than components)",
        low=2,
    ),
    Param(
        "gc_low",
        "float",
        0.2,
        "the bound a on G_c below which a cluster merges into its most similar one",
        "FedAC Algorithm 3; 0.2 in §5.5",
        low=0.0,
    ),
    Param(
        "gc_high",
        "float",
        0.8,
        "the bound b on G_c above which a cluster splits in two",
        "FedAC Algorithm 3; 0.8 in §5.5",
        low=0.0,
    ),
    Param(
        "tune_every",
        "int",
        3,
        "the rounds between cluster-number tuning steps",
        "FedAC Algorithm 1, line 13",
        low=1,
    ),
    Param(
        "warmup",
        "int",
        3,
        "the rounds of training before the centres are seeded (0: after round 1)",
        low=0,
    ),
)
