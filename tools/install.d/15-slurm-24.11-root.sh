# Slurm 24.11 for `tools/slurm_sandbox.py up --slurm-version 24.11`: a Debian 13 (trixie) root file system with
# trixie's Slurm 24.11 and munge, built once with debootstrap and shared by every checkout of this machine
# (/var/tmp/beam-slurm-roots/slurm-24.11, env BEAM_SLURM_2411_ROOT). The sandbox runs its daemons and client
# commands inside it with chroot; MariaDB stays the host's own.
# Not run by default (tools/install.sh runs it with BEAM_SLURM_2411=1 or when named: tools/install.sh
# 15-slurm-24.11-root). Rebuilt when this recipe changes (a stamp with its hash lives inside the root).
# Exit 75: Debian 13 packages cannot be reached from here (install.sh reports the part as skipped).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
ROOTFS="${BEAM_SLURM_2411_ROOT:-/var/tmp/beam-slurm-roots/slurm-24.11}"
STAMP_NAME=".beam-slurm-root-recipe"
RECIPE="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
# What runs inside the root: the Slurm daemons and clients, munge, and what a job's Python (the checkout's venvs,
# bound in from the host) needs from the system: libffi8 (ctypes), libgdbm6t64 (dbm), ca-certificates.
INCLUDE="slurmctld,slurmd,slurmdbd,slurm-client,munge,libffi8,libgdbm6t64,ca-certificates,hostname,procps,iproute2"
# slurmdbd 24.11.5 fails against trixie's libmariadb3 (11.8: "Number of columns in result ... exceeds maximum");
# bookworm's (10.11) works: unpacked into the root here and put on slurmdbd's LD_LIBRARY_PATH by the sandbox.
BOOKWORM_MARIADB_DIR="opt/beam-bookworm-libmariadb"

if [ "$(id -u)" != 0 ]; then echo "15-slurm-24.11-root: run as root (debootstrap, chroot)" >&2; exit 2; fi

# The mirror apt already uses (deb822 URIs line, else a one-line `deb` entry), the Debian archive itself.
MIRROR="${BEAM_DEBIAN_MIRROR:-}"
if [ -z "$MIRROR" ]; then
  MIRROR="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" { print $2 }' \
            | grep -E '/debian/?$' | head -1 || true)"
fi
if [ -z "$MIRROR" ]; then
  MIRROR="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/) { print $i; break } }' \
            | grep -E '/debian/?$' | head -1 || true)"
fi
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
MIRROR="${MIRROR%/}"

if [[ "$(cat /etc/debian_version 2>/dev/null)" == 13* ]]; then
  # Debian 13's own Slurm is 24.11: the sandbox uses the host's programs, no root is needed. Not tried yet.
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurmdbd slurm-client munge >/dev/null
  # slurmdbd still needs Debian 12's libmariadb3: fetched from the same mirror's bookworm with an apt of its own.
  if [ ! -e "/$BOOKWORM_MARIADB_DIR/libmariadb.so.3" ]; then
    apt_dir="$(mktemp -d)"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    echo "deb $MIRROR bookworm main" > "$apt_dir/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
    apt-get "${apt_opts[@]}" update -qq
    (cd "$apt_dir" && apt-get "${apt_opts[@]}" download -qq libmariadb3 >/dev/null)
    dpkg-deb -x "$apt_dir"/libmariadb3_*.deb "$apt_dir/x"
    mkdir -p "/$BOOKWORM_MARIADB_DIR"
    cp -a "$apt_dir"/x/usr/lib/*/libmariadb.so.3 "/$BOOKWORM_MARIADB_DIR/"
    rm -rf "$apt_dir"
  fi
  echo "15-slurm-24.11-root: Debian 13 host: its own Slurm $(dpkg-query -W -f '${Version}' slurmctld) is used, no root"
  exit 0
fi

if [ -f "$ROOTFS/$STAMP_NAME" ] && [ "$(cat "$ROOTFS/$STAMP_NAME")" = "$RECIPE" ]; then
  echo "15-slurm-24.11-root: $ROOTFS is up to date"
  exit 0
fi

if ! timeout 30 python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read(64)' \
     "$MIRROR/dists/trixie/Release" 2>/dev/null; then
  echo "15-slurm-24.11-root: Debian 13 (trixie) packages cannot be reached at $MIRROR/dists/trixie/Release;" \
       "no Slurm 24.11 root built (set BEAM_DEBIAN_MIRROR to a Debian mirror that has trixie, then run" \
       "tools/install.sh 15-slurm-24.11-root)" >&2
  exit 75
fi

command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }

# A root left mounted by a running 24.11 sandbox cannot be replaced.
if grep -q " $ROOTFS/" /proc/self/mountinfo; then
  echo "15-slurm-24.11-root: $ROOTFS is in use (mounted); run tools/slurm_sandbox.py down --slurm-version 24.11 first" >&2
  exit 2
fi

start=$(date +%s)
BUILD="$ROOTFS.build.$$"
rm -rf "$BUILD"
mkdir -p "$(dirname "$ROOTFS")"
trap 'rm -rf "$BUILD"' EXIT
# Package scripts inside the root must not start daemons (munge's would): policy-rc.d exits 101 before the
# packages are configured.
mkdir -p "$BUILD/usr/sbin"
printf '#!/bin/sh\nexit 101\n' > "$BUILD/usr/sbin/policy-rc.d"
chmod 755 "$BUILD/usr/sbin/policy-rc.d"
echo "15-slurm-24.11-root: debootstrap trixie from $MIRROR into $ROOTFS (a few minutes)"
if ! debootstrap --variant=minbase --include="$INCLUDE" trixie "$BUILD" "$MIRROR" > "$BUILD.log" 2>&1; then
  tail -20 "$BUILD.log" >&2
  echo "15-slurm-24.11-root: debootstrap failed (whole log: $BUILD.log)" >&2
  exit 1
fi
rm -f "$BUILD.log"
[ -x "$BUILD/usr/sbin/policy-rc.d" ] || { printf '#!/bin/sh\nexit 101\n' > "$BUILD/usr/sbin/policy-rc.d"; chmod 755 "$BUILD/usr/sbin/policy-rc.d"; }
printf '127.0.0.1 localhost\n' > "$BUILD/etc/hosts"

# bookworm's MariaDB client library, from the host's own apt (the same Debian 12 the host runs).
work="$(mktemp -d)"
chown _apt "$work" 2>/dev/null || true  # apt downloads as _apt where it can
(cd "$work" && apt-get download -qq libmariadb3 >/dev/null)
dpkg-deb -x "$work"/libmariadb3_*.deb "$work/x"
mkdir -p "$BUILD/$BOOKWORM_MARIADB_DIR"
cp -a "$work"/x/usr/lib/*/libmariadb.so.3 "$BUILD/$BOOKWORM_MARIADB_DIR/"
rm -rf "$work"

chroot "$BUILD" /usr/sbin/slurmctld -V
apt_clean() { rm -rf "$BUILD"/var/cache/apt/archives/*.deb "$BUILD"/var/lib/apt/lists/*; }
apt_clean
echo "$RECIPE" > "$BUILD/$STAMP_NAME"
rm -rf "$ROOTFS"
mv "$BUILD" "$ROOTFS"
trap - EXIT
echo "15-slurm-24.11-root: built $ROOTFS in $(( $(date +%s) - start )) s, $(du -sh "$ROOTFS" | cut -f1) on disk"
