"""What a script written for AWS's TensorFlow image finds in ours, and what its
requirements.txt may do, run for real: `train` in the CPU image with no network, the
script's code folder shipping the wheels its requirements.txt names."""
import os
import shutil

import pytest

from conftest import PROJECT_ROOT
from sdk_jobs import write_wheel
from test_image import run_in_container
from trainer.local.runner import LocalJob

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.cores(1)]  # one container at a time
SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts", "image_packages")


def script_job(tmp_path, program, hyperparameters=None, requirements=None, wheels=()):
    """A job folder running `program` from a copy of SCRIPTS with `requirements` as its
    requirements.txt and `wheels` ((name, version, requires, source)) beside it."""
    code = tmp_path / "code"
    shutil.copytree(SCRIPTS, code)
    for name, version, requires, source in wheels:
        write_wheel(code / f"{name}-{version}-py3-none-any.whl", name, source, version, requires)
    if requirements is not None:
        # No network in these containers: pip looks only beside the script.
        (code / "requirements.txt").write_text("--no-index\n--find-links .\n" + requirements)
    job = LocalJob({}, {"sagemaker_program": program, "sagemaker_submit_directory": str(code),
                        **(hyperparameters or {})})
    return job.lay_out(str(tmp_path / "job"))["algo-1"], str(code)


def failure_of(folder):
    path = os.path.join(folder, "output", "failure")
    return open(path).read() if os.path.exists(path) else ""


def test_a_script_finds_the_packages_and_commands_of_awss_image(image, tmp_path):
    folder, code = script_job(tmp_path, "uses_aws_image_packages.py")
    done = run_in_container(image, folder, [code])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:] + failure_of(folder)
    out = done.stdout
    assert "sklearn auc 1.0" in out and "cv2 resize (2, 2)" in out
    assert "text tokens [[b'split', b'these', b'words']]" in out and "aws toolkit sagemaker_tensorflow_container.training" in out
    assert "python runs" in out and "git version" in out and "aws-cli/1." in out + done.stderr
    assert "compiled extension says 42" in out


NEEDS_NUMPY_2 = ("needsnumpy2", "1.0", ("numpy>=2",), "NEEDS = 'numpy>=2'\n")
LOCALDEP = ("localdep", "1.0", (), "VALUE = 42\n")
FAKE_MPI4PY = ("mpi4py", "9.9.9", (), "FAKE = True\n")


@pytest.mark.parametrize("requirements, wheels, hyperparameters, outcome", [
    # a package that leaves the stack alone installs
    ("localdep==1.0\n", [LOCALDEP], {}, "version localdep 1.0"),
    # a line that moves a pin fails before pip runs, naming the line (after the two pip options)
    ("localdep\nnumpy==2.1.3\n", [LOCALDEP], {},
     "requirements.txt line 4: 'numpy==2.1.3' would replace the image's numpy 1.26.4"),
    ("protobuf==4.*\n", [], {}, "requirements.txt line 3: 'protobuf==4.*' would replace the image's protobuf 3.20.3"),
    ("tensorflow==2.15.0\n", [], {}, "'tensorflow==2.15.0' would replace the image's tensorflow 2.14.0"),
    # a package that needs another numpy: pip's conflict, in one line
    ("needsnumpy2\n", [NEEDS_NUMPY_2], {}, "needsnumpy2 1.0 depends on numpy>=2); the image has numpy 1.26.4"),
    # the override, for a user who means it
    ("mpi4py==9.9.9\n", [FAKE_MPI4PY], {"allow_pin_changes": "true"}, "version mpi4py 9.9.9"),
])
def test_requirements_txt_cannot_move_the_stack_unless_told(image, tmp_path, requirements, wheels,
                                                             hyperparameters, outcome):
    folder, code = script_job(tmp_path, "prints_versions.py", hyperparameters, requirements, wheels)
    done = run_in_container(image, folder, [code])
    if outcome.startswith("version"):
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:] + failure_of(folder)
        assert outcome in done.stdout and "version numpy 1.26.4" in done.stdout
        if hyperparameters:
            assert "allow_pin_changes=true: requirements.txt line 3: 'mpi4py==9.9.9' would replace" in done.stdout
        return
    assert done.returncode != 0
    first_line = failure_of(folder).splitlines()[0]
    assert outcome in first_line and "allow_pin_changes=true" in first_line, first_line
    assert "version numpy" not in done.stdout  # the script never ran
