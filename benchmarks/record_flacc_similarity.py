"""Record what FLACC's clustering phase sees, so that it can be replayed with other settings.

Usage: python benchmarks/record_flacc_similarity.py --out REC.json --seed 100
       [--profile quick] [--fleet twelve-groups] [--rounds 40] [--threads 1]

Runs ``faultfleet sim``'s federation and engine for FLACC with separation switched off
(``n_sep`` larger than the run), so that every round trains the one global model, and
writes per round the registration indices of the clients that answered and the cosine
similarities of their updates (FLACC eq. 19), read back from the strategy's α and τ
matrices (the pairs whose τ is this round), with the true group of every client.
Before separation FLACC's clients train the global model whatever the entities are, so
``quality_separation.py --replay`` rebuilds from this file the entities, and the
similarities frozen at separation, of a run with any α0, N_sep and memory T.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coordinator.strategies.flacc import FLACC
from faultfleet_apps.simulation.config import profile
from faultfleet_apps.simulation.robustness import Fleet, fleet_named
from faultfleet_apps.simulation.runner import build_federation, make_engine

NEVER = 1_000_000
"""An ``n_sep`` no run reaches: the recording covers every round of the clustering phase."""


def answered_this_round(strategy: FLACC, server_round: int) -> tuple[list[int], list[list[float]]]:
    """The clients whose pairs FLACC updated in ``server_round``, and their cosines.

    Returns
    -------
    clients : list of int
        Registration indices, ascending; empty when fewer than two clients answered.
    cosine : list of list of float, shape (k, k)
        Eq. 19 between them (1 on the diagonal).
    """
    fresh = strategy.tau_ == server_round
    np.fill_diagonal(fresh, False)
    clients = np.flatnonzero(fresh.any(axis=1))
    cosine = strategy.alpha_[np.ix_(clients, clients)].copy()
    np.fill_diagonal(cosine, 1.0)
    return [int(c) for c in clients], np.round(cosine, 6).tolist()


def record(
    seed: int, profile_name: str, rounds: int | None, fleet: Fleet | None = None
) -> dict[str, Any]:
    """Run the clustering phase of ``profile_name`` for ``seed`` on ``fleet`` (default: the
    profile's scenario, mixed-fault) and return the recording."""
    where: dict[str, Any] = {}
    if fleet is not None:
        where = {"scenario": fleet.scenario, "groups": fleet.groups or None}
    settings = {"strategy": "flacc", "seed": seed, "rounds": rounds, "eval_every": NEVER}
    config = profile(profile_name, **settings, **where)
    options = {**config.strategy_options, "n_sep": NEVER}
    config = profile(profile_name, **settings, **where, strategy_options=options)
    federation = build_federation(config)
    engine = make_engine(config, federation)
    strategy = engine.strategy
    if not isinstance(strategy, FLACC):
        raise TypeError(f"expected FLACC, the profile built {type(strategy).__name__}")
    rounds_seen: list[dict[str, Any]] = []
    while engine.server_round < config.rounds:
        report = engine.run_round()
        clients, cosine = answered_this_round(strategy, report.server_round)
        rounds_seen.append({"round": report.server_round, "clients": clients, "cosine": cosine})
    truth = {c.client_id: c.group for c in federation.clients}
    return {
        "strategy": "flacc",
        "seed": seed,
        "profile": profile_name,
        "fleet": "mixed-fault" if fleet is None else fleet.name,
        "options": options,
        "client_ids": list(strategy.client_ids_),
        "groups": [truth[c] for c in strategy.client_ids_],
        "rounds": rounds_seen,
    }


def main() -> None:
    """Parse the command line, record, write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="recording to write (JSON)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--profile", default="quick")
    parser.add_argument(
        "--fleet",
        default=None,
        help="a named fleet of the robustness benchmark (default: the profile's mixed-fault)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="default: the profile's")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fleet = None if args.fleet is None else fleet_named(args.fleet)
    document = record(args.seed, args.profile, args.rounds, fleet)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document), encoding="utf-8")
    print(f"wrote {args.out}: {len(document['rounds'])} rounds")


if __name__ == "__main__":
    main()
