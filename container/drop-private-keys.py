"""Delete the private keys that Python packages ship in their test suites (gevent's, for
one: PEM files of a test server). They are public test material, but an image that holds
no private key at all is one whose users never have to ask which ones are harmless. Run in
the same build step as the pip install that brought them, so no layer holds them.

A private key here is a PEM block: its BEGIN line followed by base64, not code that only
names the header (google-auth, cryptography)."""
import re
import sys
from pathlib import Path

PEM_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----\r?\n(?:[A-Za-z0-9-]+: .*\r?\n)*\r?\n?"
                             rb"[A-Za-z0-9+/=]{40,}\r?\n")


def holds_a_private_key(path: Path) -> bool:
    data = path.read_bytes()
    return b"PRIVATE KEY-----" in data and PEM_PRIVATE_KEY.search(data) is not None


def main(folders: list[str]) -> None:
    for folder in folders:
        for path in Path(folder).rglob("*"):
            if path.is_file() and not path.is_symlink() and holds_a_private_key(path):
                print(f"drop-private-keys: removing {path}")
                path.unlink()


if __name__ == "__main__":
    main(sys.argv[1:])
