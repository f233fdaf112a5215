# System packages: Slurm (controller, node daemon, accounting), munge, MariaDB for slurmdbd, netns tooling
# (tools/slurm_sandbox.py names the package to install when one of its programs is missing).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server mariadb-client iproute2 procps util-linux psmisc
      hostname)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian packages start daemons with their default config right after installing them; the sandbox runs its
# own (own sockets and ports), so stop the stock ones, but only just after installing: the init scripts stop
# daemons by program name, which would also stop a running sandbox.
if [ ${#missing[@]} -gt 0 ]; then
  for s in slurmctld slurmd slurmdbd munge mariadb; do
    (command -v systemctl >/dev/null && systemctl stop "$s" 2>/dev/null) || service "$s" stop >/dev/null 2>&1 || true
  done
fi
