# Sourced by tools/run_main.sh and tools/run_tests.sh: the sandbox's nodes each have a private /tmp, so a checkout
# under /tmp (its .venv, its scripts) is invisible to jobs. Such a checkout re-runs the calling script from a copy.
# Usage: source tools/outside_tmp.sh; run_outside_tmp "$ROOT" tools/<script>.sh "$@"
run_outside_tmp() {
  local root="$1" script="$2"
  shift 2
  case "$root" in
    /tmp/*)
      local copy
      copy="/var/tmp/beam-slurm-checkout-$(echo "$root" | sha256sum | cut -c1-12)"
      echo "$(basename "$script"): $root is under /tmp, which sandbox nodes cannot see; running from $copy" >&2
      rm -rf "$copy" && mkdir -p "$copy" && cp -a "$root/." "$copy/"
      exec bash "$copy/$script" "$@"
      ;;
  esac
}
