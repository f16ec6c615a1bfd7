#!/usr/bin/env bash
# N trainer processes on this machine, one JAX program (jax.distributed over 127.0.0.1, gloo collectives
# between the processes' CPU devices): how the tests and a laptop run a multi-host job.
#
#   tools/launch/local.sh 2 experiment=demo            # 2 processes x 4 CPU devices
#   DEVICES_PER_PROCESS=2 tools/launch/local.sh 4 ...  # 4 processes x 2 devices
#   DRY_RUN=1 tools/launch/local.sh 2 experiment=demo  # print the N command lines, start nothing
#
# Every process gets the same overrides plus its own mesh.distributed.* ones; process 0 hosts the
# coordination service on PORT (default: a free one). The first process to fail stops the others, and
# the script exits with its status (75: a peer was lost, see legorl_jax/train/distributed.py).
# Environment: PYTHON (default: .venv/bin/python, else python3), PORT, DEVICES_PER_PROCESS (default
# 8 / N), PEER_TIMEOUT_S (default 60), DRY_RUN.
set -euo pipefail

if [[ $# -lt 1 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N [train.py overrides...] (N: number of processes, a positive int; got '${1:-}')" >&2
  exit 2
fi
n=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-}
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
devices=${DEVICES_PER_PROCESS:-$(( 8 / n > 0 ? 8 / n : 1 ))}
port=${PORT:-$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
peer_timeout=${PEER_TIMEOUT_S:-60}

# The command line of process $1 (then the overrides), into the array `cmd`.
command_of() {
  local i=$1
  shift
  cmd=("$python" "$root/train.py" "$@"
    mesh.distributed.enabled=true
    "mesh.distributed.coordinator_address=127.0.0.1:$port"
    "mesh.distributed.num_processes=$n"
    "mesh.distributed.process_id=$i"
    "mesh.distributed.cpu_devices=$devices"
    "mesh.distributed.peer_timeout_s=$peer_timeout")
}

if [[ -n "${DRY_RUN:-}" ]]; then
  for (( i = 0; i < n; i++ )); do
    command_of "$i" "$@"
    printf '%q ' "${cmd[@]}"
    echo
  done
  exit 0
fi

export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
# conftest.py and users may force a device count through XLA_FLAGS; each process sets its own.
XLA_FLAGS=$(sed -E 's/--xla_force_host_platform_device_count=[0-9]+//g' <<< "${XLA_FLAGS:-}")
export XLA_FLAGS
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_all INT TERM
cd "$root"
for (( i = 0; i < n; i++ )); do
  command_of "$i" "$@"
  "${cmd[@]}" &
  pids+=($!)
done
status=0
for (( left = n; left > 0; left-- )); do
  code=0
  wait -n || code=$?  # any of them (naming reaped ones makes bash print "no such job")
  if (( code != 0 && status == 0 )); then
    status=$code
    stop_all
  fi
done
exit "$status"
