#!/usr/bin/env python3
"""What the docs say of the contract, checked against the code and the manifests:

- every exit code the binary defines (src/error.rs, `mod exit`) has a row in the README's
  exit-code table, with a meaning, and no row names a code the binary does not define; the
  table's Job column says what the Jobs' podFailurePolicy does with it (in any Job);
- every variable of the configuration table (src/config.rs, `VARIABLES`) is in the README's
  variables table and in docs/configuration.md;
- docs/jobs.md's "Job contract" table gives each manifest's activeDeadlineSeconds, backoffLimit
  and podFailurePolicy as `kubectl kustomize` renders them, for every manifest that makes a Job;
- `--help` (the binary's, when one is built: $WUG_BIN, else target/release or target/debug)
  prints the same variables and the same exit codes as the source and the tables;
- every link of README.md and docs/**/*.md to a file of the repository resolves: the file exists,
  and its `#anchor` (or a `(#anchor)` in the same file) is the slug of one of that file's
  headings, as GitHub makes them; no page links to itself by its own name (`(#anchor)` does).

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


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip())
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def prose(text):
    """The lines of a Markdown file outside fenced code blocks, with their numbers."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def anchors(path):
    seen, out = {}, set()
    for _, line in prose(path.read_text()):
        m = re.match(r"^#{1,6} +(.*?) *#*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def check_links():
    """Every relative link of the docs, checked; the number checked."""
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    checked = 0
    for page in pages:
        rel = page.relative_to(ROOT)
        for n, line in prose(page.read_text()):
            line = re.sub(r"`[^`]*`", "", line)  # no link inside a code span
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"^[a-z]+:", target):
                    continue  # https:, mailto:
                checked += 1
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                if path and dest == page:
                    problems.append(f"{rel}:{n}: links to itself ({target}); write (#{anchor})"
                                    if anchor else f"{rel}:{n}: links to itself ({target})")
                    continue
                if not dest.exists():
                    problems.append(f"{rel}:{n}: {target}: no such file")
                    continue
                if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{rel}:{n}: {target}: no heading with the anchor #{anchor} in "
                                    f"{dest.relative_to(ROOT)}")
    return checked


def binary():
    """The built binary whose --help is checked, if any."""
    for candidate in (os.environ.get("WUG_BIN"), ROOT / "target/release/workload-update-guard",
                      ROOT / "target/debug/workload-update-guard"):
        if candidate and pathlib.Path(candidate).is_file():
            return str(candidate)
    return None


def check_help(variables, codes):
    """--help's variables and exit codes against the source's; what was checked, in words."""
    bin_path = binary()
    if bin_path is None:
        return "no binary built: --help not run"
    out = subprocess.run([bin_path, "--help"], capture_output=True, text=True, env={}).stdout
    listed = [v for v in re.findall(r"^  ([A-Z][A-Z_]+) ", out, re.M) if v != "VARIABLE"]
    if listed != variables:
        problems.append(f"--help lists the variables {listed}, src/config.rs {variables} "
                        f"(rebuild {bin_path}?)")
    tail = out.partition("Exit codes:")[2]
    help_codes = sorted({int(c) for c in re.findall(r"(?:^|[;:] ?|\s)(\d) ", tail)})
    if help_codes != sorted(codes):
        problems.append(f"--help names the exit codes {help_codes}, src/error.rs {sorted(codes)} "
                        f"(rebuild {bin_path}?)")
    return f"--help of {os.path.relpath(bin_path, ROOT)}"


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
    # The kustomizations (manifests/chart is a Helm chart, manifests/addon a Harvester Addon).
    manifests = sorted(f"manifests/{p.name}" for p in (ROOT / "manifests").iterdir()
                       if (p / "kustomization.yaml").is_file() and p.name not in ("base", "job"))
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

    # One version (hack/version.sh): Cargo.toml's, the Jobs' image tag, and a CHANGELOG.md entry.
    version = re.search(r'^\[package\][^\[]*?^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M | re.S)
    version = version.group(1) if version else None
    tag = re.search(r"^\s*newTag:\s*(\S+)", (ROOT / "manifests/job/kustomization.yaml").read_text(), re.M)
    if not version:
        problems.append("Cargo.toml: no [package] version")
    elif not tag or tag.group(1).strip("\"'") != version:
        problems.append(f"manifests/job/kustomization.yaml: newTag {tag.group(1) if tag else None!r}, Cargo.toml's version {version!r}")
    changelog = (ROOT / "CHANGELOG.md").read_text() if (ROOT / "CHANGELOG.md").exists() else ""
    if version and not re.search(rf"^## \[?{re.escape(version)}\]?", changelog, re.M):
        problems.append(f"CHANGELOG.md: no '## {version}' section for Cargo.toml's version")
    helped = check_help(variables, codes)
    links = check_links()

    for p in problems:
        print(f"docs_check: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"docs_check: ok ({len(codes)} exit codes, {len(variables)} variables, "
          f"{len(contract)} Job manifests agree with the docs; {helped}; {links} links resolve)")


if __name__ == "__main__":
    main()
