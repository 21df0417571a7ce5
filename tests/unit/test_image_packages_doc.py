"""docs/image.md's table of what a script finds in each image says what each line's
requirements-image file installs: a row says "no" for our image exactly where none of its
packages is there, and the SDK's major version is the one the image's lock pins."""
import pathlib
import re

import pytest
from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINES = {"our 2.14 image": "lines/2.14/requirements-image.txt", "our 2.21 image": "lines/2.21/requirements-image.txt"}
LOCKS = {"our 2.14 image": "lines/2.14/image-constraints.txt", "our 2.21 image": "lines/2.21/image-constraints.txt"}
# A row of the table (its first cell, as it starts) -> the distributions it stands for.
ROWS = {
    "pandas, scikit-learn, OpenCV": ("pandas", "scikit-learn", "opencv-python-headless"),
    "tensorflow-datasets": ("tensorflow-datasets",),
    "tensorflow-hub, tensorflow-text": ("tensorflow-hub", "tensorflow-text"),
    "`sagemaker_tensorflow_container`": ("sagemaker-tensorflow-training",),
    "AWS CLI v1": ("awscli",),
}


def requirements(name: str) -> dict[str, Requirement]:
    lines = (ROOT / name).read_text().splitlines()
    parsed = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    return {requirement.name: requirement for requirement in parsed}


def table() -> tuple[list[str], list[list[str]]]:
    text = (ROOT / "docs" / "image.md").read_text()
    start = text.index("| | AWS's TF 2.14 image | our 2.14 image |")
    rows = [line.strip("|").split(" | ") for line in text[start:].splitlines() if line.startswith("|")]
    return [cell.strip() for cell in rows[0]], [[cell.strip() for cell in row] for row in rows[2:]]


@pytest.mark.parametrize("column", LINES)
def test_the_table_says_what_each_line_installs(column):
    header, rows = table()
    installed = requirements(LINES[column])
    for label, distributions in ROWS.items():
        row = next(row for row in rows if row[0].startswith(label))
        said = row[header.index(column)]
        assert said.startswith("no") is not any(name in installed for name in distributions), (column, label, said)
    sdk_row = next(row for row in rows if row[0].startswith("the SageMaker SDK"))
    major = re.match(r"(\d+)\.x", sdk_row[header.index(column)]).group(1)
    locked = re.search(r"^sagemaker==(\d+)\.", (ROOT / LOCKS[column]).read_text(), re.M).group(1)
    assert "sagemaker" in installed and locked == major, (column, locked, major)
