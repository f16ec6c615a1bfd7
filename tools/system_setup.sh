#!/usr/bin/env bash
# Installs and starts what the test suite needs on the host: Docker (Debian's docker.io, daemon started
# as root), bubblewrap and debootstrap. Idempotent; a no-op when everything is already there.
set -euo pipefail
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "system_setup: missing ${need[*]} and not root; install them first" >&2; exit 1; fi
  echo "system_setup: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then echo "system_setup: no Docker daemon answers and not root to start one" >&2; exit 1; fi
  echo "system_setup: starting dockerd"
  mkdir -p /var/log
  nohup dockerd >/var/log/legorl-dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "system_setup: dockerd did not come up; see /var/log/legorl-dockerd.log" >&2; tail -20 /var/log/legorl-dockerd.log >&2; exit 1; }
fi
