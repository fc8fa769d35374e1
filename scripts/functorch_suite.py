"""Run PyTorch's own functorch tests with thunderx in place of torch.func: the outside yardstick.

    python scripts/functorch_suite.py DIR [--impl thunderx|torch.func|both] [--timeout 30]

DIR holds PyTorch's functorch test files (test_eager_transforms.py, test_vmap.py and their
helpers common_utils.py, functorch_additional_op_db.py), e.g. `test/` of the pytorch/functorch
repository at d1126fb7 (its last commit with tests) or `test/functorch/` of a pytorch checkout.
They are not shipped with thunderx (they are PyTorch's code); this script only runs them.

Before the test modules import, a `functorch` package is installed whose transforms (`grad`,
`vmap`, `jvp`, `vjp`, `jacrev`, `jacfwd`, `hessian`, `grad_and_value`, `chunk_vmap`) are the
chosen implementation's (for thunderx, `thunderx.func`: torch.func's contract on thunderx's
transforms); `torch.func` and `torch.vmap` are patched the same way. Module
utilities that are not transforms (`make_functional`, `combine_state_for_ensemble`, `make_fx`,
`functionalize`) stay torch's. Excluded, as the yardstick defines it: OpInfo-driven classes
(`TestVmapOperatorsOpInfo`, `TestOperators`) and internals (`TestArgnumsPartial`,
`TestFunctionalize`, `TestMakeFunctional`). Each test runs under a per-test alarm so a hang
fails that test only. With `--impl both`, the score is thunderx's passes among the tests that
pass with torch.func in this environment (old test files may not all pass on a new torch).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

EXCLUDED_CLASSES = (
    "TestVmapOperatorsOpInfo",
    "TestOperators",
    "TestArgnumsPartial",
    "TestFunctionalize",
    "TestMakeFunctional",
)
TEST_FILES = ("test_eager_transforms.py", "test_vmap.py")

_PLUGIN = r"""
import signal, sys, types, pytest
import torch, torch.func

IMPL = __IMPL__
TIMEOUT = __TIMEOUT__


def _install():
    import functorch as real
    import functorch.experimental as real_exp
    import torch._functorch.eager_transforms as et
    import torch._functorch.make_functional as mf

    fc = types.ModuleType("functorch")
    fc.__path__ = []
    for n in dir(real):
        if not n.startswith("__"):
            setattr(fc, n, getattr(real, n))
    exp = types.ModuleType("functorch.experimental")
    for n in dir(real_exp):
        if not n.startswith("__"):
            setattr(exp, n, getattr(real_exp, n))
    src = types.ModuleType("functorch._src")
    src.__path__ = []
    src_et = types.ModuleType("functorch._src.eager_transforms")
    for n in dir(et):
        if not n.startswith("__"):
            setattr(src_et, n, getattr(et, n))

    def _missing(name):
        def f(*a, **k):
            raise NotImplementedError(f"{name} is not in this torch")
        return f

    for n in ("_argnums_partial", "enable_fwd_grad"):
        if not hasattr(src_et, n):
            setattr(src_et, n, _missing(n))
    src.eager_transforms = src_et
    src.make_functional = mf
    fc._src = src
    fc._C = torch._C._functorch
    fc.experimental = exp
    if IMPL == "thunderx":
        import thunderx.func as tx

        def chunk_vmap(func, in_dims=0, out_dims=0, randomness="error", chunks=2):
            return tx.vmap(func, in_dims=in_dims, out_dims=out_dims, randomness=randomness)

        names = ("grad", "grad_and_value", "vjp", "jvp", "vmap", "jacrev", "jacfwd", "hessian")
        swaps = {n: getattr(tx, n) for n in names}
        for n, v in swaps.items():
            setattr(fc, n, v)
            setattr(torch.func, n, v)
        for n in ("jvp", "jacfwd", "hessian"):
            setattr(exp, n, swaps[n])
        exp.chunk_vmap = chunk_vmap
        for n in ("functional_call", "stack_module_state", "linearize"):
            setattr(torch.func, n, getattr(tx, n))
        torch.vmap = tx.vmap
    sys.modules["functorch"] = fc
    sys.modules["functorch.experimental"] = exp
    sys.modules["functorch._src"] = src
    sys.modules["functorch._src.eager_transforms"] = src_et
    sys.modules["functorch._src.make_functional"] = mf
    sys.modules["functorch._C"] = fc._C


_install()

# old test files import dtype lists from torch.testing, which moved to common_dtype
import torch.testing as _tt
from torch.testing._internal import common_dtype as _cd

for _n in dir(_cd):
    if not _n.startswith("_") and not hasattr(_tt, _n):
        setattr(_tt, _n, getattr(_cd, _n))

# the OpInfo-driven classes (excluded) name OpInfos this torch no longer has; their decorators
# would fail the whole module's import, so unknown names are dropped from the skip lists
try:
    import common_utils as _fcu

    _skip_ops = _fcu.skipOps
    _known = {(o.name, o.variant_test_name) for o in _fcu.op_db + _fcu.additional_op_db}

    def _tolerant_skip_ops(test_case_name, base_test_name, to_skip):
        return _skip_ops(test_case_name, base_test_name,
                         {x for x in to_skip if (x[0], x[1]) in _known})

    _fcu.skipOps = _tolerant_skip_ops
except Exception:  # a test directory without the helper module
    pass


def _alarm(signum, frame):
    raise TimeoutError(f"test exceeded {TIMEOUT} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
"""


def run(test_dir: str, impl: str, timeout: int, keyword: str | None) -> dict[str, str]:
    """Run the test files under `impl`, one pytest process per file; return {test id: outcome},
    an outcome being "passed", "skipped" or "failed: <first line of the error>"."""
    files = [f for f in TEST_FILES if os.path.exists(os.path.join(test_dir, f))]
    if not files:
        raise SystemExit(f"no {TEST_FILES} under {test_dir}")
    outcomes: dict[str, str] = {}
    for f in files:
        outcomes.update(_run_file(test_dir, f, impl, timeout, keyword))
    return outcomes


def _run_file(test_dir: str, name: str, impl: str, timeout: int, keyword: str | None):
    with tempfile.TemporaryDirectory() as tmp:
        plugin = os.path.join(tmp, "fsuite_plugin.py")
        with open(plugin, "w") as fh:
            fh.write(_PLUGIN.replace("__IMPL__", repr(impl)).replace("__TIMEOUT__", str(timeout)))
        xml = os.path.join(tmp, "out.xml")
        deselect = " and ".join(f"not {c}" for c in EXCLUDED_CLASSES)
        if keyword:
            deselect = f"({keyword}) and {deselect}"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            os.path.join(test_dir, name),
            "-q",
            "-p",
            "fsuite_plugin",
            "-p",
            "no:cacheprovider",
            "-k",
            deselect,
            f"--junitxml={xml}",
            "-rN",
            "--rootdir",
            test_dir,
            "-W",
            "ignore",
        ]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([tmp, test_dir, os.environ.get("PYTHONPATH", "")]),
        )
        log = open(os.path.join(tmp, "log.txt"), "w")
        subprocess.run(
            cmd, env=env, cwd=test_dir, stdout=log, stderr=subprocess.STDOUT, timeout=3 * 3600
        )
        log.close()
        if not os.path.exists(xml):
            raise SystemExit(open(log.name).read()[-3000:])
        outcomes: dict[str, str] = {}
        for case in ET.parse(xml).getroot().iter("testcase"):
            tid = f"{name}::{case.get('classname')}::{case.get('name')}"
            failure = next((c for c in case if c.tag in ("failure", "error")), None)
            if failure is not None:
                message = (failure.get("message") or "").split("\n")[0][:300]
                outcomes[tid] = f"failed: {message}"
            elif any(c.tag == "skipped" for c in case):
                outcomes[tid] = "skipped"
            else:
                outcomes[tid] = "passed"
        return outcomes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--impl", choices=("thunderx", "torch.func", "both"), default="both")
    ap.add_argument("--timeout", type=int, default=30)
    ap.add_argument("-k", dest="keyword", default=None)
    ap.add_argument("--json", default=None, help="write per-test outcomes here")
    args = ap.parse_args(argv)
    impls = ("torch.func", "thunderx") if args.impl == "both" else (args.impl,)
    results = {impl: run(args.dir, impl, args.timeout, args.keyword) for impl in impls}
    for impl, res in results.items():
        n = {k: sum(v.startswith(k) for v in res.values()) for k in ("passed", "failed", "skipped")}
        print(f"{impl}: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped")
    if args.impl == "both":
        ref, tx = results["torch.func"], results["thunderx"]
        base = [t for t, o in ref.items() if o == "passed"]
        ok = [t for t in base if tx.get(t) == "passed"]
        print(
            f"thunderx passes {len(ok)} of the {len(base)} tests torch.func passes "
            f"({100.0 * len(ok) / max(len(base), 1):.1f}%)"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
