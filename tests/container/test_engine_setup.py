"""docker/engine.sh setup: several builds and tests set the engine up at once on one machine."""
import subprocess

import pytest

from conftest import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.container]

CONF_DIR = "/etc/containers/containers.conf.d"


@pytest.mark.cores(0)
def test_setups_at_the_same_time_all_succeed_and_leave_one_configuration():
    setups = [subprocess.Popen(["docker/engine.sh", "setup"], cwd=PROJECT_ROOT, stderr=subprocess.PIPE, text=True)
              for _ in range(6)]
    errors = [setup.communicate(timeout=600)[1] for setup in setups]
    assert [setup.returncode for setup in setups] == [0] * len(setups), errors
    if subprocess.run(["docker/engine.sh", "name"], cwd=PROJECT_ROOT, capture_output=True,
                      text=True).stdout.strip() == "podman":
        left = subprocess.run(["ls", "-A", CONF_DIR], capture_output=True, text=True).stdout.split()
        assert left == ["trainer.conf"], left
