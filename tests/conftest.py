import os

# Full type checks of every jaxpr built during the tests (re-run abstract eval per equation).
os.environ.setdefault("THUNDERX_CHECK_TYPES", "1")

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
