"""A script's requirements.txt against the image's pins, table-driven: which lines would
move the training stack (named with file and line), which are harmless, what the override
does, the environment pip runs in, and pip's conflict made into one line. The same rules
run for real (pip, the image) in tests/container/test_script_packages.py."""
import os

import pytest

from trainer.errors import JobError
from trainer.script import requirements

CPU_IMAGE_PINS = {"intel-tensorflow": "2.14.0", "tensorflow": "2.14.0", "keras": "2.14.0", "numpy": "1.26.4",
                  "protobuf": "3.20.3", "horovod": "0.28.1", "mpi4py": "4.1.2", "tensorflow-io": "0.34.0"}
GPU_IMAGE_PINS = {**{k: v for k, v in CPU_IMAGE_PINS.items() if k != "intel-tensorflow"}, "tensorflow": "2.14.1"}


@pytest.mark.parametrize("text, pins, problem", [
    # harmless: not pinned, or a version the image has
    ("pandas==2.2.0\nlocaldep\n", CPU_IMAGE_PINS, None),
    ("numpy\nnumpy>=1.20,<2\nprotobuf==3.20.*\n", CPU_IMAGE_PINS, None),
    ("tensorflow==2.14.*\n", CPU_IMAGE_PINS, None),
    ("tensorflow>=2.14,<2.15\n", GPU_IMAGE_PINS, None),
    ("numpy==2.1.3; python_version < '3.0'\n", CPU_IMAGE_PINS, None),  # not for this Python
    ("--index-url https://example.com/simple\n-f ./wheels\n", CPU_IMAGE_PINS, None),
    # a pinned package moved: the line, its number and the image's version
    ("pandas\nnumpy==2.1.3\n", CPU_IMAGE_PINS, "requirements.txt line 2: 'numpy==2.1.3' would replace the image's numpy 1.26.4"),
    ("# comment\n\nprotobuf==4.*  # newer\n", CPU_IMAGE_PINS, "line 3: 'protobuf==4.*' would replace the image's protobuf 3.20.3"),
    ("tensorflow==2.15.0\n", CPU_IMAGE_PINS, "'tensorflow==2.15.0' would replace the image's tensorflow 2.14.0"),
    ("Keras>=3\n", GPU_IMAGE_PINS, "would replace the image's keras 2.14.0"),
    ("tensorflow-gpu==2.14.0\n", GPU_IMAGE_PINS, "would install a second TensorFlow (tensorflow-gpu) beside the image's tensorflow 2.14.1"),
    ("intel-tensorflow==2.14.0\n", GPU_IMAGE_PINS, "would install a second TensorFlow (intel-tensorflow)"),
    ("numpy \\\n  ==2.0.0\n", CPU_IMAGE_PINS, "line 1: 'numpy   ==2.0.0' would replace"),
    ("numpy @ https://example.com/numpy-2.0.0-cp310-none-any.whl\n", CPU_IMAGE_PINS, "would replace the image's numpy 1.26.4 with https://"),
    ("git+https://github.com/horovod/horovod.git#egg=horovod\n", CPU_IMAGE_PINS, "would build horovod from source"),
])
def test_requirements_lines_against_the_pins(tmp_path, text, pins, problem):
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    if problem is None:
        assert requirements.check_requirements(str(path), pins) == []
        return
    with pytest.raises(JobError) as raised:
        requirements.check_requirements(str(path), pins)
    assert problem in str(raised.value)
    assert "allow_pin_changes=true" in str(raised.value)


def test_an_included_file_is_named_with_its_own_line(tmp_path):
    (tmp_path / "base.txt").write_text("pandas\nprotobuf>=4\n")
    (tmp_path / "requirements.txt").write_text("-r base.txt\nscikit-learn\n")
    with pytest.raises(JobError, match=r"base.txt line 2: 'protobuf>=4'"):
        requirements.check_requirements(str(tmp_path / "requirements.txt"), CPU_IMAGE_PINS)


def test_the_override_turns_errors_into_warnings_and_drops_the_constraints(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("numpy==2.1.3\nprotobuf==4.25.0\n")
    changes = requirements.check_requirements(str(path), CPU_IMAGE_PINS, allow_changes=True)
    assert [change.split(":")[0] for change in changes] == ["requirements.txt line 1", "requirements.txt line 2"]
    assert "PIP_CONSTRAINT" not in requirements.pip_environment(CPU_IMAGE_PINS, str(tmp_path), allow_changes=True)


@pytest.mark.parametrize("warm_pool, cache", [(None, None), ("/opt/ml/sagemaker/warmpoolcache", "/opt/ml/sagemaker/warmpoolcache/pip")])
def test_pip_runs_under_the_pins_and_caches_in_the_warm_pool(tmp_path, monkeypatch, warm_pool, cache):
    if warm_pool:
        monkeypatch.setenv(requirements.WARM_POOL_CACHE, warm_pool)
    else:
        monkeypatch.delenv(requirements.WARM_POOL_CACHE, raising=False)
    env = requirements.pip_environment(CPU_IMAGE_PINS, str(tmp_path))
    assert env.get("PIP_CACHE_DIR") == cache
    pinned = open(env["PIP_CONSTRAINT"]).read().splitlines()
    assert "numpy==1.26.4" in pinned and "tensorflow==2.14.0" in pinned


def test_the_pins_are_what_is_installed():
    from importlib import metadata
    pins = requirements.core_pins()
    assert pins["numpy"] == metadata.version("numpy") and pins["protobuf"] == metadata.version("protobuf")
    assert any(name in pins for name in requirements.TENSORFLOW_NAMES)


PIP_CONFLICT = """Processing ./needsnumpy2-1.0-py3-none-any.whl
INFO: pip is looking at multiple versions of needsnumpy2 to determine which version is compatible with other requirements.
ERROR: Cannot install needsnumpy2==1.0 because these package versions have conflicting dependencies.

The conflict is caused by:
    needsnumpy2 1.0 depends on numpy>=2
    The user requested (constraint) numpy==1.26.4

To fix this you could try to:
"""


@pytest.mark.parametrize("output, expected", [
    (PIP_CONFLICT, "requirements.txt needs a version of a package this image pins (needsnumpy2 1.0 depends on "
                   "numpy>=2); the image has numpy 1.26.4"),
    ("ERROR: No matching distribution found for nosuchpackage\n", None),
])
def test_pips_conflict_in_one_line(output, expected):
    explained = requirements.explain_pip_failure(output, CPU_IMAGE_PINS)
    if expected is None:
        assert explained is None
    else:
        assert explained.startswith(expected) and "allow_pin_changes=true" in explained
