#!/usr/bin/env bash
# Installs and starts what the test suite needs on the host: Docker (Debian's docker.io, daemon started
# as root), bubblewrap, debootstrap, and the tools the sandboxes call on the host (iptables for
# proxy_only networks, prlimit, mount, ip). Idempotent: a no-op when everything is there and running.
#
# Robust against what fresh CI machines and containers-as-VMs do:
#  - dockerd already running (nothing to do), or installed but stopped (started with systemd when it is
#    the init, else directly in the background, logging to /var/log/legorl-dockerd.log);
#  - a stale /var/run/docker.pid of a dead daemon (dockerd refuses to start while it exists);
#  - iptables-nft on a kernel without nf_tables (switched to iptables-legacy so dockerd can program NAT);
#  - cgroup v1 or v2, or no cgroup filesystem mounted at all (then cgroup2 is mounted);
#  - a flaky package mirror (apt-get retried).
# LEGORL_SKIP_SYSTEM=1 skips everything (a host whose admin provides these services differently).
set -euo pipefail
log() { echo "system_setup: $*" >&2; }
[ "${LEGORL_SKIP_SYSTEM:-0}" = 1 ] && { log "skipped (LEGORL_SKIP_SYSTEM=1)"; exit 0; }
is_root() { [ "$(id -u)" = 0 ]; }

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v prlimit >/dev/null 2>&1 || need+=(util-linux)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v docker-init >/dev/null 2>&1 || need+=(tini)
if [ ${#need[@]} -gt 0 ]; then
  is_root || { log "missing ${need[*]} and not root; install them first"; exit 1; }
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  for attempt in 1 2 3; do
    if apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; then
      break
    fi
    [ "$attempt" = 3 ] && { log "apt-get failed three times"; exit 1; }
    log "apt-get failed (attempt $attempt), retrying"; sleep $((attempt * 5))
  done
fi

docker_up() { timeout 10 docker info >/dev/null 2>&1; }
docker_up && exit 0
is_root || { log "no Docker daemon answers and not root to start one"; exit 1; }

if [ -z "$(ls -A /sys/fs/cgroup 2>/dev/null)" ]; then
  log "no cgroup filesystem mounted; mounting cgroup2"
  mount -t cgroup2 none /sys/fs/cgroup
fi
if ! iptables -w -L -n >/dev/null 2>&1 && command -v iptables-legacy >/dev/null 2>&1 \
    && iptables-legacy -w -L -n >/dev/null 2>&1; then
  log "iptables (nf_tables) does not work on this kernel; switching to iptables-legacy"
  update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null
  update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null 2>&1 || true
fi

if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && command -v systemctl >/dev/null 2>&1; then
  log "starting docker with systemd"
  systemctl start docker || true
fi
if ! docker_up; then
  pidfile=/var/run/docker.pid
  if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
    log "removing the stale $pidfile of a dead daemon"; rm -f "$pidfile"
  fi
  if ! pgrep -x dockerd >/dev/null 2>&1; then
    log "starting dockerd"
    mkdir -p /var/log
    # Its own session: the daemon must outlive the process group of whatever shell or job started it.
    setsid nohup dockerd >/var/log/legorl-dockerd.log 2>&1 < /dev/null &
  fi
fi
for _ in $(seq 60); do docker_up && break; sleep 1; done
if ! docker_up; then
  log "dockerd did not come up; see /var/log/legorl-dockerd.log"
  tail -20 /var/log/legorl-dockerd.log >&2 || true
  exit 1
fi
log "docker is up"
