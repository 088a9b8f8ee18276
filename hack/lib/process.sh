# shellcheck shell=bash
# Sourced by the scripts that start a process and stop it again by the PID they wrote
# (hack/control-plane.sh, node.sh, kubevirt.sh, registry.sh): never by name (the host is shared).

# alive PID: running (a zombie is not: it waits only for its parent to reap it).
alive() {
  local state
  state="$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)"
  [[ -n "$state" && "$state" != Z ]]
}

# stop_pid PIDFILE: SIGTERM, then SIGKILL after 10 s; the file removed.
stop_pid() {
  local f="$1" pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  if alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# kill_pid PIDFILE: SIGKILL, and wait until it is gone; the file removed.
kill_pid() {
  local f="$1" pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
  rm -f "$f"
}
