"""torch's OpInfo samples (float64, CPU) for every listed torch function: jit vs torch, vjp vs
torch.autograd, vmap vs a loop. `python -m thunderx.testing.opinfo` prints the counts."""

import os

import pytest

from thunderx.testing import opinfo

OPS = opinfo.supported_ops()
MAX_SAMPLES = None if os.environ.get("THUNDERX_HYPOTHESIS_PROFILE") == "thorough" else 6


@pytest.mark.parametrize(
    "op",
    [op for _, _, op in OPS],
    ids=[f"{n}.{op.variant_test_name}" if op.variant_test_name else n for _, n, op in OPS],
)
def test_opinfo_samples(op):
    res = opinfo.check_op(op, MAX_SAMPLES)
    if not res.samples:
        assert res.known, f"{res.name}: no sample ran and no known-failure reason"
        return
    assert not res.errors, f"{res.name}:\n" + "\n".join(res.errors)
    assert res.fwd == res.samples and res.vmap == res.samples


def test_listed_functions_are_covered():
    listed = [n for names in opinfo.CATEGORIES.values() for n in names.split()]
    with_opinfo = {n for _, n, _ in OPS}
    whole_variant_failures = {name for (name, _variant) in opinfo.KNOWN_FAILURES}
    assert len(listed) >= 160
    assert len(with_opinfo - whole_variant_failures) >= 160
