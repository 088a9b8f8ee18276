#!/usr/bin/env python3
"""What the docs say, checked against the code, the manifests and themselves:

- the operator's pages (README.md and docs/*.md but design.md and testing.md; docs/figures/ holds
  measured figures, not pages) hold at most WORD_BUDGET words together, so that an operator
  reads one short page and the runbook of the hour, not every page;
- each variable (the table of --help, src/config/help.txt, which src/config.rs reads; its row in
  docs/configuration.md gives the same default), exit code (src/error.rs `mod exit`), Event reason
  (src/warnings.rs), metric (those src/metrics.rs registers, and any full name the code and chart
  mention) and alert (the chart's PrometheusRule and ALERTS below) is defined once: one table row whose first cell names it, on the page that
  defines its kind (DEFINED_IN), and on no other operator page; the README links to each such
  page. The exit-code table's Job column says what the Jobs' podFailurePolicy does with the code;
- every row of the README's "When something goes wrong" table links to a runbook
  (docs/troubleshooting.md#...), and every runbook anchor the chart's templates name resolves;
- docs/jobs.md's "Job contract" table gives each manifest's activeDeadlineSeconds, backoffLimit
  and podFailurePolicy as `kubectl kustomize` renders them, for every manifest that makes a Job;
- `--help` (the binary's, when one is built: $WUG_BIN, else target/release or target/debug)
  prints the same variables and the same exit codes as the source;
- every link of README.md and docs/**/*.md to a file of the repository resolves: the file exists,
  and its `#anchor` (or a `(#anchor)` in the same file) is the slug of one of that file's
  headings, as GitHub makes them; no page links to itself by its own name (`(#anchor)` does).
  PENDING names the pages another change adds: a link to one of them is checked once it exists;
- no issue-tracker number in the docs or in the comments of src/, tests/ and hack/: a reader of
  the clone has no tracker, so a comment says the reason, not the number;
- every `hack/job.sh ...` and `hack/chart.sh ...` command the docs give (README.md, docs/*.md but
  testing.md, the chart's NOTES.txt, the Addon's comments) parses with that script's own usage
  (`hack/job.sh --help`, `hack/chart.sh`'s usage line): a known command, a PHASE where it takes
  one, known options with their values, the right number of arguments; and for a command with
  its own usage line (`hack/job.sh uninstall [--force] ...`), only the options that line names;
- every `helm install` and `helm upgrade` command the same files give names its release and its
  chart (a `--set` alone does not say which release, nor from which chart);
- `status`'s verdicts (VERDICTS, each the start of a string of src/) are all named in
  docs/configuration.md's "`status`'s report"; a paragraph of another page that names four or
  more names them all (else two pages disagree on what `status` may say: point there instead);
- `--self-test` (run first by every run): each check that reads text finds its planted example
  (the metrics registered, helm commands, verdicts, addresses, printed commands, the add-on's
  phases, job.sh usage).

Usage: hack/docs_check.py [KUBECTL]   (default: $KUBECTL, else the pinned kubectl of
hack/control-plane.sh, else one on PATH; `none`: as on a fresh clone without one, as WUG_BIN=none
is without a build). Run by hack/lint.sh, so by hack/test.sh; exit 1 on a
finding. On a fresh clone (no kubectl, no build) it checks all the rest and says, in its last
line, what it could not check.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
problems = []

# The operator's pages together, in words (`wc -w`'s count): a means to keep them short, not
# the measure. 8000 until the upgrade's record added its Events, metrics and runbook (164 words
# after trimming them); 9400 with the air-gapped path through a file, the add-on's runbook, the
# alerts' routing and labels, the release's addresses and the image's verification (answers five
# situations tried as a new user would lacked).
WORD_BUDGET = 9400
# Not operator pages: the why, and how it is tested (each may be long).
NOT_BUDGETED = {"docs/design.md", "docs/testing.md"}
# Pages another change adds: links to them are checked once they exist.
PENDING = {"docs/monitoring.md"}
# Where each kind of name is defined (one table row each), and the README links there.
DEFINED_IN = {
    "variable": "docs/configuration.md",
    "exit code": "docs/configuration.md",
    "Event reason": "docs/configuration.md",
    "metric": "docs/monitoring.md",
    "alert": "docs/monitoring.md",
}
# The resident guard's alerts, as their runbooks name them; the chart's own are added to these
# when they are there. The metrics are read from where the code registers them (src/metrics.rs).
METRICS_SOURCE = "src/metrics.rs"
# prometheus-client's suffix for a counter: `registry.register("acts", …)` serves `acts_total`.
COUNTERS = ["acts"]
ALERTS = ["WorkloadUpdateGuardUpgradeUnprotected", "WorkloadUpdateGuardUpgradeHeld",
          "WorkloadUpdateGuardReadsFailing", "WorkloadUpdateGuardHoldAfterFailedUpgrade",
          "WorkloadUpdateGuardDown"]
# --help's text, whose table is the variables' names, defaults and meanings (src/config.rs reads it).
HELP_TABLE = "src/config/help.txt"
# `status`'s verdicts: the first words of its first line.
VERDICTS = ["NOT SUSPENDED", "SUSPENDED", "HELD BY THE POLICY", "UNPROTECTED", "MIGRATIONS ACCEPTED",
            "ATTENTION", "REFUSED", "NOT FOUND"]
VERDICT = re.compile(r"`(" + "|".join(map(re.escape, VERDICTS)) + r")\b")
ISSUE_NUMBER = re.compile(r"[Ii]ssues? ?#?[0-9]+")


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


def variables_table():
    """The variables of --help's table (HELP_TABLE): name -> default, in the table's order. The
    columns are the header's: VARIABLE, DEFAULT, MEANING."""
    lines = [l for l in (ROOT / HELP_TABLE).read_text().splitlines() if not l.startswith("#")]
    start = next(i for i, l in enumerate(lines) if l.startswith("  VARIABLE "))
    d, m = lines[start].index("DEFAULT"), lines[start].index("MEANING")
    rows = []
    for l in lines[start + 1:]:
        if not l:
            break
        rows.append((l[:d].strip(), l[d:m].strip()))
    return dict(rows)


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
                    if str(dest.relative_to(ROOT)) not in PENDING:
                        problems.append(f"{rel}:{n}: {target}: no such file")
                    continue
                if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{rel}:{n}: {target}: no heading with the anchor #{anchor} in "
                                    f"{dest.relative_to(ROOT)}")
    return checked


def find_kubectl():
    """The kubectl that renders the manifests: the argument, $KUBECTL, the pinned one of
    hack/control-plane.sh once built, else one on PATH; None on a fresh clone without any (the
    Job contract is then said not checked, and the rest is)."""
    given = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KUBECTL")
    if given:
        return None if given == "none" else given
    bin_dir = subprocess.run(["bash", str(ROOT / "hack/control-plane.sh"), "bin-dir"],
                             capture_output=True, text=True).stdout.strip()
    pinned = pathlib.Path(bin_dir, "kubectl") if bin_dir else None
    if pinned and pinned.is_file():
        return str(pinned)
    return shutil.which("kubectl")


def binary():
    """The built binary whose --help is checked, if any."""
    if os.environ.get("WUG_BIN") == "none":
        return None
    for candidate in (os.environ.get("WUG_BIN"), ROOT / "target/release/workload-update-guard",
                      ROOT / "target/debug/workload-update-guard"):
        if candidate and pathlib.Path(candidate).is_file():
            return str(candidate)
    return None


def check_help(variables, codes):
    """--help's variables and exit codes against the source's; what was checked, in words."""
    bin_path = binary()
    if bin_path is None:
        return "NOT CHECKED: --help (no binary built: cargo build, or WUG_BIN=PATH)"
    out = subprocess.run([bin_path, "--help"], capture_output=True, text=True, env={}).stdout
    listed = [v for v in re.findall(r"^  ([A-Z][A-Z_]+) ", out, re.M) if v != "VARIABLE"]
    if listed != variables:
        problems.append(f"--help lists the variables {listed}, {HELP_TABLE} {variables} "
                        f"(rebuild {bin_path}?)")
    tail = out.partition("Exit codes:")[2]
    help_codes = sorted({int(c) for c in re.findall(r"(?:^|[;:] ?|\s)(\d) ", tail)})
    if help_codes != sorted(codes):
        problems.append(f"--help names the exit codes {help_codes}, src/error.rs {sorted(codes)} "
                        f"(rebuild {bin_path}?)")
    return f"--help of {os.path.relpath(bin_path, ROOT)}"


def operator_pages():
    """The budgeted pages: README.md and docs/*.md but NOT_BUDGETED, as paths relative to ROOT."""
    pages = ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    return [p for p in pages if p not in NOT_BUDGETED]


def check_budget():
    """The operator's pages' words, each and in all."""
    counts = {p: len((ROOT / p).read_text().split()) for p in operator_pages()}
    total = sum(counts.values())
    if total > WORD_BUDGET:
        each = ", ".join(f"{p} {n}" for p, n in sorted(counts.items(), key=lambda x: -x[1]))
        problems.append(f"the operator's pages hold {total} words, over the budget of {WORD_BUDGET}: {each}")
    return total


def defining_rows(text):
    """The first cell of every table row, outside code blocks (a row that defines its names)."""
    cells = []
    for _, line in prose(text):
        if line.startswith("|") and not re.match(r"^\|[-| :]+\|?$", line):
            cells.append(line.strip().strip("|").split("|")[0].strip())
    return cells


def defines(cell, name):
    """Whether a table's first cell defines `name`: the cell is only names in code spans (`name`,
    `name{labels}`), one or a list, and `name` is one of them. A cell with words around a name
    (a symptom: "Warning `X`") refers to it, it does not define it."""
    spans = re.findall(r"`([^`]*)`", cell)
    if not spans or re.sub(r"`[^`]*`|[,\s]|and", "", cell):
        return False
    return any(re.fullmatch(rf"{re.escape(name)}(\{{[^}}]*\}})?", s) for s in spans)


def check_defined_once(kind, names):
    """Each name: exactly one defining row among the operator pages, on DEFINED_IN[kind]."""
    home = DEFINED_IN[kind]
    if not (ROOT / home).exists():
        if home in PENDING:
            return f"{kind}s not checked ({home} is not there yet)"
        problems.append(f"{home}: missing; it defines every {kind}")
        return ""
    rows = {p: defining_rows((ROOT / p).read_text()) for p in operator_pages()}
    for name in names:
        where = [p for p, cells in rows.items() for c in cells if defines(c, name)]
        if where.count(home) != 1:
            problems.append(f"{home}: the {kind} {name} has {where.count(home)} defining rows, not 1")
        others = sorted(set(p for p in where if p != home))
        if others:
            problems.append(f"the {kind} {name} is defined again in {', '.join(others)}: "
                            f"define it once, in {home}, and link there")
    readme = (ROOT / "README.md").read_text()
    if f"]({home})" not in readme and f"]({home}#" not in readme:
        problems.append(f"README: no link to {home}, where every {kind} is defined")
    return f"{len(names)} {kind}s"


def event_reasons():
    """Every reason src/warnings.rs gives (Warning and Normal Events)."""
    src = (ROOT / "src/warnings.rs").read_text()
    return re.findall(r'pub const \w+: &str = "([A-Za-z]+)";', src)


def chart_texts():
    return {p: p.read_text() for p in sorted((ROOT / "manifests/chart").rglob("*.yaml"))}


def registered_metrics(src):
    """The metrics a registry serves, by their full names: each `gauge("name", …)` or
    `registry.register("name", …)` under the registry's PREFIX, a counter with `_total`."""
    prefix = re.search(r'pub const PREFIX: &str = "([a-z_]+)";', src).group(1)
    registered = re.findall(r'(?:gauge|register)\(\s*"([a-z_]+)"', src)
    return [f"{prefix}_{m}" + ("_total" if m in COUNTERS else "") for m in registered]


def metrics_and_alerts():
    """The metrics the code registers, every full name the code and the chart mention, and the
    alerts: ALERTS and the chart's own."""
    metrics = registered_metrics((ROOT / METRICS_SOURCE).read_text())
    alerts = list(ALERTS)
    sources = [p.read_text() for p in sorted((ROOT / "src").rglob("*.rs"))] + list(chart_texts().values())
    for text in sources:
        for m in re.findall(r"\b(workload_update_guard_[a-z_]+)", text):
            m = re.sub(r"_(bucket|count|sum|created)$", "", m)
            if m not in metrics and m + "_total" not in metrics:
                metrics.append(m)
    for text in chart_texts().values():
        for a in re.findall(r"^\s*-?\s*alert:\s*\"?(\w+)", text, re.M):
            if a not in alerts:
                alerts.append(a)
    return metrics, alerts


def check_runbook_anchors():
    """Every `troubleshooting.md#anchor` the chart names (the alerts' runbooks) resolves."""
    have = anchors(ROOT / "docs/troubleshooting.md")
    n = 0
    for path, text in chart_texts().items():
        # A link, or the PrometheusRule's `printf "%s#anchor" runbookBase` (troubleshooting.md).
        for anchor in re.findall(r"(?:troubleshooting\.md|%s)#([a-z0-9_-]+)", text):
            n += 1
            if anchor not in have:
                problems.append(f"{path.relative_to(ROOT)}: docs/troubleshooting.md#{anchor}: no such heading")
    return n


def check_readme_runbooks():
    """Each row of the README's "When something goes wrong" table links to a runbook."""
    rows = table_after((ROOT / "README.md").read_text(), "## When something goes wrong")
    for r in rows:
        if len(r) < 2 or not re.search(r"\]\(docs/troubleshooting\.md#[a-z0-9-]+\)", r[1]):
            problems.append(f"README: the row {r[0]!r} of \"When something goes wrong\" links to no runbook")
    return len(rows)


def check_no_issue_numbers():
    """No tracker number in the docs, nor in the comments of src/, tests/, hack/."""
    files = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    for d in ("src", "tests", "hack"):
        files += sorted(p for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in
                        (".rs", ".sh", ".py", ".jq", ".yaml", ".md", ".txt", ""))
    for f in files:
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            m = ISSUE_NUMBER.search(line)
            if m:
                problems.append(f"{f.relative_to(ROOT)}:{n}: {m.group(0)!r}: a reader of the clone has no "
                                f"tracker; say the reason instead")


# A command the docs give: the script, then what follows it up to the end of the code span or
# line, a comment, a closing parenthesis or a table cell.
SCRIPT_COMMAND = re.compile(r"hack/(job|chart)\.sh((?:[ \t]+[^\s`|#)(]+)*)")
PLACEHOLDER = re.compile(r"^([A-Z][A-Z_]*|…|\.\.\.)$")


def script_usage(script):
    """The usage text a script prints: job.sh's --help, chart.sh's line for no command."""
    args = ["--help"] if script == "job" else []
    out = subprocess.run(["bash", str(ROOT / f"hack/{script}.sh"), *args], capture_output=True,
                         text=True, env={"PATH": os.environ.get("PATH", "")})
    return out.stderr + out.stdout


def job_grammar(text=None):
    """hack/job.sh's commands (and whether each takes a PHASE), phases and options (and whether
    each takes a value), read from its --help; opts["@COMMAND"] is the set of options of a
    command whose usage line lists its own (not `[OPTIONS]`)."""
    text = script_usage("job") if text is None else text
    head, _, options = text.partition("\noptions:")
    phases = re.search(r"PHASE: ([a-z, -]+)", text).group(1).replace(" or ", ", ").split(", ")
    commands = {m.group(1): bool(m.group(2)) for m in re.finditer(r"^  ([a-z]+)( PHASE)?\s", head, re.M)}
    opts = {m.group(1): bool(m.group(2)) for m in re.finditer(r"^  (--[a-z-]+)( [A-Z]\S*)?", options, re.M)}
    for m in re.finditer(r"\[(--[a-z-]+)( [A-Z]+)?\]", head):
        opts.setdefault(m.group(1), bool(m.group(2)))
    for m in re.finditer(r"^(?:usage:)?\s+hack/job\.sh ([a-z]+) (.*)$", head, re.M):
        if "[OPTIONS]" not in m.group(2):
            opts["@" + m.group(1)] = set(re.findall(r"\[(--[a-z-]+)", m.group(2)))
    for flag in ("-h", "--help", "help"):
        commands[flag] = False
    return commands, phases, opts


def chart_grammar():
    """hack/chart.sh's commands: name -> (required arguments, optional ones, any more)."""
    line = script_usage("chart").strip().partition("usage: hack/chart.sh ")[2]
    grammar = {}
    for alt in line.split(" | "):
        name, *words = alt.split()
        required = [w for w in words if not w.startswith("[")]
        optional = [w for w in words if w.startswith("[") and "..." not in w]
        grammar[name] = (len(required), len(optional), any("..." in w for w in words))
    return grammar


def check_script_commands():
    """Each hack/job.sh and hack/chart.sh command the docs give parses with the script's usage;
    the number checked."""
    commands, phases, opts = job_grammar()
    chart = chart_grammar()
    files = [ROOT / "README.md"] + [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "testing.md"]
    files += [ROOT / "manifests/chart/templates/NOTES.txt", ROOT / "manifests/addon/workload-update-guard.yaml"]
    n = 0
    for f in files:
        for lineno, line in enumerate(f.read_text().splitlines(), 1):
            for m in SCRIPT_COMMAND.finditer(line):
                # An optional part, as a usage line writes it (`[--pull-secret NAME]`), is checked
                # as if given.
                words = m.group(2).replace("[", " ").replace("]", " ").split()
                if not words:
                    continue  # the script named, not a command
                n += 1
                where = f"{f.relative_to(ROOT)}:{lineno}: `hack/{m.group(1)}.sh {' '.join(words)}`"
                why = (job_words if m.group(1) == "job" else chart_words)(words, commands, phases, opts, chart)
                if why:
                    problems.append(f"{where}: {why}")
    return n


# `helm install` or `helm upgrade` and its words, up to the end of the code span or line, a
# comment, a parenthesis or a table cell (a line ending in `\\` goes on on the next).
HELM_COMMAND = re.compile(r"\bhelm (install|upgrade)((?:[ \t]+[^\s`|#)(;]+)*)")
# Helm's flags that take the next word as their value.
HELM_VALUED = {"-n", "--namespace", "--set", "--set-string", "--set-file", "--set-json",
               "--set-literal", "-f", "--values", "--version", "--timeout", "--kube-context",
               "--kubeconfig", "--repo", "--post-renderer", "--description", "--username",
               "--password", "--ca-file", "--cert-file", "--key-file"}


def helm_problems(text):
    """Each `helm install`/`helm upgrade` command of `text` that does not name a release and a
    chart (two words that are no flag nor a flag's value), as (line number, command)."""
    found = []
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        start, line = n + 1, lines[n]
        while line.rstrip().endswith("\\") and n + 1 < len(lines):
            n += 1
            line = line.rstrip()[:-1] + " " + lines[n].lstrip("# ")
        n += 1
        for m in HELM_COMMAND.finditer(line):
            words = m.group(2).split()
            if not words:
                continue  # `helm upgrade` named, not a command
            positional, i = [], 0
            while i < len(words):
                w = words[i]
                if w.startswith("-"):
                    i += 2 if w in HELM_VALUED else 1
                    continue
                positional.append(w)
                i += 1
            if len(positional) < 2:
                found.append((start, f"helm {m.group(1)} {' '.join(words)}"))
    return found


def check_helm_commands():
    """Each helm install/upgrade command of the docs names its release and chart; the number
    checked."""
    files = [ROOT / "README.md"] + [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "testing.md"]
    files += [ROOT / "manifests/chart/templates/NOTES.txt", ROOT / "manifests/addon/workload-update-guard.yaml",
              ROOT / "manifests/chart/values.yaml"]
    n = 0
    for f in files:
        text = f.read_text()
        n += sum(1 for m in HELM_COMMAND.finditer(text) if m.group(2).split())
        for lineno, cmd in helm_problems(text):
            problems.append(f"{f.relative_to(ROOT)}:{lineno}: `{cmd}`: name the release and the chart "
                            f"(`helm upgrade workload-update-guard CHART -n NAMESPACE ...`)")
    return n


def verdict_problems(text):
    """The paragraphs of `text` that name four or more of VERDICTS but not all: (line, named)."""
    found, para, start = [], set(), 1
    for n, line in enumerate(text.splitlines() + [""], 1):
        if not line.strip():
            if 4 <= len(para) < len(VERDICTS):
                found.append((start, sorted(para)))
            para, start = set(), n + 1
            continue
        para |= set(VERDICT.findall(line))
    return found


def check_verdicts():
    """Each verdict is the code's and named in configuration.md's report; a page that lists them
    lists them all. The number of verdicts."""
    src = "".join(p.read_text() for p in sorted((ROOT / "src").rglob("*.rs")))
    for v in VERDICTS:
        if f'"{v}' not in src:
            problems.append(f"the verdict {v!r} begins no string of src/: update VERDICTS")
    report = (ROOT / "docs/configuration.md").read_text().partition("## `status`'s report")[2]
    missing = [v for v in VERDICTS if v not in VERDICT.findall(report)]
    if missing:
        problems.append(f"docs/configuration.md: `status`'s report does not name the verdicts {missing}")
    pages = [p for p in operator_pages() if p != "docs/configuration.md"]
    for page in pages + ["manifests/chart/templates/NOTES.txt"]:
        for lineno, named in verdict_problems((ROOT / page).read_text()):
            problems.append(f"{page}:{lineno}: names the verdicts {named}, not all {len(VERDICTS)}: name "
                            f"them all or point to docs/configuration.md#statuss-report")
    return len(VERDICTS)


# The project's address: github.com/OWNER/NAME, OWNER.github.io/NAME, ghcr.io/OWNER/NAME (the
# image, or OWNER/charts/NAME the chart), as the pages, manifests and workflow give it.
ADDRESS = re.compile(r"(?:github\.com/([\w.-]+)/workload-update-guard|([\w.-]+)\.github\.io/workload-update-guard"
                     r"|ghcr\.io/([\w.-]+)/(?:charts/)?workload-update-guard)")
# The files that give the project's address to an operator or a release.
ADDRESS_FILES = ["README.md", "CHANGELOG.md", ".github/workflows/release.yml", "hack/chart.sh"]
ADDRESS_DIRS = ["docs", "manifests"]


def home_owner():
    """The owner of Chart.yaml's `home` (https://github.com/OWNER/NAME), and whether `sources`
    is that home alone."""
    chart = yaml.safe_load((ROOT / "manifests/chart/Chart.yaml").read_text())
    m = re.fullmatch(r"https://github\.com/([^/]+)/workload-update-guard", chart.get("home") or "")
    if not m:
        problems.append(f"manifests/chart/Chart.yaml: home {chart.get('home')!r} is not "
                        f"https://github.com/OWNER/workload-update-guard")
        return None
    if chart.get("sources") != [chart["home"]]:
        problems.append(f"manifests/chart/Chart.yaml: sources {chart.get('sources')!r}, not [home]")
    return m.group(1).lower()


def address_problems(text, owner):
    """Each line of `text` that gives the project's address with another owner than `owner`, or
    the placeholder OWNER for it, as (line number, address)."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in ADDRESS.finditer(line):
            given = next(g for g in m.groups() if g)
            if given == "OWNER" or given.lower() != owner:
                found.append((n, m.group(0)))
    return found


def check_addresses():
    """Every address of the project the pages, manifests and workflow give is the home's."""
    owner = home_owner()
    if owner is None:
        return 0
    files = [ROOT / f for f in ADDRESS_FILES]
    for d in ADDRESS_DIRS:
        files += sorted(p for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in
                        (".md", ".yaml", ".yml", ".tpl", ".txt", ".json"))
    checked = 0
    for f in files:
        rel = f.relative_to(ROOT)
        if str(rel) in NOT_BUDGETED or "figures" in rel.parts:
            continue  # design and test notes may quote others' addresses
        for n, address in address_problems(f.read_text(), owner):
            problems.append(f"{rel}:{n}: {address}: the project's address is the chart's home "
                            f"(github.com/{owner}: `hack/chart.sh where`)")
        checked += 1
    return checked


# A command a message prints: `kubectl` up to the end of its clause. A placeholder in it (an
# upper-case word such as NAME or NAMESPACE) makes a command that does not run as printed.
MESSAGE_COMMAND = re.compile(r"kubectl [^\"()`;]*")
COMMAND_PLACEHOLDER = re.compile(r"(?<![\w.{/=-])([A-Z][A-Z_]{2,})(?![\w}])")


def command_placeholders(text):
    """The placeholders of the kubectl commands in `text`'s string literals (Rust's, or a
    template's message), as (line number, command). `{…}` is a value the message fills in."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("//", "#")):
            continue
        for m in MESSAGE_COMMAND.finditer(line):
            command = re.sub(r"\{[^}]*\}", "x", m.group(0))
            if COMMAND_PLACEHOLDER.search(command):
                found.append((n, m.group(0).strip()))
    return found


def check_message_commands():
    """The commands that messages print (src/, but tests; the chart's templates) run as printed."""
    files = [p for p in sorted((ROOT / "src").rglob("*.rs"))
             if p.name != "tests.rs" and "tests" not in p.parts]
    files += sorted((ROOT / "manifests/chart/templates").glob("*.yaml"))
    for f in files:
        text = f.read_text()
        if f.suffix == ".rs":
            text = text.split("#[cfg(test)]", 1)[0]
        for n, command in command_placeholders(text):
            problems.append(f"{f.relative_to(ROOT)}:{n}: `{command}`: a placeholder in a command a "
                            f"message prints: fill it in from what the message knows")
    return len(files)


def check_addon_words():
    """The add-on in the pages as Harvester's Upgrade is: the README names its resource, and the
    troubleshooting page every phase the guard knows (src/plan/upgrade_progress.rs)."""
    src = (ROOT / "src/plan/upgrade_progress.rs").read_text()
    phases = re.findall(r'"(\w+)"', src.split("pub const PLAN_PHASES", 1)[1].split("];", 1)[0])
    readme = (ROOT / "README.md").read_text()
    runbooks = (ROOT / "docs/troubleshooting.md").read_text()
    for missing in addon_words_missing(phases, readme, runbooks):
        problems.append(missing)
    return len(phases)


def addon_words_missing(phases, readme, runbooks):
    """What the pages do not say of the add-on's plan."""
    missing = []
    if "upgradeplans.management.harvesterhci.io" not in readme:
        missing.append("README.md: the add-on's resource, upgradeplans.management.harvesterhci.io, unnamed")
    # A span `A` … `B` names those between them in order.
    named = set(re.findall(r"`(\w+)`", runbooks))
    for i, p in enumerate(phases):
        spanned = any(a in named and b in named and phases.index(a) < i < phases.index(b)
                      and re.search(rf"`{a}` …\s+`{b}`", runbooks) for a in phases for b in phases)
        if p not in named and not spanned:
            missing.append(f"docs/troubleshooting.md: the add-on's phase {p} unnamed")
    return missing


def check_alert_labels():
    """Each label the chart's alerts carry, and each value, is named in docs/monitoring.md."""
    text = (ROOT / "manifests/chart/templates/prometheusrule.yaml").read_text()
    page = (ROOT / "docs/monitoring.md").read_text()
    labels = set()
    for body in re.findall(r"labels: \{([^}]*)\}", text):
        for pair in body.split(","):
            k, _, v = pair.partition(":")
            labels.add((k.strip(), v.strip()))
    for k, v in sorted(labels):
        if f"`{k}`" not in page or v not in page:
            problems.append(f"docs/monitoring.md: the alerts' label {k}={v} unnamed")
    return len(labels)


def self_test():
    """The checks of the helm commands and of hack/job.sh's per-command options, each on a
    planted example it must find, and on one it must pass."""
    planted = ("fix it: `helm upgrade --reuse-values --set guard.x=1`\n"
               "```\nhelm upgrade -n harvester-system workload-update-guard \\\n  --set a=b\n```\n"
               "`helm install workload-update-guard manifests/chart -n harvester-system --set a=b`, "
               "a `helm upgrade` renders them\n")
    found = [n for n, _ in helm_problems(planted)]
    if found != [1, 3]:
        problems.append(f"self-test: the helm check found lines {found} of its planted example, not [1, 3]")
    usage = ("usage: hack/job.sh COMMAND PHASE [OPTIONS]     PHASE: pre, post or status\n"
             "       hack/job.sh uninstall [--force]\n\n  run PHASE     run\n  uninstall     remove\n"
             "\noptions:\n  --image IMAGE       the image\n")
    lists = "`SUSPENDED …`, `NOT SUSPENDED …`, `UNPROTECTED: …`\nor `ATTENTION: …`.\n\n`SUSPENDED`\n"
    if [n for n, _ in verdict_problems(lists)] != [1]:
        problems.append(f"self-test: the verdicts check found {verdict_problems(lists)} in its planted "
                        f"example, not the paragraph of line 1")
    planted = ('pub const PREFIX: &str = "wug";\nlet g = gauge(\n    "held",\n    "1 while held",\n);\n'
               'registry.register("acts", help, acts.clone());\nregistry.register(\n    "build_info",\n')
    if registered_metrics(planted) != ["wug_held", "wug_acts_total", "wug_build_info"]:
        problems.append(f"self-test: the metrics read {registered_metrics(planted)} from their planted "
                        f"registry, not wug_held, wug_acts_total, wug_build_info")
    planted = ("`ghcr.io/OWNER/workload-update-guard`\nhttps://harvester.github.io/workload-update-guard\n"
               "oci://ghcr.io/someone/charts/workload-update-guard\n")
    if [n for n, _ in address_problems(planted, "harvester")] != [1, 3]:
        problems.append(f"self-test: the address check found {address_problems(planted, 'harvester')} "
                        f"in its planted example, not lines [1, 3]")
    planted = ('"To accept: kubectl -n NAMESPACE annotate upgrade NAME {KEY}=true",\n'
               '"run: kubectl -n {ns} annotate upgrades.harvesterhci.io {name} {ALLOW_UNPROTECTED}=true"\n'
               '"check KUBEVIRT_NAMESPACE (kubectl get kubevirts -A)"\n')
    if [n for n, _ in command_placeholders(planted)] != [1]:
        problems.append(f"self-test: the message check found {command_placeholders(planted)} in its "
                        f"planted example, not line 1")
    found = addon_words_missing(["A", "B", "C", "D"], "no resource", "`A` …\n`C`, then `D`")
    if len(found) != 1 or "resource" not in found[0]:
        problems.append(f"self-test: the add-on check found {found} in its planted example, "
                        f"not the resource alone")
    if len(addon_words_missing(["A", "B", "C"], "", "`A` and `C`")) != 2:
        problems.append("self-test: the add-on check missed a phase left out")
    commands, phases, opts = job_grammar(usage)
    why = [job_words(w.split(), commands, phases, opts, None)
           for w in ("uninstall --image REF", "uninstall --force", "run pre --image REF")]
    if not (why[0] and "usage line" in why[0]) or why[1:] != [None, None]:
        problems.append(f"self-test: the hack/job.sh check said {why} of its planted usage, not "
                        f"[a missing option, None, None]")


def job_words(words, commands, phases, opts, _chart):
    """Why `hack/job.sh WORDS` does not parse, or None."""
    cmd, rest = words[0], words[1:]
    if cmd not in commands:
        return f"no command {cmd!r} in hack/job.sh --help ({', '.join(c for c in commands if c[0] != '-')})"
    if commands[cmd]:
        if not rest:
            return f"{cmd} needs a PHASE ({', '.join(phases)})"
        if rest[0] not in phases and not PLACEHOLDER.match(rest[0]):
            return f"{rest[0]!r} is not a PHASE ({', '.join(phases)})"
        rest = rest[1:]
    while rest:
        word, rest = rest[0], rest[1:]
        if PLACEHOLDER.match(word):
            continue
        if word not in opts:
            return f"{word!r}: not an option of hack/job.sh --help"
        own = opts.get("@" + cmd)
        if own is not None and word not in own:
            return f"{word!r}: not in the usage line of `hack/job.sh {cmd}` ({' '.join(sorted(own))})"
        if opts[word]:
            if not rest:
                return f"{word} needs a value"
            rest = rest[1:]
    return None


def chart_words(words, _commands, _phases, _opts, chart):
    """Why `hack/chart.sh WORDS` does not parse, or None."""
    cmd, rest = words[0], words[1:]
    if cmd not in chart:
        return f"no command {cmd!r} in hack/chart.sh's usage ({', '.join(chart)})"
    required, optional, more = chart[cmd]
    if len(rest) < required or (not more and len(rest) > required + optional):
        return f"{cmd} takes {required} to {required + optional} arguments, not {len(rest)}"
    return None


def main():
    self_test()
    if problems or sys.argv[1:] == ["--self-test"]:
        for p in problems:
            print(f"docs_check: {p}", file=sys.stderr)
        print(f"docs_check: self-test {'failed' if problems else 'ok'}", file=sys.stderr)
        sys.exit(1 if problems else 0)
    configuration = (ROOT / "docs/configuration.md").read_text()
    jobs_md = (ROOT / "docs/jobs.md").read_text()

    codes = exit_codes()
    rows = table_after(configuration, "## Exit codes")
    documented = {}
    for r in rows:
        if r and r[0].isdigit():
            documented[int(r[0])] = r
    for code, name in sorted(codes.items()):
        if code not in documented:
            problems.append(f"docs/configuration.md: exit code {code} ({name}) has no row in the exit-code table")
        elif len(documented[code]) < 3 or not documented[code][1]:
            problems.append(f"docs/configuration.md: exit code {code} has no meaning")
    for code in sorted(set(documented) - set(codes)):
        problems.append(f"docs/configuration.md: exit code {code} is documented but src/error.rs defines no such code")
    for page in operator_pages():
        if page != DEFINED_IN["exit code"] and re.search(r"^#+ .*[Ee]xit codes", (ROOT / page).read_text(), re.M):
            problems.append(f"{page}: an exit-code section; the codes are defined once, in {DEFINED_IN['exit code']}")

    table = variables_table()
    variables = list(table)
    conf_rows = table_after(configuration, "## Configuration")
    conf_vars = [r[0] for r in conf_rows]
    if conf_vars != [f"`{v}`" for v in variables]:
        problems.append(f"docs/configuration.md: the configuration table's rows {conf_vars} are not "
                        f"{HELP_TABLE}'s variables, one a row, in its order: {variables}")
    for r in conf_rows:
        var, default = r[0].strip("`"), (r[1] if len(r) > 1 else "")
        # The page writes `value`, (required), `~/.kube/config`, else in-cluster.
        if var in table and default.replace("`", "").strip("()") != table[var]:
            problems.append(f"docs/configuration.md: {var}'s default is {default!r}, "
                            f"{HELP_TABLE}'s {table[var]!r}")
    defined = [check_defined_once("variable", variables)]
    defined.append(check_defined_once("Event reason", event_reasons()))
    metrics, alerts = metrics_and_alerts()
    defined.append(check_defined_once("metric", metrics))
    defined.append(check_defined_once("alert", alerts))

    kubectl = find_kubectl()
    header = ["manifest", "activeDeadlineSeconds", "backoffLimit", "Ignore", "FailJob", "Count"]
    contract = {r[0].strip("`"): dict(zip(header, r)) for r in table_after(jobs_md, "### The Job contract, per manifest")}
    # The kustomizations (manifests/chart is a Helm chart, manifests/addon a Harvester Addon).
    manifests = sorted(f"manifests/{p.name}" for p in (ROOT / "manifests").iterdir()
                       if (p / "kustomization.yaml").is_file() and p.name not in ("base", "job"))
    fail, count = set(), set()
    for m in manifests if kubectl else []:
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
    jobs_checked = (f"{len(contract)} Job manifests agree with the docs" if kubectl else
                    "NOT CHECKED: the Job contract against the manifests (no kubectl: KUBECTL=PATH, "
                    "or bash hack/control-plane.sh build)")

    # What the Jobs do with each code (a code only one Job exits with is that Job's rule).
    if fail or count:
        for code, r in sorted(documented.items()):
            job_col = r[2] if len(r) > 2 else ""
            want = "FailJob" if str(code) in fail else "Count" if str(code) in count else "-"
            if not job_col.strip("`").startswith(want):
                problems.append(f"docs/configuration.md: exit code {code}: the Job column says {job_col!r}, the manifests {want!r}")

    # One version (hack/version.sh): Cargo.toml's, the Jobs' image tag, and a CHANGELOG.md entry.
    version = re.search(r'^\[package\][^\[]*?^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M | re.S)
    version = version.group(1) if version else None
    tag = re.search(r"^\s*newTag:\s*(\S+)", (ROOT / "manifests/job/kustomization.yaml").read_text(), re.M)
    if not version:
        problems.append("Cargo.toml: no [package] version")
    elif not tag or tag.group(1).strip("\"'") != version:
        problems.append(f"manifests/job/kustomization.yaml: newTag {tag.group(1) if tag else None!r}, Cargo.toml's version {version!r}")
    changelog = (ROOT / "CHANGELOG.md").read_text() if (ROOT / "CHANGELOG.md").exists() else ""
    # Main's next version (`X.Y.Z-dev`, unreleased) lists its changes under "Unreleased".
    section = "Unreleased" if version and "-" in version else version
    if version and not re.search(rf"^## \[?{re.escape(section)}\]?", changelog, re.M):
        problems.append(f"CHANGELOG.md: no '## {section}' section for Cargo.toml's version {version}")
    helped = check_help(variables, codes)
    links = check_links()
    runbooks = check_readme_runbooks()
    chart_anchors = check_runbook_anchors()
    words = check_budget()
    check_no_issue_numbers()
    commands = check_script_commands()
    helm = check_helm_commands()
    verdicts = check_verdicts()
    addresses = check_addresses()
    message_files = check_message_commands()
    addon_phases = check_addon_words()
    alert_labels = check_alert_labels()

    for p in problems:
        print(f"docs_check: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"docs_check: ok (the operator's pages {words} words of {WORD_BUDGET}; defined once: "
          f"{'; '.join(d for d in defined if d)}; {len(codes)} exit codes; "
          f"{jobs_checked}; {helped}; {links} links resolve; "
          f"{runbooks} README rows link to runbooks; {chart_anchors} runbook anchors in the chart; "
          f"{commands} hack/job.sh and hack/chart.sh commands parse; {helm} helm install/upgrade commands name "
          f"release and chart; {verdicts} verdicts named alike; the project's address the home's in "
          f"{addresses} files; the commands of {message_files} sources' messages run as printed; the "
          f"add-on's {addon_phases} phases named; {alert_labels} alert labels named; no issue numbers)")


if __name__ == "__main__":
    main()
