"""Does the run confidence separate good clusterings from bad ones? Confidence against ARI.

Usage: python benchmarks/quality_separation.py [RESULTS.json ...]
       [--replay RECORDING.json ... [--alpha0 0.0 ...] [--n-sep 10 ...] [--memory 10]
        [--rule cohesion paper] [--cohesion-share 0.7 ...]]

Reads the run confidence (``cluster_quality.confidence``, which needs no ground truth) and
the adjusted Rand index against the true groups (``final.ari``) of finished ``faultfleet
sim`` runs, and of FLACC runs replayed from recordings of its clustering phase
(``--replay``: per round, the clients that answered and the cosines of their updates, as
``record_flacc_similarity.py`` writes them), once per combination of the ``--rule``,
``--alpha0``, ``--n-sep`` and ``--cohesion-share`` values given (the share only under the
cohesion rule). Before separation every FLACC client trains
the one global model whatever the entities are, so the recording holds every similarity
either merge rule sees and a replay gives exactly the entities, and the similarities frozen at
separation, of the run with these settings (``FLACC.cluster_step``).

Prints one row per run, then how well the confidence separates runs with ARI = 1 from runs
with ARI < 0.9: the AUC (the chance that a good run has the higher confidence, ties half),
the lowest confidence of a good run, the highest of a bad one, and the runs that overlap.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.strategies.flacc import FLACC
from coordinator.strategies.flacc_parameters import RULES
from coordinator.strategies.quality import assess
from faultfleet.scoring import clustering_scores
from faultfleet.types import Float64Array, IntArray

GOOD_ARI = 1.0 - 1e-9
BAD_ARI = 0.9


@dataclass(frozen=True)
class Run:
    """One run's name, ground-truth agreement and confidence."""

    name: str
    ari: float
    clusters: int
    confidence: float | None
    borderline_clusters: int


def from_results(path: Path) -> Run:
    """A finished ``faultfleet sim`` run."""
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    quality = document.get("cluster_quality") or {}
    name = f"{document['strategy']} {document['scenario']} seed {document['seed']} ({path.parent})"
    return Run(
        name,
        float(document["final"]["ari"]),
        int(document["final"]["num_clusters"]),
        quality.get("confidence"),
        int(quality.get("borderline_clusters", 0)),
    )


def clustering_rounds(
    strategy: FLACC, document: dict[str, Any]
) -> Iterator[tuple[int, IntArray, Float64Array | None]]:
    """Start ``strategy`` on the recording's clients and yield each recorded round before
    separation: the round, the clients that answered and their cosines (None if none)."""
    ids = [str(c) for c in document["client_ids"]]
    strategy.initialize(ids, lambda _: np.zeros(1, dtype=np.float32))
    rng = np.random.default_rng(0)
    for record in document["rounds"]:
        strategy.configure_round(int(record["round"]), [], rng)  # separates when due
        if strategy.separated:
            return
        answered = np.asarray(record["clients"], dtype=np.intp)
        cosine = np.asarray(record["cosine"], dtype=np.float64) if len(answered) else None
        yield int(record["round"]), answered, cosine


def replay(
    path: Path,
    *,
    alpha0: float,
    n_sep: int,
    memory: int | None,
    rule: str = "cohesion",
    cohesion_share: float = 0.7,
) -> Run:
    """FLACC with these settings replayed on a recording of its clustering phase."""
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    ids = [str(c) for c in document["client_ids"]]
    strategy = FLACC(
        alpha0=alpha0, n_sep=n_sep, memory=memory, rule=rule, cohesion_share=cohesion_share
    )
    for server_round, answered, cosine in clustering_rounds(strategy, document):
        strategy.cluster_step(server_round, answered, cosine)
    labels = strategy.cluster_labels()
    truth = dict(zip(ids, (int(g) for g in document["groups"]), strict=True))
    scores = clustering_scores(truth, labels)
    quality = assess(strategy.cluster_evidence())
    setting = f"rule={rule}" + (f" share={cohesion_share}" if rule == "cohesion" else "")
    name = f"flacc replay {setting} alpha0={alpha0} n_sep={n_sep} ({path.name})"
    return Run(
        name, scores.ari, scores.num_clusters, quality.confidence, quality.borderline_clusters
    )


def separation(runs: Sequence[Run]) -> list[str]:
    """AUC, extremes and overlaps of the confidence between good and bad runs."""
    scored = [(r, r.confidence) for r in runs if r.confidence is not None]
    good = [c for r, c in scored if r.ari >= GOOD_ARI]
    bad = [c for r, c in scored if r.ari < BAD_ARI]
    lines = [
        f"runs: {len(runs)}, with a confidence: {len(scored)}, good (ARI = 1): {len(good)}, "
        f"bad (ARI < {BAD_ARI}): {len(bad)}"
    ]
    if not good or not bad:
        return [*lines, "no separation to measure (needs good and bad runs)"]
    wins = sum(1.0 if g > b else 0.5 if g == b else 0.0 for g in good for b in bad)
    lowest_good, highest_bad = min(good), max(bad)
    verdict = "separated" if highest_bad < lowest_good else "overlapping:"
    lines.append(
        f"AUC {wins / (len(good) * len(bad)):.3f}; lowest good {lowest_good:.3f}, "
        f"highest bad {highest_bad:.3f}; {verdict}"
    )
    if highest_bad >= lowest_good:
        for run, confidence in sorted(scored, key=lambda pair: pair[1]):
            extreme = run.ari >= GOOD_ARI or run.ari < BAD_ARI
            if extreme and lowest_good <= confidence <= highest_bad:
                lines.append(f"  {run.name}: ARI {run.ari:.3f}, confidence {confidence:.3f}")
    return lines


def main() -> None:
    """Parse the command line, read or replay every run, print the table and the separation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="*", type=Path, help="results.json of sim runs")
    parser.add_argument("--replay", nargs="*", type=Path, default=[], help="FLACC recordings")
    parser.add_argument("--alpha0", type=float, nargs="+", default=[0.0])
    parser.add_argument("--n-sep", type=int, nargs="+", default=[10])
    parser.add_argument("--memory", type=int, default=10)
    parser.add_argument("--rule", nargs="+", choices=RULES, default=["cohesion"])
    parser.add_argument("--cohesion-share", type=float, nargs="+", default=[0.7])
    args = parser.parse_args()
    runs = [from_results(p) for p in args.results]
    settings = [
        (rule, share)
        for rule in args.rule
        for share in (args.cohesion_share if rule == "cohesion" else [0.7])
    ]
    runs += [
        replay(p, alpha0=alpha0, n_sep=n_sep, memory=args.memory, rule=rule, cohesion_share=share)
        for p in args.replay
        for rule, share in settings
        for alpha0 in args.alpha0
        for n_sep in args.n_sep
    ]
    print("| run | clusters | ARI | confidence | borderline clusters |\n|---|---|---|---|---|")
    for r in runs:
        shown = "n/a" if r.confidence is None or math.isnan(r.confidence) else f"{r.confidence:.3f}"
        print(f"| {r.name} | {r.clusters} | {r.ari:.3f} | {shown} | {r.borderline_clusters} |")
    print()
    print("\n".join(separation(runs)))


if __name__ == "__main__":
    main()
