"""JGL's probe under sketches taking each device's answer as it arrives
(coordinator.strategies.jgl_probe): the list's identities, metrics and evidence in any
arrival order and from several threads, no gradient kept unless ``reference="gradient"``
needs it, and every answer that does not fit the probe refused on its own. The hand-made
clients of :mod:`jgl_helpers`."""

from __future__ import annotations

import json
import re
import threading

import numpy as np
import pytest

from coordinator.strategies.base import StrategyState
from coordinator.strategies.jgl import JointGradientLoss
from coordinator.strategies.jgl_probe import GradientProbe
from coordinator.strategies.known_pairs import KnownPairs
from faultfleet.tasks import Failure, FitResult, GradientResult
from tests.coordinator.strategies.jgl_helpers import (
    CLIENTS,
    KEYS,
    UPDATES,
    ZERO,
    answer,
    make_jgl,
    probe,
    with_updates,
)

B1_GRADIENTS = [[0.2, 0.0, 0.0], [0.0, -2.0, 0.1], [0.0, 0.0, -1.0]]
ANSWERS = [
    answer("a0", [0.5, 0.9, 0.9], [[-2.0, 0.1, 0.0], [0.3, -0.2, 0.0], ZERO]),
    answer("a1", [0.4, 0.9, 0.8], [[-1.0, 0.0, 0.2], [0.0, 0.4, 0.0], [0.1, 0.0, 0.0]]),
    answer("b0", [0.9, 0.9, 0.2], [ZERO, [0.0, -1.0, 0.0], [0.0, 0.0, -3.0]]),
    answer("b1", [0.9, 0.3, 0.9], B1_GRADIENTS),
]
NOBODY_IN_1 = [*ANSWERS[:3], answer("b1", [0.9, 0.9, 0.3], B1_GRADIENTS)]
"""b1 chooses cluster 2 too: nobody chooses cluster 1, and the empty-cluster fix moves a
device into it."""


def evidence(strategy: JointGradientLoss) -> np.ndarray:
    matrix = strategy.cluster_evidence().similarity_matrix()
    assert matrix is not None
    return matrix


def streamed_probe(
    strategy: JointGradientLoss, server_round: int, answers: list[GradientResult]
) -> GradientProbe:
    request = strategy.configure_probe(server_round, 0, CLIENTS, np.random.default_rng(0))
    assert request is not None
    stream = strategy.open_probe_stream(server_round, 0)
    assert stream is not None
    for result in answers:
        stream.add(result)
    strategy.aggregate_probe_stream(server_round, 0, stream, [])
    return stream


@pytest.mark.parametrize("similarity_used", [False, True])
def test_a_streamed_probe_gives_the_lists_identities_metrics_and_evidence(
    similarity_used: bool,
) -> None:
    # Prepare: one strategy takes the list, one the stream in reverse arrival order, one
    # compares exactly (identities do not depend on the sketch)
    listed, streamed = make_jgl(pairwise="sketch"), make_jgl(pairwise="sketch")
    exact = make_jgl(pairwise="exact")
    if similarity_used:
        for strategy in (listed, streamed, exact):
            with_updates(strategy, UPDATES)

    # Execute
    probe(listed, 1, ANSWERS)
    probe(exact, 1, ANSWERS)
    streamed_probe(streamed, 1, list(reversed(ANSWERS)))

    # Assert
    assert streamed.choices_ == listed.choices_ == exact.choices_
    assert list(streamed.choices_) == list(CLIENTS)  # client order, not arrival order
    assert streamed.round_metrics() == listed.round_metrics()
    assert streamed.round_metrics()["similarity_used"] == float(similarity_used)
    np.testing.assert_array_equal(evidence(streamed), evidence(listed))
    assert not np.isnan(evidence(streamed)[0, 1])
    np.testing.assert_allclose(evidence(streamed), evidence(exact), atol=0.5)
    assert exact.open_probe_stream(1, 0) is None


@pytest.mark.parametrize(("answers", "unchosen"), [(ANSWERS, set()), (NOBODY_IN_1, {1})])
def test_the_stream_keeps_sketches_only_unless_the_reference_is_the_gradient(
    answers: list[GradientResult], unchosen: set[int]
) -> None:
    # Prepare
    by_update, by_gradient = (
        make_jgl(pairwise="sketch"),
        make_jgl(pairwise="sketch", reference="gradient"),
    )

    # Execute
    kept_update = streamed_probe(by_update, 1, answers).answers()
    kept_gradient = streamed_probe(by_gradient, 1, answers).answers()

    # Assert: under the gradient reference each device keeps its identity's gradient and
    # those of the clusters nobody chose (where the empty-cluster fix may move it)
    dim = by_update.comparer_.sketcher.dim  # type: ignore[union-attr]
    assert set(range(len(KEYS))) - set(by_gradient.choices_.values()) == unchosen
    for client in CLIENTS:
        assert kept_update[client].gradients is None
        assert kept_update[client].sketches.shape == (len(KEYS), dim)
        gradients = kept_gradient[client].gradients
        assert gradients is not None
        assert set(gradients) == {by_gradient.choices_[client]} | unchosen
        sent = answers[CLIENTS.index(client)].gradients
        for k, gradient in gradients.items():
            np.testing.assert_array_equal(gradient, sent[KEYS[k]])
    assert by_update.probe_gradients_ == {}
    assert sorted(by_gradient.probe_gradients_) == list(CLIENTS)


@pytest.mark.parametrize("answers", [ANSWERS, NOBODY_IN_1])
def test_a_streamed_probe_trains_the_lists_models_under_the_gradient_reference(
    answers: list[GradientResult],
) -> None:
    # Prepare: probe, plan and train two rounds each way; round 2 uses the similarity
    listed = make_jgl(pairwise="sketch", reference="gradient")
    exact = make_jgl(pairwise="exact", reference="gradient")
    streamed = make_jgl(pairwise="sketch", reference="gradient")
    fixes = 0.0

    # Execute
    for server_round in (1, 2):
        probe(listed, server_round, answers)
        probe(exact, server_round, answers)
        streamed_probe(streamed, server_round, list(reversed(answers)))
        for strategy in (listed, exact, streamed):
            plan = strategy.configure_round(server_round, CLIENTS, np.random.default_rng(1))
            results = []
            for instruction in plan:
                (key,) = instruction.model_keys
                base = strategy.models[key]
                moved = base + np.float32(0.1 * server_round)
                results.append(
                    FitResult(instruction.client_id, key, moved, None, 3, 0.2, base=base)
                )
            strategy.aggregate_round(server_round, results, [])
        fixes += streamed.round_metrics()["empty_cluster_fixes"]

    # Assert: with nobody in cluster 1 a device was moved there, and its gradient was kept
    assert (fixes > 0) == (answers is NOBODY_IN_1)
    assert streamed.cluster_labels() == listed.cluster_labels() == exact.cluster_labels()
    np.testing.assert_array_equal(streamed.last_update_, exact.last_update_)
    for key in KEYS:
        np.testing.assert_allclose(streamed.models[key], exact.models[key], atol=1e-6)


def test_answers_from_several_threads_give_the_same_probe() -> None:
    # Prepare
    alone, threaded = make_jgl(pairwise="sketch"), make_jgl(pairwise="sketch")
    with_updates(alone, UPDATES)
    with_updates(threaded, UPDATES)
    streamed_probe(alone, 1, ANSWERS)
    threaded.configure_probe(1, 0, CLIENTS, np.random.default_rng(0))
    stream = threaded.open_probe_stream(1, 0)
    assert stream is not None

    # Execute: every answer from its own thread, all released at once
    start = threading.Barrier(len(ANSWERS))

    def send(result: GradientResult) -> None:
        start.wait()
        stream.add(result)

    threads = [threading.Thread(target=send, args=(r,)) for r in ANSWERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    threaded.aggregate_probe_stream(1, 0, stream, [])

    # Assert
    assert stream.answered() == frozenset(CLIENTS)
    assert threaded.choices_ == alone.choices_
    np.testing.assert_array_equal(evidence(threaded), evidence(alone))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (answer("zz", [0.1, 0.2, 0.3], [ZERO, ZERO, ZERO]), "'zz', which was not probed"),
        (ANSWERS[0], "'a0' answered the probe more than once"),
        (
            GradientResult("a1", {"cluster-0": 0.1}, {"cluster-0": np.zeros(3, np.float32)}, 4),
            "answered for models ['cluster-0'], expected",
        ),
        (
            GradientResult(
                "a1",
                dict.fromkeys(KEYS, 0.1),
                {k: np.zeros(4 if k == "cluster-2" else 3, np.float32) for k in KEYS},
                4,
            ),
            "gradient of shape (4,) for 'cluster-2', expected (3,)",
        ),
    ],
)
def test_the_stream_refuses_an_answer_that_does_not_fit_the_probe(
    bad: GradientResult, message: str
) -> None:
    # Prepare: a0 answered already
    strategy = make_jgl(pairwise="sketch")
    strategy.configure_probe(1, 0, CLIENTS, np.random.default_rng(0))
    stream = strategy.open_probe_stream(1, 0)
    assert stream is not None
    stream.add(ANSWERS[0])

    # Execute / Assert
    with pytest.raises(ValueError, match=re.escape(message)):
        stream.add(bad)
    assert stream.answered() == frozenset({"a0"})
    stream.add(ANSWERS[2])  # the stream goes on taking the others
    strategy.aggregate_probe_stream(1, 0, stream, [])
    assert sorted(strategy.choices_) == ["a0", "b0"]


def test_a_probe_stream_is_only_for_the_probe_sent() -> None:
    strategy = make_jgl(pairwise="sketch")
    strategy.configure_probe(3, 0, CLIENTS, np.random.default_rng(0))
    assert strategy.open_probe_stream(2, 0) is None
    assert strategy.open_probe_stream(3, 1) is None
    stream = strategy.open_probe_stream(3, 0)
    assert stream is not None
    with pytest.raises(ValueError, match="round 2 step 0, but the probe sent was round 3"):
        strategy.aggregate_probe_stream(2, 0, stream, [])


# -- the probe's evidence under sketches: sampled pairs of the last probes -------------------

MANY = tuple(f"d{i:03d}" for i in range(60))


def many_devices(**options: object) -> JointGradientLoss:
    strategy = JointGradientLoss(fraction=1.0, n_clusters=3, batch_size=4, **options)  # type: ignore[arg-type]
    strategy.initialize(MANY, lambda k: np.full(3, float(k), dtype=np.float32))
    return strategy


def many_answers(seed: int) -> list[GradientResult]:
    rng = np.random.default_rng(seed)
    return [
        answer(c, [0.5, 0.5, 0.5], rng.normal(size=(3, 3)).astype(np.float32).tolist())
        for c in MANY
    ]


def probe_many(strategy: JointGradientLoss, server_round: int) -> GradientProbe | None:
    """A probe of every device, streamed under sketches, as a list otherwise."""
    strategy.configure_probe(server_round, 0, MANY, np.random.default_rng(0))
    stream = strategy.open_probe_stream(server_round, 0)
    if stream is None:
        strategy.aggregate_probe(server_round, 0, many_answers(server_round), [])
        return None
    for result in many_answers(server_round):
        stream.add(result)
    strategy.aggregate_probe_stream(server_round, 0, stream, [])
    return stream


def known_pairs(strategy: JointGradientLoss) -> set[tuple[int, int]]:
    rows, columns = np.nonzero(~np.isnan(evidence(strategy)))
    return {(int(a), int(b)) for a, b in zip(rows, columns, strict=True)}


def test_a_large_probe_keeps_sampled_pairs_with_the_sketches_cosines() -> None:
    # Prepare / Execute: 60 devices, more than 32 partners + 1
    strategy = many_devices(pairwise="sketch")
    stream = probe_many(strategy, 1)
    assert stream is not None

    # Assert: each device has 32 partners (not 59) and their mean sketch cosines
    known = strategy.cluster_evidence().similarity
    assert isinstance(known, KnownPairs)
    assert len(known) == 60 * 32 // 2
    assert strategy.evidence_.matrix.size == 0  # no m × m matrix
    kept = stream.answers()
    matrix = evidence(strategy)
    rows, cols = np.nonzero(~np.isnan(matrix))
    for i, j in zip(rows[:40], cols[:40], strict=True):
        a, b = kept[MANY[i]].sketches, kept[MANY[j]].sketches
        expected = np.mean([float(np.dot(a[k], b[k])) for k in range(3)])
        assert matrix[i, j] == pytest.approx(expected, abs=1e-6)
    exact = many_devices(pairwise="exact")
    probe_many(exact, 1)
    assert isinstance(exact.cluster_evidence().similarity, np.ndarray)
    assert np.count_nonzero(~np.isnan(evidence(exact))) == 60 * 59


def test_sampled_pairs_older_than_the_memory_are_forgotten() -> None:
    # Prepare / Execute: devices 0-29 probed in round 1 only, every device from round 2 on
    strategy = many_devices(pairwise="sketch")
    memory = strategy.evidence_.pairs.memory  # type: ignore[union-attr]
    strategy.configure_probe(1, 0, MANY[:30], np.random.default_rng(0))
    stream = strategy.open_probe_stream(1, 0)
    assert stream is not None
    for result in many_answers(1)[:30]:
        stream.add(result)
    strategy.aggregate_probe_stream(1, 0, stream, [])
    first_probe = known_pairs(strategy)
    for server_round in range(2, memory + 2):
        probe_many(strategy, server_round)

    # Assert: round 1's pairs not measured again are gone after `memory` more probes
    now = known_pairs(strategy)
    assert len(first_probe) == 30 * 29
    assert first_probe - now  # some were not sampled again and have been forgotten
    pairs = strategy.evidence_.pairs
    assert pairs is not None
    assert int(pairs.pairs_.measured.min()) >= 2


def test_sampled_pairs_survive_a_restart_and_follow_devices_that_leave() -> None:
    # Prepare: two probes, then a restart
    strategy = many_devices(pairwise="sketch")
    probe_many(strategy, 1)
    probe_many(strategy, 2)
    state = strategy.state_dict()
    assert "extra/similarity" not in state.arrays
    assert "extra/pairs_first" in state.arrays
    restored = many_devices(pairwise="sketch")

    # Execute
    restored.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )
    before = evidence(restored)
    restored.remove_clients(["d000", "d007"])

    # Assert
    np.testing.assert_array_equal(before, evidence(strategy))
    kept = [i for i in range(60) if i not in (0, 7)]
    np.testing.assert_array_equal(evidence(restored), before[np.ix_(kept, kept)])


def test_a_state_saved_with_the_matrix_loads_as_pairs() -> None:
    # Prepare: a sketch-mode state in the format before sampled pairs (an m × m matrix)
    strategy = many_devices(pairwise="sketch")
    state = strategy.state_dict()
    arrays = {k: v for k, v in state.arrays.items() if not k.startswith("extra/pairs_")}
    del arrays["extra/last_round"]
    matrix = np.full((60, 60), np.nan)
    matrix[3, 5] = matrix[5, 3] = 0.25
    arrays["extra/similarity"] = matrix

    # Execute
    strategy.load_state_dict(StrategyState(arrays, json.loads(json.dumps(state.meta))))

    # Assert
    known = evidence(strategy)
    assert known[3, 5] == known[5, 3] == 0.25
    assert np.count_nonzero(~np.isnan(known)) == 2


@pytest.mark.parametrize("pairwise", ["exact", "sketch"])
@pytest.mark.parametrize("answering", [0, 1])
def test_a_probe_that_almost_nobody_answered_places_who_did(pairwise: str, answering: int) -> None:
    # Prepare: every device probed, all but `answering` of them failed
    strategy = make_jgl(pairwise=pairwise)
    failures = [Failure(c, "offline") for c in CLIENTS[answering:]]

    # Execute
    probe(strategy, 1, ANSWERS[:answering], failures)

    # Assert: no pair to compare, who answered is placed, the failures are counted
    assert sorted(strategy.choices_) == list(CLIENTS[:answering])
    assert strategy.round_metrics()["probe_failures"] == float(len(failures))
    assert np.isnan(evidence(strategy)).all()
