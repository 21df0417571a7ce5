"""Print the wheels of the installed TensorFlow's `and-cuda` extra, one requirement a line.

TensorRT is left out: the version TF 2.14 names (8.5.3.1) is no longer on PyPI, and
TensorRT serves TF-TRT inference only, never training.
"""
import re
from importlib.metadata import requires


def cuda_wheels(requirements):
    """The `and-cuda` extra's requirements (Requires-Dist strings) as name==version, without TensorRT."""
    wheels = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        if "and-cuda" not in marker:
            continue
        name, version = re.fullmatch(r"\s*([\w.-]+)\s*\(?([^)]*)\)?\s*", spec).groups()
        if name != "tensorrt":
            wheels.append(name + version.replace(" ", ""))
    return wheels


if __name__ == "__main__":
    print("\n".join(cuda_wheels(requires("tensorflow"))))
