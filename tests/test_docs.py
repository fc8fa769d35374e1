"""The examples in the public API's docstrings run and print what they show."""

import doctest
import importlib

import pytest
import torch

import thunderx
import thunderx.api
import thunderx.collectives
import thunderx.debug
import thunderx.lowering
import thunderx.primitives.higher_order
import thunderx.shapes
import thunderx.transforms.ad
import thunderx.transforms.custom
import thunderx.transforms.jacobians
import thunderx.transforms.jit
import thunderx.transforms.linear_transpose
import thunderx.transforms.vmap
import thunderx.tree

MODULES = [
    thunderx.api,
    thunderx.collectives,
    thunderx.debug,
    thunderx.func,
    thunderx.lowering,
    importlib.import_module("thunderx.shard_map"),  # the attribute is the function
    thunderx.primitives.higher_order,
    thunderx.shapes,
    thunderx.transforms.ad,
    thunderx.transforms.jacobians,
    thunderx.transforms.closure,
    thunderx.transforms.custom_batching,
    thunderx.transforms.custom,
    thunderx.transforms.jit,
    thunderx.transforms.linear_transpose,
    thunderx.transforms.vmap,
    thunderx.tree,
    thunderx.assoc_scan,
    thunderx.implicit,
    thunderx.host_callback,
    thunderx.checkpointing,
    thunderx.config,
    importlib.import_module("thunderx.testing.diff_control"),
    thunderx,
]


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples(module):
    result = doctest.testmod(
        module,
        extraglobs={"torch": torch, "thunderx": thunderx},
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0
