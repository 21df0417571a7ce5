"""Prints the versions of the packages a requirements.txt may have touched."""
from importlib import metadata

for name in ("localdep", "numpy", "mpi4py"):
    try:
        print(f"version {name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(f"version {name} none")
