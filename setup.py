"""Package discovery that cannot forget a subpackage: every package under thunderx/, primitives/
and transforms/ is installed, the last two as thunderx.primitives and thunderx.transforms (so no
top-level `primitives` or `transforms` reaches site-packages). Metadata lives in pyproject.toml;
tests/test_wheel.py builds the wheel and checks that it holds every source file."""

from setuptools import find_packages, setup

ROOTS = {
    "thunderx": "thunderx",
    "thunderx.primitives": "primitives",
    "thunderx.transforms": "transforms",
}


def discover() -> list[str]:
    packages = []
    for name, folder in ROOTS.items():
        packages.append(name)
        packages += [f"{name}.{sub}" for sub in find_packages(folder)]
    return packages


setup(packages=discover(), package_dir=ROOTS)
