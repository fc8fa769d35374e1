"""Oracles for the random-program tests (test_fuzz, test_recycle)."""

import torch
import torch.func as tf

import thunderx as tx


def per_example_grads_reference(scalar, batched: list, argnums=(0, 1)) -> tuple:
    """An oracle for `vmap(grad(scalar, argnums))(*batched)`: torch.func's; where its batching
    refuses, its per-example loop; where its grad refuses too (batch norm's running
    statistics), the per-example loop of thunderx's grad, which callers check against finite
    differences separately."""
    try:
        return tf.vmap(tf.grad(scalar, argnums=argnums))(*batched)
    except RuntimeError:
        pass
    n = batched[0].shape[0]
    rows = [[b[i] for b in batched] for i in range(n)]
    try:
        per = [tf.grad(scalar, argnums=argnums)(*r) for r in rows]
    except RuntimeError:
        per = [tx.grad(scalar, argnums=argnums)(*r) for r in rows]
    return tuple(torch.stack(g) for g in zip(*per))
