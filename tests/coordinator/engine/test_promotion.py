"""The promotion gate's decision (pure logic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.engine.promotion import Decision, decide
from faultfleet.tasks import EvaluateResult


def _results(accuracies: dict[str, float], key: str = "m") -> list[EvaluateResult]:
    return [EvaluateResult(agent, key, acc, 0.5, 10) for agent, acc in accuracies.items()]


def test_a_cluster_without_a_serving_version_promotes_its_first_candidate() -> None:
    figures = decide([], None, margin=0.0)

    assert figures.decision is Decision.PROMOTED
    assert figures.candidate_accuracy is None


@pytest.mark.parametrize(
    ("candidate", "serving", "margin", "decision"),
    [
        (0.90, 0.80, 0.0, Decision.PROMOTED),  # better
        (0.80, 0.80, 0.0, Decision.PROMOTED),  # equal is not worse
        (0.79, 0.80, 0.02, Decision.PROMOTED),  # worse within the margin
        (0.77, 0.80, 0.02, Decision.REJECTED),  # worse beyond the margin
        (0.10, 0.90, 0.5, Decision.REJECTED),
    ],
)
def test_the_candidate_passes_unless_worse_beyond_the_margin(
    candidate: float, serving: float, margin: float, decision: Decision
) -> None:
    figures = decide(
        _results({"a": candidate, "b": candidate}),
        _results({"a": serving, "b": serving}),
        margin=margin,
        serving_version=3,
    )

    assert figures.decision is decision
    assert figures.candidate_accuracy == pytest.approx(candidate)
    assert figures.serving_accuracy == pytest.approx(serving)
    assert figures.serving_version == 3
    assert figures.agents == ("a", "b")
    assert figures.num_samples == 20


def test_only_agents_that_scored_both_versions_are_compared() -> None:
    # c scored only the candidate (perfectly): counting it would hide a worse candidate
    figures = decide(
        _results({"a": 0.5, "b": 0.5, "c": 1.0}), _results({"a": 0.9, "b": 0.9}), margin=0.1
    )

    assert figures.decision is Decision.REJECTED
    assert figures.agents == ("a", "b")
    assert figures.candidate_accuracy == pytest.approx(0.5)


def test_one_agent_reporting_full_marks_cannot_carry_a_worse_candidate() -> None:
    # Prepare: four agents measure the candidate 0.2 below the serving version; a fifth, a
    # poisoning gateway, reports 1.0 for the candidate and 0.0 for the serving version
    honest_candidate = {"a": 0.60, "b": 0.55, "c": 0.62, "d": 0.58}
    honest_serving = {"a": 0.80, "b": 0.76, "c": 0.81, "d": 0.79}

    # Execute
    figures = decide(
        _results({**honest_candidate, "gw": 1.0}),
        _results({**honest_serving, "gw": 0.0}),
        margin=0.02,
    )

    # Assert: a plain mean would have said 0.67 against 0.632 and promoted it
    assert figures.decision is Decision.REJECTED
    assert figures.candidate_accuracy == pytest.approx((0.60 + 0.62 + 0.58) / 3)
    assert figures.serving_accuracy == pytest.approx((0.80 + 0.76 + 0.79) / 3)


def test_a_candidate_nobody_could_score_is_rejected() -> None:
    figures = decide([], _results({"a": 0.9}), margin=0.1, serving_version=1)

    assert figures.decision is Decision.REJECTED
    assert "no agent evaluated" in figures.reason


@pytest.mark.parametrize("margin", [-0.1, 1.5, float("nan")])
def test_a_margin_that_is_not_a_ratio_is_refused(margin: float) -> None:
    with pytest.raises(ValueError, match="margin"):
        decide([], None, margin=margin)


@given(
    st.lists(st.floats(0, 1), min_size=1, max_size=6),
    st.floats(0, 1),
    st.floats(0, 0.5),
)
def test_the_serving_version_itself_always_passes(
    accuracies: list[float], shift: float, margin: float
) -> None:
    # a candidate at least as good as the serving version on every agent is never rejected
    serving = {f"a{i}": acc for i, acc in enumerate(accuracies)}
    better = {a: min(1.0, acc + shift) for a, acc in serving.items()}

    figures = decide(_results(better), _results(serving), margin=margin)

    assert figures.decision is Decision.PROMOTED
