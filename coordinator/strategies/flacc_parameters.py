"""FLACC's hyper-parameters, declared once (:mod:`coordinator.strategies.parameters`).

Mehta & Shao, "A greedy agglomerative framework for clustered federated learning", IEEE
Trans. Ind. Inform. 19(12), 2023: eqs. 14, 16 and 18, Algorithm 1 and §VI's values; the
cohesion rule is ours (:mod:`coordinator.strategies.cohesion`).
"""

from __future__ import annotations

from coordinator.strategies.pairwise import PAIRWISE_PARAMETERS
from coordinator.strategies.parameters import Param

RULES = ("cohesion", "paper")
"""FLACC's merge rules: the default with the cohesion test, and Algorithm 1 as written."""

FLACC_PARAMETERS: tuple[Param, ...] = (
    Param(
        "alpha0",
        "float",
        0.0,
        "the least cross-entity cosine similarity α0 that allows a merge",
        "FLACC eq. 16; 0 in §VI",
        low=-1.0,
        low_open=True,
        high=1.0,
    ),
    Param(
        "memory",
        "int",
        10,
        "the system memory T, rounds a pair's similarity is remembered",
        "FLACC eq. 18; 10 in §VI",
        low=0,
        optional=True,
        none="T = ∞, never forget",
    ),
    Param(
        "n_merge",
        "int",
        1,
        "the most entity pairs merged per round",
        "FLACC Algorithm 1, lines 13–18; 1 in §VI",
        low=1,
    ),
    Param(
        "n_sep",
        "int",
        10,
        "N_sep, the rounds in a row without a merge before separation",
        "FLACC Algorithm 1, line 5; 10 in §VI",
        low=1,
    ),
    Param(
        "next_pair",
        "bool",
        False,
        "whether a later pair may merge when eq. 9's pair fails only eq. 14 (implied by "
        "rule 'cohesion')",
        "FLACC eqs. 9 and 14; false is Algorithm 1 as written",
    ),
    Param(
        "rule",
        "str",
        "cohesion",
        "the merge rule: eqs. 14 and 16 and the cohesion test ('cohesion'), or "
        "Algorithm 1 as written ('paper')",
        "ours; 'paper' is FLACC Algorithm 1",
        choices=RULES,
    ),
    Param(
        "cohesion_share",
        "float",
        0.7,
        "share of the looser entity's mean within cosine that the mean cross cosine "
        "must reach for a merge (rule 'cohesion')",
        "ours; measured in coordinator/strategies/cohesion.py",
        low=0.0,
        high=1.0,
    ),
    Param(
        "partners",
        "int",
        32,
        "under pairwise sketch, how many others each client's update is compared with in a "
        "round of more than partners + 1 updates (smaller rounds compare every pair)",
        "ours; coordinator/strategies/pair_memory.py",
        low=2,
    ),
    *PAIRWISE_PARAMETERS,
)
