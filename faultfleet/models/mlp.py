"""Multi-layer perceptrons of the clustered-FL papers faultfleet implements.

Every MLP flattens its input (any sample shape), applies ``Linear → ReLU`` for each hidden
width and ends in a ``Linear`` to the logits (the papers' softmax belongs to the loss).
Registered in :mod:`faultfleet.models.zoo`:

=====================  ================  ===================================================
name                   hidden widths     source
=====================  ================  ===================================================
``mlp-faacl``          128               FAACL App. C.5 and Table 5, MNIST
``mlp-faacl-512``      512               FAACL App. C.5 and Table 5, EMNIST and FASHION
``mlp-faacl-femnist``  512, 64           FAACL App. C.5 and Table 5, FEMNIST
``mlp-jgl``            512, 128          Joint gradient and loss, Fig. 3, MNIST, FashionMNIST
                                         and EMNIST
``mlp-jgl-cifar``      2048, 512         Joint gradient and loss, Fig. 3, CIFAR-10
=====================  ================  ===================================================

FAACL (App. C.5) says only "one hidden layer" (two for FEMNIST); the widths come from the
parameter counts of its Table 5. For 28 × 28 inputs and 10 classes one hidden layer of 128
gives exactly the 101 770 parameters listed for MNIST and one of 512 exactly the 407 050 of
EMNIST and FASHION. FEMNIST's 434 752 equals (784·512 + 512) + (512·64 + 64), the two hidden
layers without the output layer, so we read the widths as 512 and 64 and add the output
layer the text describes (438 782 parameters with 62 classes). FAACL's L2 regularisation is
a training setting, not part of the model. FAACL's CIFAR-10 model (2 074 260 parameters) is
not described and fits no MLP of round widths; it is left out.

Joint gradient and loss (Lin, Chen et al., §IV-A 2 and Fig. 3) gives the widths directly:
"three fully-connected layers with ReLU activation". Its CNNs are in
:mod:`faultfleet.models.cnn2d`. FedAC trains only convnets (§5); it has no MLP.

Every model splits into ``features`` (flatten and hidden layers) and ``classifier`` (the
output layer). No layer holds a buffer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

FAACL_HIDDEN: tuple[int, ...] = (128,)
FAACL_WIDE_HIDDEN: tuple[int, ...] = (512,)
FAACL_FEMNIST_HIDDEN: tuple[int, ...] = (512, 64)
JGL_HIDDEN: tuple[int, ...] = (512, 128)
JGL_CIFAR_HIDDEN: tuple[int, ...] = (2048, 512)


class Mlp(nn.Module):
    """Flatten → (Linear → ReLU) per hidden width → Linear to logits.

    Parameters
    ----------
    sample_shape : tuple[int, ...]
        Shape of one sample without the batch dimension, e.g. (1, 28, 28); it is flattened
        to ``prod(sample_shape)`` inputs.
    n_classes : int
        Number of output logits.
    hidden : tuple[int, ...]
        Widths of the hidden layers, input side first.

    Notes
    -----
    ``forward`` maps (batch, *sample_shape) to logits of shape (batch, n_classes).
    """

    def __init__(
        self, sample_shape: tuple[int, ...], n_classes: int, hidden: tuple[int, ...]
    ) -> None:
        super().__init__()
        if not hidden or min(hidden) < 1:
            raise ValueError(
                f"hidden={hidden} must list at least one positive layer width, e.g. (128,)"
            )
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(sample_shape)
        for units in hidden:
            layers += [nn.Linear(width, units), nn.ReLU()]
            width = units
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(width, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, n_classes) for inputs of shape (batch, *sample_shape)."""
        return self.classifier(self.features(x))  # type: ignore[no-any-return]


def faacl_mlp(sample_shape: tuple[int, ...], n_classes: int) -> Mlp:
    """FAACL's MNIST MLP: one hidden layer of 128 (App. C.5, Table 5: 101 770 parameters)."""
    return Mlp(sample_shape, n_classes, FAACL_HIDDEN)


def faacl_wide_mlp(sample_shape: tuple[int, ...], n_classes: int) -> Mlp:
    """FAACL's EMNIST and FASHION MLP: one hidden layer of 512 (Table 5: 407 050)."""
    return Mlp(sample_shape, n_classes, FAACL_WIDE_HIDDEN)


def faacl_femnist_mlp(sample_shape: tuple[int, ...], n_classes: int) -> Mlp:
    """FAACL's FEMNIST MLP: hidden layers of 512 and 64 (App. C.5, Table 5; see module)."""
    return Mlp(sample_shape, n_classes, FAACL_FEMNIST_HIDDEN)


def jgl_mlp(sample_shape: tuple[int, ...], n_classes: int) -> Mlp:
    """Joint-gradient-loss Fig. 3 MLP for MNIST, FashionMNIST, EMNIST: hidden 512 and 128."""
    return Mlp(sample_shape, n_classes, JGL_HIDDEN)


def jgl_cifar_mlp(sample_shape: tuple[int, ...], n_classes: int) -> Mlp:
    """Joint-gradient-loss Fig. 3 MLP for CIFAR-10: hidden layers of 2048 and 512."""
    return Mlp(sample_shape, n_classes, JGL_CIFAR_HIDDEN)
