"""One spelling of cluster keys: ``cluster-<n>`` from one function, in every strategy."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import coordinator
from coordinator.strategies.keys import cluster_key, cluster_number
from coordinator.strategies.registry import STRATEGIES
from tests.coordinator.strategies.test_contract import factory_for, run

SOURCE = Path(coordinator.__file__).parent
KEYS_MODULE = SOURCE / "strategies" / "keys.py"


def definitions_of(name: str) -> list[Path]:
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            path
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == name
        ]
    return found


def spelt_keys(path: Path) -> list[str]:
    """String constants (docstrings aside) that spell a cluster key by hand."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and re.match(r"cluster[-/]", node.value)
    ]


def test_cluster_key_is_defined_once() -> None:
    assert definitions_of("cluster_key") == [KEYS_MODULE]


def test_no_module_spells_a_cluster_key_by_hand() -> None:
    spelt = {
        str(path.relative_to(SOURCE)): keys
        for path in sorted(SOURCE.rglob("*.py"))
        if path != KEYS_MODULE and (keys := spelt_keys(path))
    }

    # the one exception: the old spelling of FedAC's centres, to read old checkpoints
    assert spelt == {"strategies/fedac_centres.py": ["cluster/"]}


def test_cluster_number_reads_what_cluster_key_wrote() -> None:
    assert [cluster_number(cluster_key(n)) for n in (0, 7, 12)] == [0, 7, 12]
    with pytest.raises(ValueError, match="not a cluster key"):
        cluster_number("cluster/3")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_keys_its_cluster_models_alike(name: str) -> None:
    engine = run(factory_for(name)(), 6)

    keys = list(engine.strategy.models)
    clustered = [k for k in keys if k.startswith("cluster")]
    assert all(re.fullmatch(r"cluster-\d+", k) for k in clustered), keys
    assert all(
        k.startswith(("cluster-", "client/", "c")) or k in {"global", "embedding"} for k in keys
    )
