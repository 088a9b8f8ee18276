#!/usr/bin/env bash
# Mutation testing (cargo-mutants 27.1) of the library's pure and I/O modules against the unit
# tests only (`cargo test --lib`): the planner's rooms (src/plan/*.rs), src/config.rs, the I/O
# module (src/cluster.rs and src/cluster/*.rs, without its unit tests src/cluster/tests.rs),
# src/model.rs.
#
# NOT run in CI: a full run (260 mutants) takes half an hour to an hour on two shared cores (31
# minutes measured; the unmutated baseline first builds every dependency again in cargo-mutants'
# scratch copy). Run it by hand before resolving a change to one of these modules or to their
# unit tests:
#
#   cargo install cargo-mutants --version 27.1.0 --locked
#   hack/mutants.sh                                       # every file above
#   hack/mutants.sh src/plan/chart.rs src/config.rs       # some of them
#   hack/mutants.sh src/plan/kubevirt.rs --in-diff d.diff # further options go to cargo-mutants
#   hack/mutants.sh src/cluster.rs src/cluster/*.rs --jobs 1 -- cluster::
#                        # the I/O module against its own tests only (19 min on 2 shared cores)
#
# Output: target/mutants/mutants.out (MUTANTS_OUT overrides target/mutants; target/ is not
# committed). Each missed mutant is listed in missed.txt there, with its diff under diff/.
#
# Score per file: caught / (caught + missed), where a mutant whose tests time out counts as
# caught (the tests did not pass with it) and an unviable one (it does not build) counts in
# neither. Every count is printed, so the score can be recomputed another way. Exit status: that
# of cargo-mutants (0 when nothing was missed, 2 missed, 3 timeouts; see its book), or 1 when a
# file's score is below its target (each room of src/plan/ and config.rs 95%, each file of the I/O module 90%).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${MUTANTS_OUT:-$REPO_ROOT/target/mutants}"
# The planner's rooms, without the unit tests' shared helpers (src/plan/testing.rs).
ALL_FILES=()
for f in "$REPO_ROOT"/src/plan/*.rs; do
  [[ $f == */testing.rs ]] || ALL_FILES+=("src/plan/${f##*/}")
done
ALL_FILES+=(src/config.rs src/cluster.rs)
# The I/O module's files, without its unit tests (src/cluster/tests.rs).
for f in "$REPO_ROOT"/src/cluster/*.rs; do
  [[ $f == */tests.rs ]] || ALL_FILES+=("src/cluster/${f##*/}")
done
ALL_FILES+=(src/model.rs)

files=()
extra=()
for arg in "$@"; do
  case "$arg" in
    src/*.rs) files+=("$arg") ;;
    *) extra+=("$arg") ;;
  esac
done
[[ ${#files[@]} -gt 0 ]] || files=("${ALL_FILES[@]}")

if ! command -v cargo-mutants > /dev/null; then
  echo "mutants: cargo-mutants missing: cargo install cargo-mutants --version 27.1.0 --locked" >&2
  exit 1
fi

file_args=()
for f in "${files[@]}"; do
  file_args+=(--file "$f")
done

mkdir -p "$OUT"
start=$SECONDS
# Build the unit tests here first, so that each scratch copy starts from this target/ (copied
# with --copy-target) instead of building every dependency again.
(cd "$REPO_ROOT" && cargo test --lib --no-run --quiet)
rc=0
# `--cargo-arg=--lib` is `cargo test --lib` for both the build and the test phase (after `--`,
# it would reach only the test phase, and every mutant would build the integration tests too).
(cd "$REPO_ROOT" && cargo mutants --no-shuffle --copy-target=true --cargo-arg=--lib \
  --output "$OUT" "${file_args[@]}" ${extra[@]+"${extra[@]}"}) || rc=$?
elapsed=$((SECONDS - start))

result="$OUT/mutants.out"
# Counts the lines of one outcome list (caught.txt, ...) that name $1 ("src/x.rs:line:col: ...").
count() {
  local list="$result/$2.txt"
  [[ -f "$list" ]] || { echo 0; return; }
  grep -c "^$1:" "$list" || true
}
target_of() {
  case "$1" in
    src/plan/*.rs | src/config.rs) echo 95 ;;
    src/cluster.rs | src/cluster/*.rs) echo 90 ;;
    *) echo - ;;
  esac
}

echo
echo "mutants: $((elapsed / 60))m$((elapsed % 60))s; results in $result"
printf '%-26s %7s %7s %8s %9s %8s %7s\n' file caught missed timeout unviable score target
below=0
for f in "${files[@]}"; do
  caught=$(count "$f" caught)
  missed=$(count "$f" missed)
  timeout=$(count "$f" timeout)
  unviable=$(count "$f" unviable)
  detected=$((caught + timeout))
  want=$(target_of "$f")
  if ((detected + missed > 0)); then
    # Tenths of a percent, in integer arithmetic.
    tenths=$((1000 * detected / (detected + missed)))
    score="$((tenths / 10)).$((tenths % 10))%"
    [[ $want == - ]] || ((tenths >= 10 * want)) || below=1
  else
    score="-"
  fi
  [[ $want == - ]] || want="$want%"
  printf '%-26s %7d %7d %8d %9d %8s %7s\n' "$f" "$caught" "$missed" "$timeout" "$unviable" \
    "$score" "$want"
done
if [[ -s "$result/missed.txt" ]]; then
  echo
  echo "missed:"
  sed 's/^/  /' "$result/missed.txt"
fi
if ((below)); then
  echo "mutants: a score is below its target" >&2
  ((rc != 0)) || rc=1
fi
exit "$rc"
