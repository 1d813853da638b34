"""Test configuration: hypothesis profiles.

``HYPOTHESIS_PROFILE`` selects one:

* ``ci`` (the default): fast, derandomised, for a 2-core CI machine;
* ``dev``: hypothesis' own defaults (100 examples);
* ``long``: 20x the ``ci`` example counts, no deadline, for runs by hand:
  ``HYPOTHESIS_PROFILE=long python -m pytest``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

CI_EXAMPLES = 50

settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", deadline=None)
settings.register_profile(
    "long",
    max_examples=CI_EXAMPLES * 20,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
