"""What `jit(f).lower(*args)` returns: the staged program at each stage, as text."""

from __future__ import annotations

from thunderx.executors import get_executor
from thunderx.passes import optimize


class Lowered:
    """The traced jaxpr, the optimized jaxpr, and the execution program for one signature."""

    def __init__(self, entry, executor: str, name: str):
        self.entry = entry
        self.executor = executor
        self.name = name
        self.jaxpr = entry.closed
        self.optimized = optimize(entry.jaxpr)
        self.executor_impl = get_executor(executor)
        self.program = self.executor_impl.lower(self.optimized)

    def as_text(self, max_lines: int | None = None) -> str:
        parts = [
            f"# {self.name}: optimized jaxpr (consts first)",
            str(self.optimized),
            f"# execution program: {self.executor_impl.describe()}",
            self.program_text(),
        ]
        text = "\n".join(parts)
        if max_lines is not None:
            lines = text.splitlines()
            if len(lines) > max_lines:
                text = "\n".join(lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"])
        return text

    def program_text(self) -> str:
        return self.program.as_text()

    @property
    def regions(self) -> list[int | None] | None:
        """The fusion region of each optimized equation, or None for a non-fusing executor."""
        return self.executor_impl.partition(self.optimized)

    def __repr__(self) -> str:
        return self.as_text()

    def _repr_html_(self) -> str:
        from thunderx.html import lowered_html

        return lowered_html(self)
