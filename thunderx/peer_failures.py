"""Naming the failed peer of a broken collective: each rank records its host and pid (and, when
it fails, its error) in the process group's store, so a peer whose collective breaks can say
which rank raised or exited instead of torch.distributed's bare connection error.
"""

from __future__ import annotations

import os
import socket

from thunderx.core import NamedAxis
from thunderx.errors import ThunderxError, user_frame


class PeerFailedError(ThunderxError, RuntimeError):
    """A collective failed because another process of the group failed, exited or timed out."""


_STORE_PREFIX = "thunderx/"


def _store():
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None


_registered_stores: set[int] = set()  # once per process group (its store)


def register_process() -> None:
    """Record this rank's host and pid, so a peer whose collective breaks can tell which rank
    exited."""
    import torch.distributed as dist

    store = _store()
    if store is None or id(store) in _registered_stores:
        return
    key = f"{_STORE_PREFIX}pid/{dist.get_rank()}"
    store.set(key, f"{socket.gethostname()}:{os.getpid()}")
    _registered_stores.add(id(store))


def record_failure(exc: BaseException) -> None:
    """Record that this rank failed, so peers blocked in a collective name it."""
    import torch.distributed as dist

    if isinstance(exc, PeerFailedError) or not dist.is_initialized():
        return
    store = _store()
    if store is None:
        return
    try:
        store.set(f"{_STORE_PREFIX}failed/{dist.get_rank()}", f"{type(exc).__name__}: {exc}")
    except Exception:  # the store host itself may be gone; the original error still propagates
        pass


def _failed_peers() -> list[str]:
    import torch.distributed as dist

    store = _store()
    if store is None:
        return []
    found = []
    host = socket.gethostname()
    try:
        for rank in range(dist.get_world_size()):
            if rank == dist.get_rank():
                continue
            key = f"{_STORE_PREFIX}failed/{rank}"
            if store.check([key]):
                found.append(f"rank {rank} failed with {store.get(key).decode()}")
                continue
            key = f"{_STORE_PREFIX}pid/{rank}"
            if store.check([key]):
                peer_host, pid = store.get(key).decode().rsplit(":", 1)
                if peer_host == host and not _alive(int(pid)):
                    found.append(f"rank {rank} (pid {pid}) exited")
    except Exception:  # rank 0 hosts the store: if it is gone, so is the store
        found.append("rank 0 (the store host) is unreachable")
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of another process still answers kill(0): read its state
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class _peer_failures:
    """Turn a broken collective (a peer raised, exited or timed out) into an error naming it."""

    __slots__ = ("what", "axis")

    def __init__(self, what: str, axis: NamedAxis):
        self.what = what
        self.axis = axis

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if exc is None or not isinstance(exc, RuntimeError):
            return False
        import torch.distributed as dist

        peers = _failed_peers()
        cause = "; ".join(peers) if peers else "no peer recorded a failure (a timeout?)"
        raise PeerFailedError(
            f"{self.what} over mesh axis {self.axis.name!r} failed on rank {dist.get_rank()}: "
            f"{cause} (collective called at {user_frame()}; torch.distributed said: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from exc
