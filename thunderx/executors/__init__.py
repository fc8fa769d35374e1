"""Executors behind one protocol (`base.Executor`), registered by name: generated torch code
(any device), nvFuser fusion regions (CUDA), inductor (whole programs or fusion regions) and
the tiered executor (torch code, then inductor once hot: the default on CPU)."""

# Registration order is presentation order (explorer tabs).
from thunderx.executors import torch_codegen  # noqa: F401, I001
from thunderx.executors import nvfuser_exec, inductor_exec  # noqa: F401, I001
from thunderx.executors import tiered  # noqa: F401, I001
from thunderx.executors.base import (
    Executor,
    Program,
    default_executor,
    executor_names,
    executors,
    get_executor,
    register_executor,
    unregister_executor,
)

__all__ = [
    "Executor",
    "Program",
    "default_executor",
    "executor_names",
    "executors",
    "get_executor",
    "register_executor",
    "unregister_executor",
]
