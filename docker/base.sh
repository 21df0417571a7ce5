#!/usr/bin/env bash
# Make a base image (ubuntu:22.04 or ubuntu:24.04) locally, for machines that cannot pull from
# a registry: debootstrap that Ubuntu release from the Ubuntu archive and import it into the
# engine's store, so `FROM ubuntu:22.04` (the 2.14 line) or `FROM ubuntu:24.04` (the 2.21
# line) builds unchanged.
#
#   docker/base.sh ENGINE [22.04|24.04]
#
# Where HTTPS goes through a TLS-intercepting proxy, the host's extra CA certificates
# (from /usr/local/share/ca-certificates) are added to this base image, and pip is pointed
# at the system bundle. That belongs to this machine, not to the product: the Dockerfiles
# never mention it, and a build elsewhere pulls the real ubuntu:22.04.
set -euo pipefail

ENGINE="${1:?engine}"
RELEASE="${2:-22.04}"
IMAGE="docker.io/library/ubuntu:$RELEASE"
MIRROR="${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}"
case "$RELEASE" in
  22.04) SUITE=jammy ;;
  24.04) SUITE=noble ;;
  *) echo "[base] ubuntu $RELEASE: 22.04 or 24.04" >&2; exit 2 ;;
esac
# Debian 12's debootstrap predates noble; Ubuntu's releases since gutsy share one script.
SCRIPT=/usr/share/debootstrap/scripts/$SUITE
[ -e "$SCRIPT" ] || SCRIPT=/usr/share/debootstrap/scripts/gutsy

if "$ENGINE" image exists "$IMAGE" 2>/dev/null || "$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "[base] $IMAGE is already here"
  exit 0
fi

# Installed with podman by docker/engine.sh; with Docker Engine, here.
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "[base] installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "[base] fetching the Ubuntu archive keyring"
# awk reads to the end (no early exit) so that pipefail does not see gunzip's SIGPIPE.
keyring_deb="$(curl -fsS "$MIRROR/dists/$SUITE/main/binary-amd64/Packages.gz" | gunzip |
  awk '/^Package: ubuntu-keyring$/ {found=1} found && /^Filename:/ {print $2; found=0}')"
curl -fsS -o "$work/keyring.deb" "$MIRROR/$keyring_deb"
dpkg-deb -x "$work/keyring.deb" "$work/keyring"

echo "[base] debootstrap $SUITE (minbase)"
debootstrap --variant=minbase --include=ca-certificates \
  --keyring="$work/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg" \
  "$SUITE" "$work/root" "$MIRROR" "$SCRIPT" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }

cat > "$work/root/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main restricted universe multiverse
deb $MIRROR $SUITE-updates main restricted universe multiverse
deb $MIRROR $SUITE-security main restricted universe multiverse
SOURCES

if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$work/root/usr/local/share/ca-certificates/"
  chroot "$work/root" update-ca-certificates >/dev/null
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$work/root/etc/pip.conf"
fi
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*

tar -C "$work/root" -c . | "$ENGINE" import - "$IMAGE" >/dev/null
echo "[base] imported $IMAGE"
