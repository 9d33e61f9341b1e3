#!/usr/bin/env bash
# Our own Docker engine for the kind path on a machine without one (CI, this sandbox): Debian's
# docker.io, installed with apt when missing, started in the background with vfs storage and no bridge
# or iptables (what works in a sandbox), its data root in the cache so images survive between runs.
#
#   hack/kind/dockerd.sh start    start it (or find it running); prints DOCKER_HOST=... on stdout
#   hack/kind/dockerd.sh stop     stop it, only when this script started it (its recorded PID)
#   hack/kind/dockerd.sh status   say whether it runs
#
# It listens on its own socket ($KIND_DOCKER_RUN/docker.sock, default /run/fakeplugin-kind), so it
# never takes over another Docker engine's socket; the hack/kind scripts use it when DOCKER_HOST is
# unset. Data root: $FAKEPLUGIN_CACHE/kind/docker. Log: $FAKEPLUGIN_CACHE/kind/dockerd.log.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PIDFILE="$KIND_DOCKER_RUN/dockerd.pid"
DATA_ROOT="$KIND_CACHE/docker"
LOG="$KIND_CACHE/dockerd.log"
export DOCKER_HOST="$KIND_DOCKER_HOST"

running_pid() {
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null)" || return 1
  [[ -n "$pid" && -d "/proc/$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]] || return 1
  echo "$pid"
}

start() {
  if running_pid >/dev/null && docker info >/dev/null 2>&1; then
    say "dockerd already running (PID $(running_pid))"
    echo "DOCKER_HOST=$DOCKER_HOST"
    return
  fi
  if ! command -v dockerd >/dev/null; then
    [[ "$(id -u)" == 0 ]] || die "dockerd is not installed and installing it needs root (apt-get install docker.io)"
    say "installing Debian's docker.io (apt-get)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  fi
  mkdir -p "$KIND_DOCKER_RUN" "$DATA_ROOT"
  say "starting dockerd (data root $DATA_ROOT, log $LOG)"
  # setsid: the engine outlives this script and is not in its process group.
  setsid dockerd --host "$DOCKER_HOST" --pidfile "$PIDFILE" --exec-root "$KIND_DOCKER_RUN/exec" \
    --data-root "$DATA_ROOT" --storage-driver vfs --iptables=false --ip-masq=false --bridge=none \
    </dev/null >>"$LOG" 2>&1 &
  local deadline=$((SECONDS + 60))
  until docker info >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { tail -20 "$LOG" >&2; die "dockerd did not answer within 60 s (log: $LOG)"; }
    sleep 1
  done
  say "dockerd running (PID $(running_pid)), $(docker version --format 'engine {{.Server.Version}}')"
  echo "DOCKER_HOST=$DOCKER_HOST"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    say "dockerd: not running (nothing of ours to stop)"
    return
  fi
  say "stopping dockerd (PID $pid)"
  kill -TERM "$pid"
  local deadline=$((SECONDS + 60))
  while [[ -d "/proc/$pid" ]]; do
    ((SECONDS < deadline)) || die "dockerd (PID $pid) still running 60 s after SIGTERM"
    sleep 1
  done
  say "dockerd stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if pid="$(running_pid)"; then say "running (PID $pid)"; else say "not running"; exit 1; fi ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
