"""Pytrees on optree, in thunderx's own namespace so users can register custom nodes.

Example:
    >>> import thunderx.tree as tree
    >>> leaves, treedef = tree.flatten({"w": 1.0, "b": (2.0, 3.0)})
    >>> tree.unflatten(treedef, [x * 2 for x in leaves])
    {'w': 2.0, 'b': (4.0, 6.0)}
"""

from __future__ import annotations

from typing import Any, Callable

import optree

NAMESPACE = "thunderx"
PyTreeDef = optree.PyTreeSpec


def flatten(tree: Any) -> tuple[list, PyTreeDef]:
    return optree.tree_flatten(tree, namespace=NAMESPACE)


def unflatten(treedef: PyTreeDef, leaves) -> Any:
    return optree.tree_unflatten(treedef, list(leaves))


def leaves(tree: Any) -> list:
    return optree.tree_leaves(tree, namespace=NAMESPACE)


def structure(tree: Any) -> PyTreeDef:
    return optree.tree_structure(tree, namespace=NAMESPACE)


def map(fn: Callable, tree: Any, *rest: Any) -> Any:  # noqa: A001 - mirrors jax.tree.map
    return optree.tree_map(fn, tree, *rest, namespace=NAMESPACE)


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
