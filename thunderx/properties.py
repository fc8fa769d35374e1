"""What a primitive declares about its outputs (aliasing, in-place form, effects, elementwise),
read by executors and passes instead of primitive names."""

from __future__ import annotations

import dataclasses

# `aliases=ALL_OPERANDS`: an output may be any operand or a view of one (a called program).
ALL_OPERANDS = "all"


@dataclasses.dataclass(frozen=True)
class Properties:
    """What executors and passes may assume about a primitive's outputs, proved against its
    implementation by tests/test_properties.py (as torch's `Tensor(a)` annotations are)."""

    # Operand positions whose storage an output may share (a view of them), or ALL_OPERANDS.
    aliases: tuple[int, ...] | str = ()
    # A torch Tensor method computing the result in place into operand 0 (`exp_`), or None.
    inplace: str | None = None
    # The in-place method is right only for floating outputs (`div_` does not truncate ints).
    inplace_floating_only: bool = False
    # An elementwise primitive's aten out= overload (`threshold_backward.grad_input`), called
    # with the operands, the params as keywords and a dead operand as its out argument: the
    # in-place form of a kernel without a Tensor method (torch's backward kernels).
    inplace_out: str | None = None
    # A binary op whose in-place form may also write into operand 1 (operands swap).
    commutative: bool = False
    # Effects: "rng" reads and advances torch's random state, "callback" runs user code,
    # "opaque" an unknown torch function; such an equation is never removed or merged.
    effects: frozenset[str] = frozenset()
    # Each output element depends only on the operand elements at the same index.
    elementwise: bool = False
    # An output whose elements may share memory (an expand, fresh or a view): never written
    # into; tests/test_properties.py proves every other view keeps distinct element addresses.
    overlapping: bool = False
    # The implementation runs torch autograd (a backward that recomputes its forward): a
    # compiler tracing implementations into one graph (inductor's whole program) keeps it a call.
    runs_autograd: bool = False
    # torch autograd can differentiate the implementation's kernel. False for a composite whose
    # torch kernel has no derivative in torch (native_group_norm_backward, silu_backward): where
    # torch autograd records the call (grad mode on, an operand requiring grad), eagerly and in
    # the program jit runs under torch autograd, the kernel runs inside a Function whose
    # derivative is thunderx's vjp of the primitive (primitives/kernel_autograd.py).
    kernel_differentiable: bool = True
    # Outputs of the kernel that torch autograd treats as constants although they depend on the
    # operands (fused attention's logsumexp): the same Function where torch autograd records the
    # call eagerly, and in jit's program where that program reads one of them.
    kernel_constant_outputs: tuple[int, ...] = ()
    # False only for the conservative stand-in of a primitive that never declared its properties.
    declared: bool = True

    def alias_positions(self, num_operands: int) -> tuple[int, ...]:
        """The operand positions an output may share storage with, for an equation's arity."""
        if self.aliases == ALL_OPERANDS:
            return tuple(range(num_operands))
        return self.aliases


# A primitive made by `new_primitive` alone: assumed to alias any operand and to have effects,
# so that executors and passes stay safe; tests/test_properties.py fails until it is declared.
UNDECLARED = Properties(aliases=ALL_OPERANDS, effects=frozenset({"undeclared"}), declared=False)


def out_overload(name: str):
    """(the aten OpOverload `name` names, e.g. "gelu_backward.grad_input", the name of its out
    argument); ValueError when torch has no such overload or it has no out argument."""
    import torch

    packet, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, packet, None), overload or "default", None)
    outs = [a.name for a in op._schema.arguments if a.is_out] if op is not None else []
    if len(outs) != 1:
        raise ValueError(f"torch has no aten out= overload {name!r} with one out argument")
    return op, outs[0]


def check_declaration(name: str, aliases, inplace, effects, inplace_out, elementwise) -> None:
    """What `core.declare` refuses before it registers `name`: malformed properties, an
    in-place method torch lacks, an out= overload torch lacks or on a non-elementwise op."""
    import torch

    if isinstance(effects, str) or isinstance(aliases, int):
        raise TypeError(f"declare({name!r}): effects and aliases are tuples, e.g. effects=('rng',)")
    if inplace is not None and not hasattr(torch.Tensor, inplace):
        raise ValueError(f"declare({name!r}): torch.Tensor has no in-place method {inplace!r}")
    if inplace_out is not None:
        if not elementwise:  # only an elementwise kernel may write over an operand it reads
            raise ValueError(f"declare({name!r}): inplace_out needs elementwise=True")
        out_overload(inplace_out)
