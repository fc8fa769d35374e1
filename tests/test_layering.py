"""The import graph keeps its layers: a module imports only from its own layer or below, at
module level and inside functions alike (parsed with `ast`, so a function-local import cannot
hide an upward edge). And the linter runs as part of the suite."""

import ast
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = {"thunderx": "thunderx", "primitives": "thunderx.primitives"}
PACKAGES["transforms"] = "thunderx.transforms"

# Lowest first. The IR and core never import printing, HTML or executors; presentation (HTML,
# SVG, explain) sits above the executors; the package, the API and testing helpers on top.
LAYERS = [
    ("base", ["thunderx.errors", "thunderx.avals", "thunderx.tree", "thunderx.config"]),
    ("core", ["thunderx.ad_util", "thunderx.properties", "thunderx.axes", "thunderx.core"]),
    ("ir", ["thunderx.ir", "thunderx.validate"]),
    ("text", ["thunderx.printing"]),
    ("tracing", ["thunderx.tracing"]),
    ("primitives", ["thunderx.primitives"]),
    ("passes", ["thunderx.passes", "thunderx.rewrites"]),
    ("language", ["thunderx.lang"]),
    ("executors", ["thunderx.executors"]),
    (
        "transforms",
        ["thunderx.transforms", "thunderx.api", "thunderx.shapes", "thunderx.lowering"]
        + ["thunderx.collectives", "thunderx.peer_failures", "thunderx.shard_map"],
    ),
    ("presentation", ["thunderx.html", "thunderx.svg", "thunderx.explain", "thunderx.browser"]),
    ("package", ["thunderx", "thunderx.stats", "thunderx.testing"]),
]

# Upward imports that stay, each inside a function (run time, never import time) and for a
# stated reason. An entry no longer needed fails the test, so the list only shrinks.
ALLOWED_UPWARD = {
    ("thunderx.ad_util", "thunderx.primitives"): (
        "instantiate/add_tangents build zeros and sums from primitives, whose rules use ad_util"
    ),
    ("thunderx.tracing", "thunderx.lang"): (
        "trace_flat starts a staging trace in the language layer's randomness mode"
    ),
    ("thunderx.lang", "thunderx.transforms"): (
        "random draws ask vmap's trace for its randomness setting and batch size; "
        "decompositions with torch's derivative conventions use custom_jvp"
    ),
    ("thunderx.primitives", "thunderx.collectives"): (
        "collective primitives run through the process-group runtime of thunderx.collectives, "
        "which binds them (a cycle the runtime module closes at call time)"
    ),
    ("thunderx.primitives", "thunderx.transforms"): (
        "the call primitives' rules (jit_call, custom_jvp/vjp) run jvp/vmap/jit on sub-jaxprs"
    ),
}


def _modules() -> dict:
    mods = {}
    for folder, pkg in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts]
            parts = [p for p in parts if p != "__init__"]
            mods[".".join([pkg] + parts)] = path
    return mods


def _layer_of(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank is not None, f"{module} belongs to no layer: add it to LAYERS"
    return rank


def _imports(path: pathlib.Path, mods: dict):
    """(imported module, line, inside a function?) for every thunderx import in the file."""
    tree = ast.parse(path.read_text())
    local_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    local_lines.add(sub.lineno)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from thunderx import tree` imports the module thunderx.tree
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                for a in node.names
            ]
        for name in names:
            if name == "thunderx" or name.startswith("thunderx."):
                yield name, node.lineno, node.lineno in local_lines


def _family(module: str) -> str:
    for _, prefixes in LAYERS:
        for p in sorted(prefixes, key=len, reverse=True):
            if module == p or module.startswith(p + "."):
                return p
    return module


def test_no_module_imports_a_higher_layer():
    mods = _modules()
    problems, used = [], set()
    for module, path in sorted(mods.items()):
        here = _layer_of(module)
        for target, line, local in _imports(path, mods):
            there = _layer_of(target)
            if there <= here:
                continue
            key = (_family(module), _family(target))
            where = f"{path.relative_to(ROOT)}:{line}"
            if key in ALLOWED_UPWARD and local:
                used.add(key)
                continue
            kind = "a function-local" if local else "a module-level"
            problems.append(
                f"{where}: {module} ({LAYERS[here][0]}) has {kind} import of {target} "
                f"({LAYERS[there][0]})"
            )
    assert not problems, "imports of a higher layer:\n" + "\n".join(problems)
    stale = set(ALLOWED_UPWARD) - used
    assert not stale, f"ALLOWED_UPWARD entries no longer needed (remove them): {sorted(stale)}"


def test_ir_and_core_never_reach_presentation_or_executors():
    # the rule the layer order encodes, stated directly for the modules at the bottom
    mods = _modules()
    forbidden = ("thunderx.printing", "thunderx.html", "thunderx.svg", "thunderx.explain")
    forbidden += ("thunderx.executors", "thunderx.lowering")
    for module in ("thunderx.core", "thunderx.ir", "thunderx.avals", "thunderx.ad_util"):
        for target, line, _ in _imports(mods[module], mods):
            assert not target.startswith(forbidden), f"{module}:{line} imports {target}"


def test_the_layer_check_sees_function_local_imports(tmp_path):
    # the checker itself: an upward import hidden in a function is found
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from thunderx.html import esc\n    return esc\n")
    found = list(_imports(src, {"thunderx.html": src}))
    assert found == [("thunderx.html", 2, True)]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent))
    if exe:
        return [exe]
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.fail("ruff is not installed: `pip install -e '.[test]'` installs the linter")
    return [sys.executable, "-m", "ruff"]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff(args):
    proc = subprocess.run(
        _ruff() + args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"ruff {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
