"""Tell pip that the installed intel-tensorflow is TensorFlow.

intel-tensorflow installs the `tensorflow` module under another distribution name, so a
package that requires `tensorflow` (tensorflow-text, a user's requirements.txt line
`tensorflow==2.14.*`) would make pip download stock TensorFlow over it. A metadata-only
`tensorflow` distribution of the same version, requiring intel-tensorflow, satisfies those
requirements with what is installed; a line asking for another version still conflicts.
Does nothing where a `tensorflow` distribution is installed (the GPU image).
"""
import os
import sys
import sysconfig
from importlib import metadata


def main() -> int:
    try:
        metadata.version("tensorflow")
        return 0
    except metadata.PackageNotFoundError:
        pass
    version = metadata.version("intel-tensorflow")
    info = os.path.join(sysconfig.get_paths()["purelib"], f"tensorflow-{version}.dist-info")
    os.makedirs(info)
    files = {
        "METADATA": (f"Metadata-Version: 2.1\nName: tensorflow\nVersion: {version}\n"
                     f"Summary: The tensorflow module of intel-tensorflow {version}\n"
                     f"Requires-Dist: intel-tensorflow=={version}\n"),
        "INSTALLER": "trainer-image\n",
    }
    for name, text in files.items():
        with open(os.path.join(info, name), "w") as out:
            out.write(text)
    # pip uninstall removes only this metadata, never intel-tensorflow's files.
    with open(os.path.join(info, "RECORD"), "w") as out:
        out.writelines(f"tensorflow-{version}.dist-info/{name},,\n" for name in [*files, "RECORD"])
    print(f"tensorflow {version}: provided by intel-tensorflow {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
