"""Named axes in scope (vmap's axis_name, shard_map's mesh dims), per thread, innermost last."""

from __future__ import annotations

import threading


class _Axes(threading.local):
    def __init__(self):
        self.env: tuple[NamedAxis, ...] = ()


_axes = _Axes()


class NamedAxis:
    """A named axis in scope: its size and, for a mesh dim, the mesh (None for a vmap axis).

    Collectives hold these in their params, so a staged collective still knows its process group
    after the shard_map that bound the name has returned.
    """

    __slots__ = ("name", "size", "mesh")

    def __init__(self, name: str, size: int, mesh=None):
        self.name = name
        self.size = size
        self.mesh = mesh

    def _key(self):
        return (self.name, self.size, id(self.mesh))

    def __eq__(self, other) -> bool:
        return type(other) is NamedAxis and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return self.name


def axis_env() -> tuple[NamedAxis, ...]:
    return _axes.env


class extend_axis_env:
    """Context manager putting named axes in scope (innermost last) for the body of a transform."""

    __slots__ = ("axes", "prev")

    def __init__(self, axes):
        self.axes = tuple(axes)

    def __enter__(self):
        self.prev = _axes.env
        _axes.env = self.prev + self.axes

    def __exit__(self, *exc):
        _axes.env = self.prev
        return False
