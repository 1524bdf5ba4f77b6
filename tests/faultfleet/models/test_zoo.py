"""The model zoo: shapes, parameter counts, FLOPs, seeding, vmap and error messages."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call, vmap

from faultfleet.models.flops import count_flops, flops_per_layer
from faultfleet.models.weights import flatten_weights, parameter_count, split_weights
from faultfleet.models.zoo import (
    MODEL_NAMES,
    ModelInfo,
    build_model,
    default_sample_shape,
    describe_model,
)

SHAPES_PER_MODEL: dict[str, list[tuple[int, ...]]] = {
    "paper": [(1, 1024), (1, 256), (2, 500)],
    "compact": [(1, 1024), (1, 256), (1, 1000), (3, 2048)],
    "flacc-cnn2d": [(1, 28, 28), (3, 32, 32), (1, 8, 8)],
    "cnn-jgl": [(1, 28, 28), (3, 32, 32), (1, 8, 8)],
    "cnn-jgl-cifar": [(3, 32, 32), (1, 28, 28)],
    "mlp-faacl": [(1, 28, 28), (64,), (1, 1024)],
    "mlp-faacl-512": [(1, 28, 28), (3, 32, 32)],
    "mlp-faacl-femnist": [(1, 28, 28)],
    "mlp-jgl": [(1, 28, 28), (1, 8, 8)],
    "mlp-jgl-cifar": [(3, 32, 32)],
}
CASES = [(name, shape) for name, shapes in SHAPES_PER_MODEL.items() for shape in shapes]


def test_every_registered_model_has_shapes_to_test() -> None:
    assert set(SHAPES_PER_MODEL) == set(MODEL_NAMES)


@pytest.mark.parametrize(("name", "sample_shape"), CASES)
def test_model_maps_a_batch_to_logits(name: str, sample_shape: tuple[int, ...]) -> None:
    # Prepare
    model = build_model(name, sample_shape, 7)
    x = torch.randn(3, *sample_shape, generator=torch.Generator().manual_seed(0))

    # Execute
    logits = model(x)

    # Assert
    assert logits.shape == (3, 7)
    assert logits.dtype == torch.float32
    assert bool(torch.isfinite(logits).all())


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_holds_no_buffers(name: str) -> None:
    model = build_model(name, default_sample_shape(name), 10)

    assert list(model.buffers()) == []


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_splits_into_features_and_classifier(name: str) -> None:
    model = build_model(name, default_sample_shape(name), 10)

    prefixes = {key.split(".")[0] for key, _ in model.named_parameters()}

    assert prefixes == {"features", "classifier"}


def test_paper_parameter_count_matches_hand_count() -> None:
    # conv1  64·1·5 + 64                     =       384
    # conv2  128·64·5 + 128                  =    41 088
    # conv3  256·128·5 + 256                 =   164 096
    # length 1024 → 512 → 256 → 128 after the pools (padding 2 keeps it through the convs)
    # fc1    (256·128)·128 + 128             = 4 194 432
    # fc2    128·64 + 64                     =     8 256
    # out    64·12 + 12                      =       780
    # total                                  = 4 409 036
    model = build_model("paper", (1, 1024), 12)

    assert parameter_count(model) == 4_409_036


def test_compact_parameter_count_matches_hand_count() -> None:
    # conv 1→16 k=64: 1 040; 16→32 k=3: 1 568; 32→64: 6 208; 64→64: 12 352 (twice)
    # length 1024 → 128 (stride 8) → 64 → 32 → 16 → 8 → 4; dense 256→100: 25 700; out 1 212
    model = build_model("compact", (1, 1024), 12)

    count = parameter_count(model)

    assert count == 60_432
    assert 30_000 <= count <= 80_000


@pytest.mark.parametrize(
    ("sample_shape", "expected"),
    [
        # 832 + 51 264 + (7·7·64)·512 + 512 + 512·10 + 10: the FedAvg CNN of McMahan et al.
        ((1, 28, 28), 1_663_370),
        # 3·25·32 + 32 = 2 432; 51 264; (8·8·64)·512 + 512 = 2 097 664; 5 130
        ((3, 32, 32), 2_156_490),
        # 832 + 51 264 + (2·2·64)·512 + 512 + 5 130
        ((1, 8, 8), 188_810),
    ],
)
def test_flacc_cnn2d_parameter_count_matches_hand_count(
    sample_shape: tuple[int, ...], expected: int
) -> None:
    model = build_model("flacc-cnn2d", sample_shape, 10)

    assert parameter_count(model) == expected


@pytest.mark.parametrize(
    ("name", "n_classes", "expected"),
    [
        ("mlp-faacl", 10, 101_770),  # FAACL Table 5, MNIST
        ("mlp-faacl-512", 10, 407_050),  # FAACL Table 5, EMNIST and FASHION
        ("mlp-faacl-femnist", 62, 434_752 + 64 * 62 + 62),  # Table 5 omits the output layer
        ("mlp-jgl", 8, 785 * 512 + 513 * 128 + 129 * 8),
    ],
)
def test_mlp_parameter_count_matches_the_paper(name: str, n_classes: int, expected: int) -> None:
    model = build_model(name, (1, 28, 28), n_classes)

    assert parameter_count(model) == expected


def test_same_seed_gives_identical_weights_and_other_seeds_differ() -> None:
    # Execute
    first = flatten_weights(build_model("compact", (1, 1024), 12, seed=3))
    again = flatten_weights(build_model("compact", (1, 1024), 12, seed=3))
    other = flatten_weights(build_model("compact", (1, 1024), 12, seed=4))

    # Assert
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_building_leaves_the_global_random_state_untouched() -> None:
    # Prepare
    torch.manual_seed(123)
    state = torch.get_rng_state()

    # Execute
    build_model("flacc-cnn2d", (1, 28, 28), 10, seed=5)

    # Assert
    assert torch.equal(torch.get_rng_state(), state)


def test_initialisation_is_he_normal_with_zero_biases() -> None:
    model = build_model("mlp-faacl-512", (1, 28, 28), 10)
    hidden = model.get_parameter("features.1.weight").detach()
    biases = [p.detach() for name, p in model.named_parameters() if name.endswith("bias")]

    assert float(hidden.std()) == pytest.approx((2 / 784) ** 0.5, rel=0.05)
    assert all(bool((bias == 0).all()) for bias in biases)


@pytest.mark.parametrize(
    ("name", "sample_shape"), [("compact", (1, 512)), ("flacc-cnn2d", (1, 8, 8)), ("mlp-jgl", (5,))]
)
def test_vmapped_functional_call_matches_each_model(
    name: str, sample_shape: tuple[int, ...]
) -> None:
    # Prepare: two clients' weights stacked as (2, n_params), one shared batch
    models = [build_model(name, sample_shape, 4, seed=seed) for seed in (0, 1)]
    stack = torch.from_numpy(np.stack([flatten_weights(m) for m in models]))
    x = torch.randn(6, *sample_shape, generator=torch.Generator().manual_seed(0))

    def forward(params: dict[str, torch.Tensor], batch: torch.Tensor) -> torch.Tensor:
        return functional_call(models[0], params, (batch,))  # type: ignore[no-any-return]

    # Execute
    logits = vmap(forward, in_dims=(0, None))(split_weights(models[0], stack), x)

    # Assert
    assert logits.shape == (2, 6, 4)
    for index, model in enumerate(models):
        torch.testing.assert_close(logits[index], model(x))


@pytest.mark.parametrize(
    ("layer", "sample_shape", "expected"),
    [
        (nn.Linear(7, 5), (7,), 2 * 7 * 5),
        # L_out = (20 + 2·1 − 5) // 2 + 1 = 9; 2 · C_in · k · C_out · L_out
        (nn.Conv1d(3, 4, 5, stride=2, padding=1), (3, 20), 2 * 3 * 5 * 4 * 9),
        # 6 × 6 → 4 × 4; 2 · C_in · k_h · k_w · C_out · H_out · W_out
        (nn.Conv2d(2, 3, 3), (2, 6, 6), 2 * 2 * 9 * 3 * 16),
        (nn.ReLU(), (4, 10), 40),
        (nn.MaxPool1d(2), (4, 10), 4 * 5 * 1),
        (nn.MaxPool2d(2), (2, 6, 6), 2 * 9 * 3),
        (nn.Flatten(), (2, 6, 6), 0),
    ],
)
def test_single_layer_flops_match_the_formula(
    layer: nn.Module, sample_shape: tuple[int, ...], expected: int
) -> None:
    assert count_flops(layer, sample_shape) == expected


def test_paper_flops_match_hand_count() -> None:
    convs = 2 * (1 * 5 * 64 * 1024 + 64 * 5 * 128 * 512 + 128 * 5 * 256 * 256)
    dense = 2 * (256 * 128 * 128 + 128 * 64 + 64 * 12)
    relus = 64 * 1024 + 128 * 512 + 256 * 256 + 128 + 64
    pools = 64 * 512 + 128 * 256 + 256 * 128  # one comparison per output of a window of 2
    model = build_model("paper", (1, 1024), 12)

    layers = flops_per_layer(model, (1, 1024))

    assert sum(layer.flops for layer in layers) == convs + dense + relus + pools
    assert layers[-1].output_shape == (12,)


def test_flops_reject_an_unsupported_layer() -> None:
    with pytest.raises(ValueError, match=r"layer type Tanh; supported types are Linear"):
        count_flops(nn.Sequential(nn.Linear(3, 3), nn.Tanh()), (3,))


def test_describe_model_reports_size_and_cost() -> None:
    # Execute
    info = describe_model("compact", (1, 1024), 12)

    # Assert
    assert isinstance(info, ModelInfo)
    assert (info.name, info.sample_shape, info.n_classes) == ("compact", (1, 1024), 12)
    assert info.parameters == 60_432
    assert info.flops_per_sample == count_flops(build_model("compact", (1, 1024), 12), (1, 1024))
    assert "WDCNN" in info.description
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.parameters = 0  # type: ignore[misc]


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown model name='wdcnn'; choose one of paper, "):
        build_model("wdcnn", (1, 1024), 12)


@pytest.mark.parametrize(
    ("name", "sample_shape", "message"),
    [
        ("compact", (1, 28, 28), r"sample_shape=\(1, 28, 28\) does not fit model 'compact'"),
        ("paper", (1024,), r"1-D windows of shape \(channels, window_length\)"),
        ("compact", (1, 255), r"window_length=255 is too short .* at least 256 samples"),
        ("paper", (1, 7), r"window_length=7 is too short .* at least 8 samples"),
        ("flacc-cnn2d", (1, 1024), r"takes images of shape \(channels, height, width\)"),
        ("flacc-cnn2d", (1, 3, 28), r"3 × 28 pixels are too small .* at least 4 × 4"),
        ("cnn-jgl-cifar", (3, 15, 15), r"at least 16 × 16"),
        ("mlp-jgl", (1, 0, 28), r"sample_shape=\(1, 0, 28\) must be a non-empty tuple"),
        ("mlp-jgl", (), r"must be a non-empty tuple of positive ints"),
    ],
)
def test_bad_sample_shape_names_the_parameter_and_the_fix(
    name: str, sample_shape: tuple[int, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build_model(name, sample_shape, 12)


@pytest.mark.parametrize("n_classes", [1, 0])
def test_too_few_classes_are_rejected(n_classes: int) -> None:
    with pytest.raises(ValueError, match=rf"n_classes={n_classes} must be an int of at least 2"):
        build_model("compact", (1, 1024), n_classes)
