import os

# Full type checks of every jaxpr built during the tests (re-run abstract eval per equation).
os.environ.setdefault("THUNDERX_CHECK_TYPES", "1")

from thunderx.testing import load_profile  # noqa: E402

load_profile()
