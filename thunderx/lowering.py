"""What `jit(f).lower(*args)` returns: the staged program at each stage, as text."""

from __future__ import annotations

from thunderx.passes import optimize


class Lowered:
    """The traced jaxpr, the optimized jaxpr, and the execution program for one signature."""

    def __init__(self, entry, executor: str, name: str):
        self.entry = entry
        self.executor = executor
        self.name = name
        self.jaxpr = entry.closed
        self.optimized = optimize(entry.jaxpr)
        if executor == "nvfuser":
            from thunderx.executors.nvfuser_exec import plan_nvfuser

            self.program = plan_nvfuser(self.optimized)
        else:
            from thunderx.executors.torch_codegen import compile_jaxpr

            self.program = compile_jaxpr(self.optimized)

    def as_text(self, max_lines: int | None = None) -> str:
        parts = [
            f"# {self.name}: optimized jaxpr (consts first)",
            str(self.optimized),
            f"# execution program ({self.executor} executor)",
            self.program_text(),
        ]
        text = "\n".join(parts)
        if max_lines is not None:
            lines = text.splitlines()
            if len(lines) > max_lines:
                text = "\n".join(lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"])
        return text

    def program_text(self) -> str:
        if self.executor == "nvfuser":
            return self.program.as_text()
        return self.program.source

    def __repr__(self) -> str:
        return self.as_text()
