"""Settings for the whole test run (every package's tests and tests/)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# rock_core.testing's fixtures (``docker_client`` among them) for every package's tests and tests/.
pytest_plugins = ["rock_core.testing.fixtures"]

# Shared 2-core CI machines are slow and noisy: no per-example deadline there, and a fixed
# number of examples so a run's length does not depend on the machine's load.
settings.register_profile(
    "ci", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("dev", deadline=None, max_examples=50)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001 - pytest's hook
    """Write ``$ROCK_PYTEST_FINISHED`` when set: proof that the run reached its end.

    A test that ends the process itself (``os._exit``: a rocklet served inside the test process
    obeying ``/shutdown``, say) would stop pytest with status 0 and no summary; ``make test``
    checks for this file, so such a run fails instead of passing half done.
    """
    marker = os.environ.get("ROCK_PYTEST_FINISHED")
    if marker:
        with open(marker, "w", encoding="utf-8") as out:
            out.write(f"{int(exitstatus)} {session.testscollected}\n")
