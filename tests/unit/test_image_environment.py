"""The image's environment defaults (container/environment): read as `train` reads them at
start, the job's own environment winning, a malformed line named."""
import os

import pytest

from trainer.commands.train import apply_image_environment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_shipped_defaults_parse_and_the_job_s_own_win():
    environ = {"KMP_BLOCKTIME": "0"}
    applied = apply_image_environment(os.path.join(ROOT, "container", "environment"), environ)
    assert environ["KMP_BLOCKTIME"] == "0" and "KMP_BLOCKTIME" not in applied  # the job's own setting
    assert applied["KMP_AFFINITY"] == "granularity=fine,compact,1,0"
    assert applied["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none" and applied["PYTHONUNBUFFERED"] == "1"


def test_no_file_outside_the_image(tmp_path):
    assert apply_image_environment(str(tmp_path / "none"), {}) == {}


def test_a_malformed_line_is_named(tmp_path):
    path = tmp_path / "environment"
    path.write_text("# defaults\nA=1\nnot a setting\n")
    with pytest.raises(ValueError, match=r"environment line 3: expected KEY=VALUE, got 'not a setting'"):
        apply_image_environment(str(path), {})
