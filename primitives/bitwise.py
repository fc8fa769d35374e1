"""Bitwise operations on integer and bool tensors: and, or, xor, not and the shifts (torch's
`&`, `|`, `^`, `~`, `<<`, `>>` on integers; on bools the first four are the logical ops). No
derivatives: their operands and results are integers."""

from __future__ import annotations

import operator

import torch

from thunderx.core import abstract_eval_rules, declare
from thunderx.primitives._elementwise import elementwise_batch
from thunderx.primitives.binary import def_binary


def _integral(name, *avals):
    for a in avals:
        if a.dtype.is_floating_point or a.dtype.is_complex:
            raise TypeError(f"{name}: expected integer or bool operands, got {a.str_short()}")


def _def(name, op, symbol, nvf_op):
    prim = def_binary(name, op, lambda args, avals: f"({args[0]} {symbol} {args[1]})", nvf_op)
    plain = abstract_eval_rules[prim]

    def abstract_eval(x, y):
        _integral(name, x, y)
        return plain(x, y)

    abstract_eval_rules[prim] = abstract_eval
    return prim


bitwise_and_p = _def("bitwise_and", operator.and_, "&", "bitwise_and")
bitwise_or_p = _def("bitwise_or", operator.or_, "|", "bitwise_or")
bitwise_xor_p = _def("bitwise_xor", operator.xor, "^", "bitwise_xor")
shift_left_p = _def("shift_left", operator.lshift, "<<", "bitwise_left_shift")
# torch's >> on signed integers is arithmetic (the sign bit is copied), as nvFuser's is
shift_right_p = _def("shift_right", operator.rshift, ">>", "bitwise_right_shift")


def _not_abstract_eval(x):
    _integral("bitwise_not", x)
    return x.strip_weak()


bitwise_not_p = declare(
    "bitwise_not",
    impl=torch.bitwise_not,
    abstract_eval=_not_abstract_eval,
    batch=lambda args, dims: elementwise_batch(bitwise_not_p, args, dims),
    torch_codegen=lambda args, avals: f"torch.bitwise_not({args[0]})",
    nvfuser=lambda fd, x: fd.ops.bitwise_not(x),
    elementwise=True,
)
