"""Test configuration: hypothesis profiles.

``HYPOTHESIS_PROFILE`` selects one:

* ``ci`` (the default): fast, derandomised, for a 2-core CI machine;
* ``dev``: hypothesis' own defaults (100 examples);
* ``long``: 20x the ``ci`` example counts, no deadline, for runs by hand:
  ``HYPOTHESIS_PROFILE=long python -m pytest``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
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

# `serve` keeps its sessions in the user's data directory and its settings (the
# access token) in the user's config directory by default: the tests' servers (and
# the processes they start) get ones of their own, gone afterwards
_DATA_HOME = tempfile.mkdtemp(prefix="ahp-test-data-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME
atexit.register(shutil.rmtree, _DATA_HOME, True)
_CONFIG_HOME = tempfile.mkdtemp(prefix="ahp-test-config-")
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME
atexit.register(shutil.rmtree, _CONFIG_HOME, True)


@pytest.fixture(autouse=True)
def _own_data_home(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's servers start with an empty default store and no settings of their own."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data-home")))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))
