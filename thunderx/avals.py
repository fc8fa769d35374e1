"""Abstract values: shape, dtype, device (and weak typing for Python scalars)."""

from __future__ import annotations

import torch

_SHORT = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.complex64: "c64",
    torch.complex128: "c128",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.bool: "bool",
}

CPU = torch.device("cpu")


def short_dtype(dtype: torch.dtype) -> str:
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def category(dtype: torch.dtype) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex: torch promotes across categories upward."""
    if dtype is torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 1


class ShapedArray:
    """The abstract value of a tensor: what tracing knows without the data.

    `weak_type` marks Python scalars, which take the dtype of the tensor they meet (torch's rule).
    """

    __slots__ = ("shape", "dtype", "device", "weak_type")

    def __init__(self, shape, dtype: torch.dtype, device=CPU, weak_type: bool = False):
        self.shape = tuple(shape)
        self.dtype = dtype
        # a device named by a string or an index (zeros_like(x, device="cpu")) as torch.device
        self.device = (
            device if type(device) is torch.device or device is None else torch.device(device)
        )
        self.weak_type = weak_type

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def update(self, shape=None, dtype=None, device=None) -> ShapedArray:
        return ShapedArray(
            self.shape if shape is None else shape,
            self.dtype if dtype is None else dtype,
            self.device if device is None else device,
        )

    def strip_weak(self) -> ShapedArray:
        return ShapedArray(self.shape, self.dtype, self.device) if self.weak_type else self

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, ShapedArray)
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.device == other.device
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.device))

    def str_short(self) -> str:
        # a None dimension is known only at run time (a while loop's trip count)
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{short_dtype(self.dtype)}[{dims}]"

    def __repr__(self) -> str:
        dev = "" if self.device.type == "cpu" else f"@{self.device}"
        return f"ShapedArray({self.str_short()}{dev})"


def scalar_dtype(value) -> torch.dtype:
    """The dtype torch gives a Python scalar when it stands alone."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex64 if torch.get_default_dtype() == torch.float32 else torch.complex128
    return torch.get_default_dtype()


_mode_enabled = torch._C._is_torch_function_mode_enabled
_no_torch_function = torch._C.DisableTorchFunction


def aval_of_concrete(x) -> ShapedArray:
    if isinstance(x, torch.Tensor):
        if _mode_enabled():
            # under a torch function mode (vmap's RandomnessMode) each attribute read would go
            # through the mode's Python handler: 3.6 us for these three instead of 0.5
            with _no_torch_function():
                return ShapedArray(x.shape, x.dtype, x.device)
        return ShapedArray(x.shape, x.dtype, x.device)
    if isinstance(x, (bool, int, float, complex)):
        return ShapedArray((), scalar_dtype(x), CPU, weak_type=True)
    raise TypeError(f"expected a torch.Tensor or a Python scalar, got {type(x).__name__}")


_TO_COMPLEX = {
    torch.float16: torch.complex32,
    torch.bfloat16: torch.complex64,
    torch.float32: torch.complex64,
    torch.float64: torch.complex128,
}


def result_dtype(*avals: ShapedArray) -> torch.dtype:
    """torch's type promotion over tensors of rank>0, rank-0 tensors, and Python scalars.

    Each tier only raises the result's category above the higher tiers; within a category the
    higher tier wins (`f16 tensor * f32 scalar tensor -> f16`, `i64[3] * 2.5 -> default float`).
    """
    tiers: list[list[torch.dtype]] = [[], [], []]
    for a in avals:
        tier = 2 if a.weak_type else (1 if a.ndim == 0 else 0)
        tiers[tier].append(a.dtype)
    result = None
    for dts in tiers:
        if not dts:
            continue
        d = dts[0]
        for other in dts[1:]:
            d = torch.promote_types(d, other)
        if result is None:
            result = d
        elif category(d) > category(result):
            if category(d) == 3 and category(result) == 2:
                # a complex operand of a lower tier keeps the float's precision (torch's
                # combine_categories): f64[3] * complex64 scalar tensor -> complex128
                d = _TO_COMPLEX[result]
            elif dts is tiers[2]:
                # a Python scalar of a higher category: default dtype of that category
                if category(d) == 2:
                    d = torch.get_default_dtype()
                elif category(d) == 3:
                    d = torch.complex128 if result == torch.float64 else torch.complex64
            result = d
    assert result is not None
    return result
