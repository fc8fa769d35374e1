"""The groups of equations the torch executor gives back to one torch call each, merged: what the
code generator emits as one call and what the inductor executor leaves out of its fusion
regions come from this one list."""

from __future__ import annotations

from thunderx.executors.patterns_cat import stacked_cats
from thunderx.executors.patterns_conv import conv_bias
from thunderx.executors.patterns_norm import batch_norm_training, layer_norm_affine
from thunderx.ir import Jaxpr


def kernel_groups(jaxpr: Jaxpr) -> tuple[dict, set]:
    """Layer norm with its affine, batch norm's training forward and backward, a convolution
    with its bias, a stack of merged reshapes; each equation in one group at most (a later
    group overlapping an earlier one is dropped): ({index: (outs, template, operands)},
    skipped indices), in `layer_norm_affine`'s form."""
    emit, skip = layer_norm_affine(jaxpr)
    for more, more_skipped in (
        batch_norm_training(jaxpr),
        conv_bias(jaxpr),
        stacked_cats(jaxpr),
    ):
        if not (set(more) | more_skipped) & (set(emit) | skip):
            emit, skip = {**emit, **more}, skip | more_skipped
    return emit, skip
