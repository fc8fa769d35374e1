"""Pytrees on optree, in thunderx's own namespace so users can register custom nodes.

Example:
    >>> import thunderx.tree as tree
    >>> leaves, treedef = tree.flatten({"w": 1.0, "b": (2.0, 3.0)})
    >>> tree.unflatten(treedef, [x * 2 for x in leaves])
    {'w': 2.0, 'b': (4.0, 6.0)}
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import optree
import torch
import torch.utils._pytree as _torch_pytree

NAMESPACE = "thunderx"
PyTreeDef = optree.PyTreeSpec


def flatten(tree: Any) -> tuple[list, PyTreeDef]:
    if len(_TORCH_NODES) != _synced[0]:
        sync_torch_nodes()
    return optree.tree_flatten(tree, namespace=NAMESPACE)


def unflatten(treedef: PyTreeDef, leaves) -> Any:
    return optree.tree_unflatten(treedef, list(leaves))


def leaves(tree: Any) -> list:
    if len(_TORCH_NODES) != _synced[0]:
        sync_torch_nodes()
    return optree.tree_leaves(tree, namespace=NAMESPACE)


def structure(tree: Any) -> PyTreeDef:
    if len(_TORCH_NODES) != _synced[0]:
        sync_torch_nodes()
    return optree.tree_structure(tree, namespace=NAMESPACE)


def map(fn: Callable, tree: Any, *rest: Any) -> Any:  # noqa: A001 - mirrors jax.tree.map
    if len(_TORCH_NODES) != _synced[0]:
        sync_torch_nodes()
    return optree.tree_map(fn, tree, *rest, namespace=NAMESPACE)


# Classes registered with torch's own pytrees (`torch.utils._pytree.register_pytree_node`,
# `register_dataclass`; what torch.func and torch.compile users, and libraries such as
# transformers' ModelOutput, register) are pytree nodes here too: each new registration is
# mirrored into thunderx's namespace the next time a tree is flattened.
_TORCH_NODES = _torch_pytree.SUPPORTED_NODES
_synced = [0]
_mirrored: set = set()
_NATIVE = (tuple, list, dict, collections.OrderedDict, collections.defaultdict, collections.deque)


def sync_torch_nodes() -> None:
    for cls, node in list(_TORCH_NODES.items()):
        if cls in _mirrored:
            continue
        _mirrored.add(cls)
        if cls in _NATIVE or not isinstance(cls, type) or optree.is_structseq_class(cls):
            continue  # optree's own nodes (torch's namedtuple entry is a stand-in class)
        if cls is torch.Size or cls.__module__.startswith(("torch._", "torch.fx", "torch.utils")):
            continue  # torch's internal nodes; a shape stays one value (static under jit)
        try:
            optree.register_pytree_node(
                cls,
                lambda obj, f=node.flatten_fn: tuple(f(obj)),
                lambda context, children, u=node.unflatten_fn: u(list(children), context),
                namespace=NAMESPACE,
            )
        except ValueError:  # registered in thunderx's namespace already (register_node)
            pass
    _synced[0] = len(_TORCH_NODES)


def register_node(cls: type, flatten_fn: Callable, unflatten_fn: Callable) -> None:
    """Register `cls` as a pytree node.

    `flatten_fn(obj) -> (children, aux)`, `unflatten_fn(aux, children) -> obj`.
    """
    optree.register_pytree_node(
        cls,
        lambda obj: flatten_fn(obj),
        lambda aux, children: unflatten_fn(aux, children),
        namespace=NAMESPACE,
    )


def broadcast_prefix(prefix: Any, full: Any, is_leaf: Callable | None = None) -> list:
    """Leaves of `prefix`, each repeated for the leaves of `full` below it (for in_axes/out_axes)."""
    return optree.broadcast_prefix(prefix, full, none_is_leaf=True, namespace=NAMESPACE)
