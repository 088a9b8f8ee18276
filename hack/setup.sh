#!/usr/bin/env bash
# What hack/demo.sh, hack/test.sh and .ci/run need on a Debian or Ubuntu machine, checked (and
# installed) in one place. They source this file; it is also a command:
#
#   bash hack/setup.sh install GROUP...    the missing packages of those groups of
#                                          hack/packages.txt (`all`: every group): as root,
#                                          apt-get update + install; otherwise one line saying
#                                          what to run, and exit 1
#   bash hack/setup.sh packages GROUP...   print those packages, one a line
#   bash hack/setup.sh rust [COMPONENT...] check Rust against Cargo.toml's rust-version, and the
#                                          cargo subcommands rustfmt and clippy if named
#   bash hack/setup.sh go THING...         check Go for the THINGs not built yet: cp:VERSION
#                                          (kube-apiserver, etcd, kubectl), node:VERSION (the
#                                          node binaries), helm (hack/helm.sh), registry
#                                          (hack/registry.sh), actionlint (hack/lint.sh),
#                                          promtool (hack/promtool.sh), kubevirt:VERSION
#                                          (hack/kubevirt.sh)
#
# Sourced, it also defines `step DESCRIPTION CMD...`, which runs CMD between the lines
# "==> DESCRIPTION ..." and "    done in N s" (on stderr, so that `$(step ...)` captures CMD's
# output only; with $STEP_TIMES set, also a line in that file), and puts /usr/local/go/bin and
# ~/.cargo/bin on PATH when go or cargo is not.

SETUP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v go >/dev/null || [[ ! -x /usr/local/go/bin/go ]] || export PATH="/usr/local/go/bin:$PATH"
command -v cargo >/dev/null || [[ ! -x "$HOME/.cargo/bin/cargo" ]] || export PATH="$HOME/.cargo/bin:$PATH"

setup_die() { echo "setup: $*" >&2; exit 1; }

# step DESCRIPTION CMD...: CMD, said before and timed after (and recorded: step_record, with the
# CPU time its processes took).
step() {
  local what="$1" start=$SECONDS code=0 cpu_before
  shift
  printf '==> %s ...\n' "$what" >&2
  children_cpu; cpu_before=$children_cpu_ticks
  "$@" || code=$?
  children_cpu
  if (( code == 0 )); then
    printf '    done in %d s\n' "$((SECONDS - start))" >&2
  else
    printf '    FAILED after %d s (exit code %d)\n' "$((SECONDS - start))" "$code" >&2
  fi
  step_record "$((SECONDS - start))" "$code" "$what" "$(( (children_cpu_ticks - cpu_before) / SETUP_CLK_TCK ))"
  return "$code"
}

# children_cpu: children_cpu_ticks set to the CPU time (user and system, in clock ticks) of this
# shell's children that have ended and been waited for, theirs included (/proc/PID/stat's cutime
# and cstime). Read without a subshell, whose children are not this shell's.
SETUP_CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"
children_cpu() {
  local stat fields
  read -r stat < "/proc/$BASHPID/stat"
  # After "PID (COMM) " the fields start at the 3rd: cutime is the 16th, cstime the 17th.
  read -r -a fields <<<"${stat##*) }"
  children_cpu_ticks=$(( fields[13] + fields[14] ))
}

# step_record SECONDS EXIT_CODE DESCRIPTION [CPU_SECONDS]: with $STEP_TIMES (a file) set, one line
# "SECONDS<TAB>ok|exit N<TAB>DESCRIPTION<TAB>CPU_SECONDS" appended to it: the table .ci/run prints
# at its end.
step_record() {
  [[ -n "${STEP_TIMES:-}" ]] || return 0
  local status=ok
  (( $2 == 0 )) || status="exit $2"
  printf '%s\t%s\t%s\t%s\n' "$1" "$status" "$3" "${4:-}" >> "$STEP_TIMES"
}

# version_ge A B: A >= B, as versions (1.10 > 1.9).
version_ge() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" == "$2" ]]; }

# setup_packages GROUP...: the packages of those groups in hack/packages.txt.
setup_packages() {
  local want=" $* " pkg groups
  [[ $# -gt 0 ]] || setup_die "setup_packages: name a group (build, node, test, bench or all)"
  while read -r pkg groups _; do
    [[ -n "$pkg" && "$pkg" != \#* ]] || continue
    if [[ "$want" == *" all "* || "$want" == *" $groups "* ]]; then echo "$pkg"; fi
  done < "$SETUP_ROOT/hack/packages.txt"
}

setup_apt() {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# setup_install GROUP...: the missing packages installed (root), or the one command to run.
setup_install() {
  local pkgs=() missing=() p sudo=""
  mapfile -t pkgs < <(setup_packages "$@")
  if ! command -v dpkg-query >/dev/null; then
    echo "setup: not a Debian or Ubuntu machine: make sure the equivalents of these are installed: ${pkgs[*]}" >&2
    return 0
  fi
  for p in "${pkgs[@]}"; do
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" == installed ]] || missing+=("$p")
  done
  (( ${#missing[@]} )) || return 0
  if (( EUID != 0 )); then
    command -v sudo >/dev/null && sudo="sudo "
    echo "setup: packages missing; run: ${sudo}apt-get update && ${sudo}apt-get install -y --no-install-recommends ${missing[*]}" >&2
    return 1
  fi
  step "installing ${missing[*]} (apt-get update, apt-get install)" setup_apt "${missing[@]}"
}

# setup_rust [rustfmt] [clippy]: Rust as new as Cargo.toml's rust-version, and those subcommands.
setup_rust() {
  local want have c missing=()
  want="$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$SETUP_ROOT/Cargo.toml")"
  if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
    setup_die "Rust $want or newer is needed (Cargo.toml's rust-version); cargo or rustc is not on PATH." \
      "Debian's and Ubuntu's rustc are older: install rustup (rustup.rs), then run: rustup toolchain install stable"
  fi
  have="$(rustc --version | awk '{print $2}')"
  if ! version_ge "$have" "$want"; then
    setup_die "Rust $want or newer is needed (Cargo.toml's rust-version); found rustc $have ($(command -v rustc))." \
      "With rustup, run: rustup update stable"
  fi
  for c in "$@"; do
    case "$c" in
      rustfmt) cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt) ;;
      clippy) cargo clippy --version >/dev/null 2>&1 || missing+=(clippy) ;;
      *) setup_die "setup_rust: unknown component $c" ;;
    esac
  done
  (( ${#missing[@]} == 0 )) || setup_die "cargo ${missing[*]} is needed; run: rustup component add ${missing[*]}"
}

# The go directive of what hack/test.sh and hack/demo.sh build by default (their go.mod files);
# other versions are checked by hack/control-plane.sh against the go.mod it downloads.
go_for() {
  case "$1" in
    cp:v1.34.4 | node:v1.34.4) echo 1.24.0 ;;
    cp:v1.35.4 | node:v1.35.4) echo 1.25.0 ;;
    cp:v1.37.2 | node:v1.37.2) echo 1.26.0 ;; # k8s.io/kubernetes and go.etcd.io/etcd/server/v3 v3.7.0
    helm) [[ "${HELM_VERSION:-v4.3.1}" != v4.3.1 ]] || echo 1.26.0 ;;
    registry) [[ "${REGISTRY_VERSION:-v3.1.2}" != v3.1.2 ]] || echo 1.26.0 ;;
    actionlint) [[ "${ACTIONLINT_VERSION:-v1.7.12}" != v1.7.12 ]] || echo 1.25.0 ;; # its go.mod
    promtool) [[ "${PROMETHEUS_VERSION:-v0.316.0}" != v0.316.0 ]] || echo 1.26.7 ;; # its go.mod
    cosign) [[ "${COSIGN_VERSION:-v3.1.3}" != v3.1.3 ]] || echo 1.26.0 ;; # its go.mod
    kubevirt:*) echo 1.24.0 ;; # kubevirt.io/kubevirt v1.7.0's and v1.8.4's go.mod (v1.6.0: 1.23.0)
  esac
}

# setup_go_at_least VERSION WHY: Go VERSION or newer, or a message that says so.
setup_go_at_least() {
  local have
  command -v go >/dev/null || setup_die "Go ${1:-(any)} or newer is needed $2; go is not on PATH nor in" \
    "/usr/local/go/bin. Debian's and Ubuntu's golang packages are older: unpack Go's release tarball into /usr/local/go"
  [[ -n "$1" ]] || return 0
  have="$(go env GOVERSION)"
  have="${have#go}"
  version_ge "$have" "$1" || setup_die "Go $1 or newer is needed $2; found go $have ($(command -v go))." \
    "GOTOOLCHAIN is local (no toolchain is downloaded): install a newer Go into /usr/local/go"
}

# setup_go THING...: Go for the things that are not built yet (cp:VERSION, node:VERSION, helm,
# registry, actionlint, promtool, cosign).
setup_go() {
  local t v d b m min="" todo=() built
  for t in "$@"; do
    v="${t#*:}"
    built=1
    case "$t" in
      cp:*)
        d="$(KUBE_VERSION="$v" bash "$SETUP_ROOT/hack/control-plane.sh" bin-dir 2>/dev/null)" || built=0
        for b in kube-apiserver etcd kubectl; do [[ -x "$d/$b" ]] || built=0; done
        (( built )) || todo+=("kube-apiserver, etcd and kubectl $v") ;;
      node:*)
        d="$(KUBE_VERSION="$v" bash "$SETUP_ROOT/hack/node.sh" bin-dir 2>/dev/null)" || built=0
        for b in kubelet kube-controller-manager kube-scheduler kube-proxy; do [[ -x "$d/$b" ]] || built=0; done
        (( built )) || todo+=("the node binaries $v") ;;
      helm)
        [[ -x "$(bash "$SETUP_ROOT/hack/helm.sh" path)" ]] || { built=0; todo+=("Helm ${HELM_VERSION:-v4.3.1}"); } ;;
      helm3)
        [[ -x "$(bash "$SETUP_ROOT/hack/helm.sh" path 3)" ]] || { built=0; todo+=("Helm 3"); } ;;
      registry)
        [[ -x "$(bash "$SETUP_ROOT/hack/registry.sh" path)" ]] \
          || { built=0; todo+=("the registry ${REGISTRY_VERSION:-v3.1.2}"); } ;;
      actionlint)
        [[ -x "$(bash "$SETUP_ROOT/hack/lint.sh" actionlint-path)" ]] \
          || { built=0; todo+=("actionlint ${ACTIONLINT_VERSION:-v1.7.12}"); } ;;
      promtool)
        [[ -x "$(bash "$SETUP_ROOT/hack/promtool.sh" path)" ]] \
          || { built=0; todo+=("promtool ${PROMETHEUS_VERSION:-v0.316.0}"); } ;;
      cosign)
        [[ -x "$(bash "$SETUP_ROOT/hack/cosign.sh" path)" ]] \
          || { built=0; todo+=("cosign ${COSIGN_VERSION:-v3.1.3}"); } ;;
      kubevirt:*)
        [[ -x "$(KUBEVIRT_VERSION="$v" bash "$SETUP_ROOT/hack/kubevirt.sh" bin 2>/dev/null)" ]] \
          || { built=0; todo+=("KubeVirt's virt-controller $v"); } ;;
      *) setup_die "setup_go: unknown thing $t (cp:VERSION, node:VERSION, kubevirt:VERSION, helm, helm3, registry, actionlint, promtool or cosign)" ;;
    esac
    (( built )) && continue
    m="$(go_for "$t")"
    if [[ -n "$m" ]] && { [[ -z "$min" ]] || ! version_ge "$min" "$m"; }; then min="$m"; fi
  done
  (( ${#todo[@]} )) || return 0
  local list
  list="$(printf '%s, ' "${todo[@]}")"
  setup_go_at_least "$min" "to build ${list%, } (each cached after its first build)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  cmd="${1:-}"
  shift || true
  case "$cmd" in
    install) setup_install "$@" ;;
    packages) setup_packages "$@" ;;
    rust) setup_rust "$@" ;;
    go) setup_go "$@" ;;
    *) sed -n '2,21s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
  esac
fi
