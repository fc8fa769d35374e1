"""torch's OpInfo samples (float64, CPU) for every listed torch function: jit vs torch, vjp vs
torch.autograd, vmap vs a loop. `python -m thunderx.testing.opinfo` prints the counts."""

import json
import os
import pathlib
import time

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from thunderx.testing import opdb, opinfo

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


# ------------------------------------------------------------------------------ all of op_db

EXPECTED = json.loads((pathlib.Path(__file__).parent.parent / "docs" / "opdb.json").read_text())


def test_op_db_slice_keeps_its_passes():
    """A quarter of op_db (evenly spread, at most 4 samples each): every OpInfo the committed
    full run (docs/opdb.json) records as passing jit, vjp and vmap still does, and every failure
    carries a reason."""
    ops = opdb.ci_slice(opdb.differentiable_ops(), 135)
    entries = opdb.run(ops, max_samples=4, jobs=2, timeout=60)
    regressed = []
    for e in entries:
        for check, status in e["status"].items():
            if status == "fail":
                assert e["reasons"][check][0], f"{e['op']}: {check} fails without a reason"
        was = EXPECTED.get(e["op"])
        assert was is not None, f"{e['op']} is not in docs/opdb.json: rerun the full report"
        if all(s in ("pass", "n/a") for s in was[:3]) and not opdb.passes_all(e):
            regressed.append(f"{e['op']}: {e['status']} {e['reasons']}")
    assert not regressed, "\n".join(regressed)


def test_op_db_is_every_differentiable_float64_opinfo():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = opdb.differentiable_ops()
    assert len(ops) == sum(
        1 for o in op_db if o.supports_autograd and torch.float64 in o.supported_dtypes("cpu")
    )
    assert len({opinfo.op_id(o) for o in ops}) == len(ops)
    assert set(EXPECTED) == {opinfo.op_id(o) for o in ops}


class FakeOp:
    """An OpInfo-shaped object: one float64 sample of shape (3,)."""

    def __init__(self, name, op):
        self.name, self.variant_test_name, self.op = name, "", op

    def sample_inputs(self, device, dtype, requires_grad=False):
        return [SampleInput(torch.linspace(0.5, 1.5, 3, dtype=dtype))]


def _hang(x):
    time.sleep(60)
    return x


def _die(x):
    os._exit(3)


def _concrete(x):
    return x * float(x.sum())


def _differs_when_traced(x):
    return x + (0.0 if isinstance(x, torch.Tensor) else 1.0)


def test_op_db_runner_reports_timeouts_crashes_and_reasons():
    ops = [
        FakeOp("hang", _hang),
        FakeOp("die", _die),
        FakeOp("concrete", _concrete),
        FakeOp("differs", _differs_when_traced),
        FakeOp("sin", torch.sin),
    ]
    t0 = time.monotonic()
    hang, die, concrete, differs, sin = opdb.run(ops, jobs=2, timeout=3)
    assert time.monotonic() - t0 < 30
    assert hang["reasons"]["jit"][0] == "timeout" and not opdb.passes_all(hang)
    assert die["reasons"]["vmap"][0] == "crash"
    # under jit and vmap the sum is abstract; vjp sees values (float() works there)
    assert concrete["status"] == {"jit": "fail", "vjp": "pass", "vmap": "fail"}
    assert concrete["reasons"]["jit"][0] == "data-dependent value (ConcretizationError)"
    assert differs["reasons"]["jit"][0] == "wrong value"
    assert opdb.passes_all(sin), sin


# OpInfos the op_db run found failing, fixed or decomposed here (lang/copies.py,
# lang/extras.py, lang/margin_losses.py)
ADDED = (
    "alias_copy permute_copy t_copy transpose_copy squeeze_copy unsqueeze_copy unbind_copy "
    "diagonal_copy narrow_copy split_with_sizes_copy expand_copy unfold_copy view_copy unfold "
    "split_with_sizes unsafe_split unsafe_chunk ravel atleast_1d atleast_2d atleast_3d "
    "column_stack dstack hsplit vsplit dsplit linalg.diagonal diag diagflat sum_to_size take "
    "index_fill positive rad2deg deg2rad logaddexp2 ldexp nanmean addr inner linalg.vecdot dist "
    "renorm aminmax nn.functional.hardshrink nn.functional.softshrink fill zero_ "
    "nn.functional.margin_ranking_loss nn.functional.hinge_embedding_loss "
    "nn.functional.soft_margin_loss nn.functional.multilabel_soft_margin_loss "
    "nn.functional.cosine_embedding_loss masked.logaddexp nn.functional.prelu "
    "index_add scatter scatter_add einsum diag_embed select_scatter diagonal_scatter "
    "slice_scatter index_copy nn.functional.channel_shuffle nn.functional.triplet_margin_loss "
    "nn.functional.triplet_margin_with_distance_loss nn.functional.poisson_nll_loss "
    "nn.functional.dropout nn.functional.dropout2d nn.functional.dropout3d "
    "nn.functional.alpha_dropout bernoulli linalg.cholesky_ex linalg.inv_ex linalg.solve_ex "
    "linalg.lu_factor_ex linalg.tensorinv linalg.tensorsolve put constant_pad_nd "
    "cartesian_prod combinations nn.functional.pdist resolve_neg slice _unsafe_masked_index "
    "_unsafe_masked_index_put_accumulate lu cdist nn.functional.gaussian_nll_loss "
    "nn.functional.multi_margin_loss nn.functional.multilabel_margin_loss "
    "nn.functional.local_response_norm __rpow__ linalg.norm"
).split()


@pytest.mark.parametrize("name", ADDED)
def test_op_db_functions_added_pass_jit_vjp_vmap(name):
    ops = [o for o in opdb.differentiable_ops() if opinfo.op_id(o) == name]
    assert ops, f"{name} is not an OpInfo id in op_db"
    for op in ops:
        entry = opdb.summarize(opinfo.check_op(op, MAX_SAMPLES))
        assert entry["samples"] > 0 and opdb.passes_all(entry), entry
