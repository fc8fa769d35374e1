"""What a user installs: build the wheel, install it into a temporary directory and use it from
outside the repository, where the editable checkout cannot stand in for a missing file.

One build serves every test here (a module-scoped fixture); each subprocess has a timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Source folder -> the package it is installed as.
ROOTS = {
    "thunderx": "thunderx",
    "primitives": "thunderx/primitives",
    "transforms": "thunderx/transforms",
}
# Dependencies that are optional (extras), never needed to import thunderx or thunderx.testing.
OPTIONAL_DEPS = ("hypothesis", "jax", "nbclient", "nbformat", "PIL", "matplotlib", "expecttest")
# Modules that need one of them, and which.
NEEDS_OPTIONAL = {
    "thunderx.testing.strategies": "hypothesis",
    "thunderx.testing.programs": "hypothesis",
}


def _run(cmd, cwd, timeout, env=None):
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited with {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return proc


def _source_files() -> set[str]:
    """Every .py file (and py.typed) of the package, as its path inside the wheel."""
    files = set()
    for folder, package in ROOTS.items():
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and (path.suffix == ".py" or path.name == "py.typed"):
                if "__pycache__" not in path.parts:
                    files.add(f"{package}/{path.relative_to(REPO / folder).as_posix()}")
    return files


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel path, install folder, a working folder outside the repository)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    # Build from a copy, so the build leaves no build/ or egg-info in the checkout.
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for folder in ROOTS:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [sys.executable, "-m", "pip"]
    _run(
        pip + ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), "."],
        cwd=src,
        timeout=180,
        env=env,
    )
    (wheel,) = (tmp / "dist").glob("thunderx-*.whl")
    site = tmp / "site"
    _run(pip + ["install", "-q", "--no-deps", "--target", str(site), str(wheel)], tmp, 180, env)
    work = tmp / "work"
    work.mkdir()
    return wheel, site, work


def _env(site: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(site)
    return env


def test_wheel_holds_every_source_file_under_thunderx(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_source_files() - names)
    assert not missing, f"the wheel lacks {missing}: package discovery forgot them"
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"thunderx"}, f"the wheel installs top-level packages {sorted(top)}"
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "thunderx = thunderx.__main__:main" in text, text


_USE_INSTALLED = textwrap.dedent(
    """
    import importlib, os, pkgutil, sys
    site = os.path.realpath(sys.argv[1])
    import torch
    import thunderx
    from thunderx.testing import check_grads

    def installed_here(mod):
        return os.path.realpath(mod.__file__).startswith(site + os.sep)

    assert installed_here(thunderx), thunderx.__file__
    names = [m.name for m in pkgutil.walk_packages(thunderx.__path__, "thunderx.")]
    for name in names:
        mod = importlib.import_module(name)
        assert installed_here(mod), (name, mod.__file__)
    for name in ("thunderx.primitives", "thunderx.transforms", "thunderx.testing"):
        assert name in names, name
    assert "primitives" not in sys.modules and "transforms" not in sys.modules

    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    f = lambda x: (torch.sin(x) * x).sum()
    xr = x.clone().requires_grad_()
    want = torch.autograd.grad(f(xr), xr)[0]
    assert torch.allclose(thunderx.grad(f)(x), want)
    assert torch.allclose(thunderx.jit(thunderx.grad(f))(x), want)
    rows = torch.randn(4, 3, dtype=torch.float64)
    assert torch.allclose(thunderx.vmap(f)(rows), torch.stack([f(r) for r in rows]))
    check_grads(lambda x: torch.tanh(x) * x, (x,), order=2)
    print("used", len(names), "modules")
    """
)


def test_installed_wheel_imports_every_module_and_runs_transforms(installed):
    _, site, work = installed
    script = work / "use_installed.py"
    script.write_text(_USE_INSTALLED)
    proc = _run([sys.executable, str(script), str(site)], work, 120, _env(site))
    assert "used" in proc.stdout


_WITHOUT_EXTRAS = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class NoOptional:
        # Import fails for the optional dependencies, as where only the required ones are installed.
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in OPTIONAL:
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, NoOptional())
    import thunderx, thunderx.testing
    failed = {}
    for m in pkgutil.walk_packages(thunderx.__path__, "thunderx."):
        try:
            importlib.import_module(m.name)
        except ImportError as e:
            failed[m.name] = str(e)
    unexpected = {n: e for n, e in failed.items() if n not in NEEDS}
    assert not unexpected, f"modules that need an optional dependency: {unexpected}"
    for n, dep in NEEDS.items():
        assert n in failed and dep in failed[n], (n, failed.get(n))
    print("ok")
    """
)


def test_installed_wheel_needs_only_its_declared_dependencies(installed):
    _, site, work = installed
    script = work / "without_extras.py"
    header = f"OPTIONAL = {OPTIONAL_DEPS!r}\nNEEDS = {NEEDS_OPTIONAL!r}\n"
    script.write_text(header + _WITHOUT_EXTRAS)
    proc = _run([sys.executable, str(script)], work, 120, _env(site))
    assert proc.stdout.strip().endswith("ok")


def test_python_m_thunderx_from_the_installed_wheel(installed):
    _, site, work = installed
    proc = _run([sys.executable, "-m", "thunderx"], work, 120, _env(site))
    out = proc.stdout
    import thunderx

    assert f"thunderx {thunderx.__version__} ({site}" in out, out
    for what in (
        "torch ",
        "python ",
        "torch codegen:",
        "nvFuser:",
        "inductor:",
        "self-check passed",
    ):
        assert what in out, f"{what!r} missing from:\n{out}"
    assert "FAIL" not in out


def test_thunderx_console_script_is_installed(installed):
    _, site, work = installed
    script = site / "bin" / "thunderx"
    assert script.exists(), sorted(p.name for p in (site / "bin").iterdir())
    proc = _run([sys.executable, str(script), "--no-check"], work, 120, _env(site))
    assert "executors:" in proc.stdout and "self-check" not in proc.stdout
