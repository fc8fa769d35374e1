"""Transforms: jvp, partial evaluation, transpose, the autodiff API, vmap, jit."""
