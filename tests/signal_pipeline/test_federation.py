from __future__ import annotations

import numpy as np
import pytest

from signal_pipeline.federation import (
    Dataset,
    Federation,
    gaussian_noise,
    label_group_skew,
    with_feature_noise,
    with_input_transform,
    with_label_permutation,
    with_quantity_skew,
)


def _pool(n_per_label: int = 60, n_labels: int = 6) -> tuple[np.ndarray, np.ndarray]:
    y = np.repeat(np.arange(n_labels), n_per_label).astype(np.int64)
    # Each sample's value encodes its index, so tests can tell samples apart.
    x = np.arange(y.size, dtype=np.float32).reshape(-1, 1, 1) * np.ones((1, 1, 4), np.float32)
    return x, y


def _federation(seed: int = 0) -> Federation:
    x, y = _pool()
    return label_group_skew(
        x, y, [(0, 1), (2, 3), (4, 5)], 3, (20, 30), np.random.default_rng(seed)
    )


def test_clients_hold_only_their_group_labels_and_no_sample_twice() -> None:
    federation = _federation()

    seen: list[float] = []
    for client in federation.clients:
        expected = {(0, 1), (2, 3), (4, 5)}
        labels = set(np.unique(np.concatenate([d.y for d in client.splits().values()])).tolist())
        assert labels <= set(sorted(expected)[client.group])
        assert 20 <= sum(len(d) for d in client.splits().values()) <= 30
        seen.extend(float(v) for d in client.splits().values() for v in d.x[:, 0, 0])
    assert len(seen) == len(set(seen))
    np.testing.assert_array_equal(federation.groups, np.repeat([0, 1, 2], 3))


def test_same_seed_same_federation() -> None:
    first, again, other = _federation(1), _federation(1), _federation(2)

    for a, b in zip(first.clients, again.clients, strict=True):
        np.testing.assert_array_equal(a.train.x, b.train.x)
    assert any(
        not np.array_equal(a.train.x, b.train.x)
        for a, b in zip(first.clients, other.clients, strict=True)
    )


def test_pool_exhaustion_is_reported() -> None:
    x, y = _pool(n_per_label=10)

    with pytest.raises(ValueError, match="too few samples left"):
        label_group_skew(x, y, [(0, 1)], 5, (20, 20), np.random.default_rng(0))


def test_quantity_skew_shrinks_only_the_chosen_clients() -> None:
    federation = _federation()

    skewed = with_quantity_skew(federation, [0, 4], 0.25, np.random.default_rng(0), group=9)

    for i, (before, after) in enumerate(zip(federation.clients, skewed.clients, strict=True)):
        if i in (0, 4):
            assert len(after.train) == max(1, round(0.25 * len(before.train)))
            assert after.group == 9
        else:
            assert after is before
    assert len(federation.clients[0].train) > len(skewed.clients[0].train)


def test_feature_noise_changes_inputs_not_labels() -> None:
    federation = _federation()

    noisy = with_feature_noise(federation, [1], gaussian_noise(0.5), np.random.default_rng(0))

    before, after = federation.clients[1], noisy.clients[1]
    np.testing.assert_array_equal(before.test.y, after.test.y)
    residual = after.train.x - before.train.x
    assert residual.std() == pytest.approx(0.5, rel=0.2)
    assert after.train.x.dtype == np.float32


def test_label_permutation_swaps_the_named_classes() -> None:
    federation = _federation()

    swapped = with_label_permutation(federation, [0], {0: 1, 1: 0}, group=7)

    before, after = federation.clients[0], swapped.clients[0]
    np.testing.assert_array_equal(after.train.y, 1 - before.train.y)
    assert after.group == 7
    assert swapped.clients[3] is federation.clients[3]


def test_label_permutation_must_be_a_bijection() -> None:
    with pytest.raises(ValueError, match="not a bijection"):
        with_label_permutation(_federation(), [0], {0: 1})


def test_input_transform_hook_applies_to_every_split() -> None:
    federation = _federation()

    flipped = with_input_transform(
        federation, [2], lambda x, _rng: x[..., ::-1].copy(), np.random.default_rng(0)
    )

    for name, data in flipped.clients[2].splits().items():
        np.testing.assert_array_equal(data.x, federation.clients[2].splits()[name].x[..., ::-1])


def test_input_transform_must_keep_the_shape() -> None:
    with pytest.raises(ValueError, match="must keep the shape"):
        with_input_transform(
            _federation(), [0], lambda x, _rng: x[..., :2], np.random.default_rng(0)
        )


def test_out_of_range_clients_are_named() -> None:
    with pytest.raises(ValueError, match=r"client indices \[99\] out of range"):
        with_quantity_skew(_federation(), [99], 0.5, np.random.default_rng(0))


def test_dataset_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="Dataset needs x of shape"):
        Dataset(np.zeros((3, 4), np.float32), np.zeros(2, np.int64))
