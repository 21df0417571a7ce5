"""Tell pip that the installed intel-tensorflow (2.14 line) or tensorflow-cpu (2.21 line) is TensorFlow.

Both install the `tensorflow` module under another distribution name, so a package that
requires `tensorflow` (tensorflow-text, tf-keras, a user's requirements.txt line
`tensorflow==2.14.*`) would make pip download the full TensorFlow over it. A metadata-only
`tensorflow` distribution of the same version, requiring the installed one, satisfies those
requirements with what is installed; a line asking for another version still conflicts.
Does nothing where a `tensorflow` distribution is installed (the GPU image).
"""
import os
import sys
import sysconfig
from importlib import metadata


PROVIDERS = ("intel-tensorflow", "tensorflow-cpu")


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def main() -> int:
    try:
        metadata.version("tensorflow")
        return 0
    except metadata.PackageNotFoundError:
        pass
    provider = next(name for name in PROVIDERS if _installed(name))
    version = metadata.version(provider)
    info = os.path.join(sysconfig.get_paths()["purelib"], f"tensorflow-{version}.dist-info")
    os.makedirs(info)
    files = {
        "METADATA": (f"Metadata-Version: 2.1\nName: tensorflow\nVersion: {version}\n"
                     f"Summary: The tensorflow module of {provider} {version}\n"
                     f"Requires-Dist: {provider}=={version}\n"),
        "INSTALLER": "trainer-image\n",
    }
    for name, text in files.items():
        with open(os.path.join(info, name), "w") as out:
            out.write(text)
    # pip uninstall removes only this metadata, never the provider's files.
    with open(os.path.join(info, "RECORD"), "w") as out:
        out.writelines(f"tensorflow-{version}.dist-info/{name},,\n" for name in [*files, "RECORD"])
    print(f"tensorflow {version}: provided by {provider} {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
