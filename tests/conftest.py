import atexit
import os
import shutil
import tempfile

# Full type checks of every jaxpr built during the tests (re-run abstract eval per equation).
os.environ.setdefault("THUNDERX_CHECK_TYPES", "1")
# The suite keeps the CPU GEMM calibration (executors/cpu_gemm.py) in a directory of its own,
# never in the user's cache
if "THUNDERX_CACHE_DIR" not in os.environ:
    os.environ["THUNDERX_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunderx-test-cache-")
    atexit.register(shutil.rmtree, os.environ["THUNDERX_CACHE_DIR"], ignore_errors=True)

from thunderx.testing import load_profile  # noqa: E402

load_profile()

# Every generated program in the suite releases each intermediate after its last reader (the
# default releases only those of 64 KiB or more), so every test exercises that bookkeeping.
from thunderx.executors import release  # noqa: E402

release.RELEASE_BYTES = 0


def pytest_terminal_summary(terminalreporter):
    from tests.test_fuzz import CHECKED

    if CHECKED["programs"]:
        terminalreporter.write_line(
            f"random-program suite: {CHECKED['programs']} programs checked through jit, grad "
            "(vs finite differences), vmap, jit(vmap(grad)) vs torch.func and the nvFuser lowering"
        )
