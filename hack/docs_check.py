#!/usr/bin/env python3
"""What the docs say of the contract, checked against the code and the manifests:

- every exit code the binary defines (src/error.rs, `mod exit`) has a row in the README's
  exit-code table, with a meaning, and no row names a code the binary does not define; the
  table's Job column says what the Jobs' podFailurePolicy does with it (in any Job);
- every variable of the configuration table (src/config.rs, `VARIABLES`) is in the README's
  variables table and in docs/configuration.md;
- docs/jobs.md's "Job contract" table gives each manifest's activeDeadlineSeconds, backoffLimit
  and podFailurePolicy as `kubectl kustomize` renders them, for every manifest that makes a Job.

Usage: hack/docs_check.py [KUBECTL]   (default: $KUBECTL, else the pinned kubectl of
hack/control-plane.sh). Run by hack/lint.sh; exit 1 on a finding.
"""
import os
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
problems = []


def table_after(text, marker):
    """The rows (lists of cells) of the first Markdown table after `marker`."""
    _, found, rest = text.partition(marker)
    if not found:
        problems.append(f"no {marker!r} found")
        return []
    lines = rest.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("|")), None)
    if start is None:
        problems.append(f"no table after {marker!r}")
        return []
    rows = []
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        rows.append([c.strip() for c in l.strip().strip("|").split("|")])
    return rows


def exit_codes():
    src = (ROOT / "src/error.rs").read_text()
    body = src.split("pub mod exit {", 1)[1].split("\n}", 1)[0]
    return {int(n): name for name, n in re.findall(r"pub const (\w+): u8 = (\d+);", body)}


def rendered(kubectl, manifest):
    out = subprocess.run([kubectl, "kustomize", str(ROOT / manifest)], check=True,
                         capture_output=True, text=True).stdout
    jobs = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "Job"]
    return jobs[0] if jobs else None


def policy(job):
    """activeDeadlineSeconds, backoffLimit, and the podFailurePolicy's actions, as the table writes them."""
    spec = job["spec"]
    out = {"Ignore": [], "FailJob": [], "Count": []}
    for rule in spec.get("podFailurePolicy", {}).get("rules", []):
        action = rule["action"]
        if "onExitCodes" in rule:
            out[action] += [str(c) for c in rule["onExitCodes"]["values"]]
        for cond in rule.get("onPodConditions", []):
            if action == "Ignore":
                out[action].append(f"`{cond['type']}`")
    return {
        "activeDeadlineSeconds": str(spec.get("activeDeadlineSeconds")),
        "backoffLimit": str(spec.get("backoffLimit")),
        **{k: ", ".join(v) for k, v in out.items()},
    }


def main():
    readme = (ROOT / "README.md").read_text()
    configuration = (ROOT / "docs/configuration.md").read_text()
    jobs_md = (ROOT / "docs/jobs.md").read_text()

    codes = exit_codes()
    rows = table_after(readme, "**Exit codes**")
    documented = {}
    for r in rows:
        if r and r[0].isdigit():
            documented[int(r[0])] = r
    for code, name in sorted(codes.items()):
        if code not in documented:
            problems.append(f"README: exit code {code} ({name}) has no row in the exit-code table")
        elif len(documented[code]) < 3 or not documented[code][1]:
            problems.append(f"README: exit code {code} has no meaning")
    for code in sorted(set(documented) - set(codes)):
        problems.append(f"README: exit code {code} is documented but src/error.rs defines no such code")

    variables = re.findall(r'^\s*\(\s*"([A-Z_]+)",', (ROOT / "src/config.rs").read_text().split(
        "pub const VARIABLES", 1)[1].split("];", 1)[0], re.M)
    readme_vars = " ".join(r[0] for r in table_after(readme, "**Variables**"))
    conf_vars = " ".join(r[0] for r in table_after(configuration, "## Configuration"))
    for v in variables:
        if f"`{v}`" not in readme_vars:
            problems.append(f"README: the variable {v} has no row in the variables table")
        if f"`{v}`" not in conf_vars:
            problems.append(f"docs/configuration.md: the variable {v} has no row in the table")

    kubectl = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KUBECTL")
    if not kubectl:
        bin_dir = subprocess.run(["bash", str(ROOT / "hack/control-plane.sh"), "bin-dir"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        kubectl = f"{bin_dir}/kubectl"
    header = ["manifest", "activeDeadlineSeconds", "backoffLimit", "Ignore", "FailJob", "Count"]
    contract = {r[0].strip("`"): dict(zip(header, r)) for r in table_after(jobs_md, "### The Job contract, per manifest")}
    manifests = sorted(f"manifests/{p.name}" for p in (ROOT / "manifests").iterdir()
                       if p.is_dir() and p.name not in ("base", "job"))
    fail, count = set(), set()
    for m in manifests:
        job = rendered(kubectl, m)
        if job is None:
            continue
        seen = policy(job)
        fail |= set(filter(None, seen["FailJob"].split(", ")))
        count |= set(filter(None, seen["Count"].split(", ")))
        if m not in contract:
            problems.append(f"docs/jobs.md: {m} makes a Job but has no row in the Job contract table")
            continue
        for k in header[1:]:
            if contract[m].get(k, "") != seen[k]:
                problems.append(f"docs/jobs.md: {m} {k} is {seen[k]!r} in the manifest, {contract[m].get(k)!r} in the table")
    for m in sorted(set(contract) - set(manifests)):
        problems.append(f"docs/jobs.md: the Job contract names {m}, which is not a manifest")

    # What the Jobs do with each code (a code only one Job exits with is that Job's rule).
    if fail or count:
        for code, r in sorted(documented.items()):
            job_col = r[2] if len(r) > 2 else ""
            want = "FailJob" if str(code) in fail else "Count" if str(code) in count else "-"
            if not job_col.strip("`").startswith(want):
                problems.append(f"README: exit code {code}: the Job column says {job_col!r}, the manifests {want!r}")

    for p in problems:
        print(f"docs_check: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"docs_check: ok ({len(codes)} exit codes, {len(variables)} variables, "
          f"{len(contract)} Job manifests agree with the docs)")


if __name__ == "__main__":
    main()
