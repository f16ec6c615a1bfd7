#!/usr/bin/env bash
# A second Docker daemon on this machine, standing in for a second node's own daemon (a local 2-node Ray
# cluster whose node 2 runs its trials there: tests/rollout/test_ray_executor.py, tools/bench_rollout.py
# --second-daemon).
#
#   tools/second_dockerd.sh start [--name NAME] [--data-root DIR]   # prints DOCKER_HOST=unix:///run/NAME.sock
#   tools/second_dockerd.sh stop  [--name NAME] [--data-root DIR] [--purge]
#   tools/second_dockerd.sh status [--name NAME]                     # exit 0 when it answers
#
# Everything it owns is apart from the first daemon's: its socket /run/NAME.sock, exec root /run/NAME (its
# own managed containerd lives there), pidfile /run/NAME.pid, data root (default /var/lib/NAME), log
# /var/log/NAME.log and an empty config file (the first daemon's /etc/docker/daemon.json is not read).
# It has no default bridge and programs no iptables rules (--bridge=none --iptables=false): our sandboxes
# use `network_mode=none` or their own internal proxy_only network, whose bridge the daemon creates and
# whose firewall rules our code writes (legorl_jax/sandbox/docker_network.py), and image builds run
# without a network; so nothing here touches the first daemon's docker0 or its chains. The processes that
# use it must draw their proxy_only subnets from another pool than the first daemon's users
# (LEGORL_SANDBOX_SUBNETS): two daemons on one host do not see each other's networks.
#
# `start` is idempotent (a daemon that answers is kept), waits at most 60 s for the daemon, and then makes
# the offline base image present on it: `docker save` from the first daemon piped into `docker load` here,
# skipped when the same image id is there already. That is what a cluster user does once per node
# ("pre-pull", README "Scaling out"); a loaded image keeps its id, so task images hash and tag alike on
# both daemons. `stop` stops the daemon (SIGTERM, SIGKILL after 30 s), its containerd if left behind,
# unmounts and removes the exec root, the socket and the pidfile; `--purge` also removes the data root.
# Needs root.
set -euo pipefail
log() { echo "second_dockerd: $*" >&2; }
die() { log "$*"; exit 1; }

command=${1:-}
shift || true
name=legorl-docker2
data_root=
purge=0
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=${2:?--name needs a value}; shift 2 ;;
    --data-root) data_root=${2:?--data-root needs a value}; shift 2 ;;
    --purge) purge=1; shift ;;
    *) die "unknown argument ${1@Q} (usage: start|stop|status [--name NAME] [--data-root DIR] [--purge])" ;;
  esac
done
[[ "$name" =~ ^[a-z0-9][a-z0-9_.-]*$ ]] || die "--name must be lowercase letters, digits, '.', '_' or '-', got ${name@Q}"
[ "$name" != docker ] || die "--name docker is the first daemon's"
data_root=${data_root:-/var/lib/$name}
sock=/run/$name.sock
exec_root=/run/$name
pidfile=/run/$name.pid
logfile=/var/log/$name.log
host=unix://$sock
base=legorl-base:latest
first=${DOCKER_HOST:-}  # the daemon the base image comes from: the caller's (the default socket when unset)
[ "$first" != "$host" ] || die "DOCKER_HOST is $name's own socket; run this with the first daemon's"

up() { DOCKER_HOST=$host timeout 10 docker info >/dev/null 2>&1; }
daemon_pid() { [ -f "$pidfile" ] && cat "$pidfile" 2>/dev/null || true; }
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
# Deepest first, so a mount inside another goes before it.
unmount_under() { { grep -o " $1/[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" || true; done; }

load_base() {
  local wanted have tags
  if ! wanted=$(DOCKER_HOST=$first timeout 30 docker image inspect -f '{{.Id}}' "$base" 2>/dev/null); then
    log "the first daemon has no $base to load (python tools/build_images.py --base builds it); nodes on $name will build their own"
    return 0
  fi
  have=$(DOCKER_HOST=$host timeout 30 docker image inspect -f '{{.Id}}' "$base" 2>/dev/null || true)
  [ "$have" = "$wanted" ] && return 0
  # Every tag of that image: the task images' Dockerfiles name the content-hash tag, not :latest.
  tags=$(DOCKER_HOST=$first docker image inspect -f '{{join .RepoTags " "}}' "$base")
  log "loading $tags into $name"
  # shellcheck disable=SC2086  # one argument per tag
  DOCKER_HOST=$first timeout 300 docker save $tags | DOCKER_HOST=$host timeout 300 docker load >/dev/null
}

start() {
  if ! up; then
    [ "$(id -u)" = 0 ] || die "not root: starting a Docker daemon needs root"
    command -v dockerd >/dev/null || die "dockerd is not installed (tools/system_setup.sh installs it)"
    local pid
    pid=$(daemon_pid)
    if alive "$pid"; then
      log "dockerd $pid of $name runs but does not answer yet"
    else
      [ -z "$pid" ] || { log "removing the stale $pidfile of a dead daemon"; rm -f "$pidfile"; }
      rm -f "$sock"
      mkdir -p "$exec_root" "$data_root" /var/log
      echo '{}' >"$exec_root/daemon.json"
      log "starting dockerd $name (data root $data_root, log $logfile)"
      # Its own session: the daemon must outlive the process group of whatever started it.
      setsid nohup dockerd --config-file "$exec_root/daemon.json" --data-root "$data_root" \
        --exec-root "$exec_root" --pidfile "$pidfile" -H "$host" --bridge=none --iptables=false \
        --ip6tables=false >"$logfile" 2>&1 </dev/null &
    fi
    for _ in $(seq 60); do up && break; sleep 1; done
    if ! up; then
      tail -20 "$logfile" >&2 || true
      die "dockerd $name did not answer on $sock within 60 s (log above: $logfile)"
    fi
  fi
  load_base
  echo "DOCKER_HOST=$host"
}

stop() {
  local pid
  pid=$(daemon_pid)
  if alive "$pid"; then
    kill -TERM "$pid"
    for _ in $(seq 30); do alive "$pid" || break; sleep 1; done
    if alive "$pid"; then log "dockerd $pid of $name ignored SIGTERM for 30 s; killing it"; kill -KILL "$pid"; fi
    for _ in $(seq 10); do alive "$pid" || break; sleep 1; done
  fi
  # A daemon killed outright leaves its managed containerd running.
  local cpid
  cpid=$(cat "$exec_root/containerd/containerd.pid" 2>/dev/null || true)
  if alive "$cpid"; then kill -TERM "$cpid"; sleep 2; ! alive "$cpid" || kill -KILL "$cpid"; fi
  # Network namespaces and the containerd state are mounts under the exec root.
  if [ -d "$exec_root" ]; then
    unmount_under "$exec_root"
    rm -rf "$exec_root"
  fi
  rm -f "$sock" "$pidfile"
  if [ "$purge" = 1 ] && [ -d "$data_root" ]; then
    unmount_under "$data_root"
    rm -rf "$data_root"
  fi
  log "$name stopped"
}

case "$command" in
  start) start ;;
  stop) stop ;;
  status) up ;;
  *) die "usage: $0 start|stop|status [--name NAME] [--data-root DIR] [--purge], got ${command@Q}" ;;
esac
