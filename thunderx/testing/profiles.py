"""Hypothesis settings profiles: `ci` (bounded, no deadline), `dev`, `thorough`."""

from __future__ import annotations

import os


def load_profile(name: str | None = None) -> str:
    """Register the profiles and load one: `name`, else THUNDERX_HYPOTHESIS_PROFILE, else `ci`
    under CI and `dev` elsewhere. Returns the name loaded."""
    from hypothesis import HealthCheck, settings

    common = dict(
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    settings.register_profile("ci", max_examples=8, derandomize=True, print_blob=True, **common)
    settings.register_profile("dev", max_examples=25, **common)
    settings.register_profile("thorough", max_examples=400, **common)
    if name is None:
        name = os.environ.get("THUNDERX_HYPOTHESIS_PROFILE") or (
            "ci" if os.environ.get("CI") else "dev"
        )
    if name not in ("ci", "dev", "thorough"):
        from thunderx.errors import ArgumentValueError, user_frame

        raise ArgumentValueError(
            f"load_profile: unknown profile {name!r} (from the argument or "
            f"THUNDERX_HYPOTHESIS_PROFILE); choose 'ci', 'dev' or 'thorough' (at {user_frame()})"
        )
    settings.load_profile(name)
    return name
