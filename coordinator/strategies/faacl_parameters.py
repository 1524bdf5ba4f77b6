"""FAACL's hyper-parameters, declared once (:mod:`coordinator.strategies.parameters`).

"FAACL: federated adaptive asymmetric clustered learning" (``shared/papers/faacl.txt``),
§4.2, Theorem 4.1 and Algorithms 1–7; ``patience`` and the ``pairwise`` options
(:mod:`.pairwise`, for the same-model evidence cosines only) are ours.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.strategies.pairwise import PAIRWISE_PARAMETERS
from coordinator.strategies.parameters import FRACTION, Param

FAACL_PARAMETERS: tuple[Param, ...] = (
    replace(
        FRACTION,
        description="the client fraction c sampled for cluster training after the initial rounds",
    ),
    Param(
        "version",
        "int",
        1,
        "the support test: 1, a Wilcoxon signed-rank test per device; 2, the pooled "
        "mean loss difference against ε",
        "FAACL §4.2, Algorithms 3 and 4",
        choices=(1, 2),
    ),
    Param(
        "epsilon",
        "float",
        1.0,
        "the margin ε in nats: a candidate supports a cluster when its model is at most "
        "this much worse on the cluster's devices",
        "FAACL §4.2; 1.0 measured on mixed-fault",
        low=0.0,
    ),
    Param(
        "alpha",
        "float",
        0.05,
        "the significance level α of the version 1 test",
        "FAACL Algorithm 3",
        low=0.0,
        low_open=True,
        high=1.0,
        high_open=True,
    ),
    Param(
        "hierarchical",
        "bool",
        True,
        "hierarchical FAACL (true, the paper's experiments) or flat (false)",
        "FAACL Algorithms 1 and 7",
    ),
    Param(
        "init_rounds",
        "int",
        3,
        "the rounds of local training by every available device before the first support test",
        "FAACL Algorithm 2",
        low=0,
    ),
    Param(
        "patience",
        "int",
        3,
        "the undecided rounds in a row after which a partition counts as stable",
        "a bound on FAACL Algorithm 7's loop",
        low=1,
        optional=True,
        none="wait for a quiet round, as the paper",
    ),
    Param(
        "loss_range",
        "float",
        10.0,
        "b − a, the width in nats of the interval per-sample loss differences lie in "
        "(only for the bound reported with version 2)",
        "FAACL Theorem 4.1",
        low=0.0,
        low_open=True,
    ),
    *PAIRWISE_PARAMETERS,
)
