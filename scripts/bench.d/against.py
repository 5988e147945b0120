"""`scripts/bench --against REV`: the workspace's criterion benches of this tree and of git
revision REV, side by side, in one run (docs/benchmarks.md, "Before and after").

Machines here are shared and noisy: a figure swings by 2-4x between minutes. So the two builds
are compared run against run, never against a table from another day. Each bench binary is
built once per side (`cargo bench --no-run` of the packages that have benches; REV is
extracted with `git archive` under target/bench-against/, its own target directory beside
it), then every criterion id the two
sides share is run by itself, before and after back to back, the order alternating each
repetition (ABBA), so a slow minute falls on both. A cell is a run's mean; the table gives each
side's median, after / before, and the spread of before (its max / min over the repetitions):
a ratio inside [1 / spread, spread] is within the machine's noise. The figure files the benches
write (latencies, bytes on the stream) are collected per run and compared the same way.

Benches that need the local stack (the aggregator's DynamoDB read) are skipped here: without
a stack they measure nothing.

`--only A,B` runs only the bench ids that contain one of the comma-separated strings (e.g.
`--only fold_3600_rows,record/no_collapse_meter`): a quick look at a few figures when a full run
is too long for the quiet window at hand. Both sides are still built whole.
"""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CRITERION_ARGS = ["--warm-up-time", "1", "--measurement-time", "3", "--sample-size", "10"]
QUICK_ARGS = ["--warm-up-time", "0.5", "--measurement-time", "1", "--sample-size", "10"]


def log(msg):
    print("scripts/bench --against: " + msg, file=sys.stderr)


def extract(root, rev, dest):
    """REV's tree under dest/src (kept while REV names the same commit)."""
    commit = subprocess.run(["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=root, check=True,
                            capture_output=True, text=True).stdout.strip()
    src, marker = dest / "src", dest / "commit"
    if not (marker.is_file() and marker.read_text() == commit):
        subprocess.run(["rm", "-rf", str(src)], check=True)
        src.mkdir(parents=True)
        log("git archive {} ({}) into {}".format(rev, commit[:12], src))
        archive = subprocess.Popen(["git", "archive", commit], cwd=root, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit("git archive {} failed".format(rev))
        marker.write_text(commit)
    return src, commit


def bench_packages(tree):
    """The packages of the workspace at `tree` that have a bench target."""
    meta = json.loads(subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=tree,
                                     check=True, capture_output=True, text=True).stdout)
    return sorted({p["name"] for p in meta["packages"] for t in p["targets"] if "bench" in t["kind"]})


def build(tree, target):
    """{(crate directory, bench): executable} of every bench target of the workspace at `tree`
    (only the packages that have one are built)."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    packages = [a for p in bench_packages(tree) for a in ("-p", p)]
    log("cargo bench --no-run --benches {} in {}".format(" ".join(packages), tree))
    # `--benches`: the targets benchmarked by default (the bench targets, and the libraries'
    # and binaries' harnesses), not the packages' integration tests, which `cargo bench` would
    # also build and this script never runs.
    out = subprocess.run(["cargo", "bench", "--no-run", "--benches", "--message-format", "json", *packages], cwd=tree,
                         env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    exes = {}
    for line in out.splitlines():
        msg = json.loads(line) if line.startswith("{") else {}
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and "bench" in msg["target"]["kind"]:
            crate_dir = Path(msg["manifest_path"]).parent.name
            exes[(crate_dir, msg["target"]["name"])] = msg["executable"]
    return exes


def ids(exe):
    listed = subprocess.run([exe, "--bench", "--list"], check=True, capture_output=True, text=True).stdout
    return [line[: -len(": benchmark")] for line in listed.splitlines() if line.endswith(": benchmark")]


def run_one(exe, bench_id, home, quick):
    """(mean ns, elements per iteration) of one run of one criterion id (None when the bench
    skipped itself), and the figure files it wrote ({figure: value})."""
    subprocess.run(["rm", "-rf", str(home)], check=True)
    home.mkdir(parents=True)
    env = dict(os.environ, CRITERION_HOME=str(home / "criterion"), CARGO_TARGET_DIR=str(home))
    env.pop("AWSMP_LOCAL_DIR", None)
    args = [exe, "--bench", "--exact", bench_id] + (QUICK_ARGS if quick else CRITERION_ARGS)
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    new = home / "criterion" / bench_id / "new"
    if not (new / "estimates.json").is_file():
        return None, {}  # the bench skipped itself (it needs the local stack)
    mean = json.loads((new / "estimates.json").read_text())["mean"]["point_estimate"]
    elements = (json.loads((new / "benchmark.json").read_text()).get("throughput") or {}).get("Elements")
    figures = {f.stem: json.loads(f.read_text())["value"] for f in (home / "awsmp-bench").glob("*.json")}
    return (mean, elements), figures


def cell(mean, elements):
    """A run as the table reads it: M events/s for a throughput bench, else ms."""
    return elements / mean * 1e3 if elements else mean / 1e6


def pair_moved(before, after):
    """Pair a bench that moved to another crate between the two trees (the re-cut moved some)
    by its name, when that name is on each side's unmatched list once."""
    only_before = [k for k in before if k not in after]
    only_after = [k for k in after if k not in before]
    for old in only_before:
        moved = [k for k in only_after if k[1] == old[1]]
        if len(moved) == 1 and [k[1] for k in only_before].count(old[1]) == 1:
            log("bench {}/{} is {}/{} after: compared as one".format(*old, *moved[0]))
            before[moved[0]] = before.pop(old)


def selected(bench_id, only):
    """Whether `--only`'s strings (None: every bench) pick `bench_id`: it contains one of them."""
    return only is None or any(part in bench_id for part in only)


def compare(root, target, rev, reps, quick, only=None):
    dest = target / "bench-against"
    src, commit = extract(root, rev, dest)
    sides = {"before": build(src, dest / "target"), "after": build(root, target)}
    pair_moved(sides["before"], sides["after"])
    shared = sorted(set(sides["before"]) & set(sides["after"]))
    for only in sorted(set(sides["before"]) ^ set(sides["after"])):
        log("bench {}/{} exists on one side only: not compared".format(*only))
    runs = {}  # (crate directory, bench, id) -> {side: [cell]}
    figures = {}  # figure -> {side: [value]}
    units = {}
    for key in shared:
        common = [i for i in ids(sides["after"][key]) if i in set(ids(sides["before"][key]))]
        for bench_id in common:
            if "dynamodb" in bench_id or not selected(bench_id, only):
                continue
            row = runs.setdefault(key + (bench_id,), {"before": [], "after": []})
            pairs = [("before", "after") if rep % 2 == 0 else ("after", "before") for rep in range(reps)]
            order = [side for pair in pairs for side in pair]
            for n, side in enumerate(order):
                log("{} {}/{} {} (run {} of {})".format(side, *key, bench_id, n + 1, len(order)))
                measured, figs = run_one(sides[side][key], bench_id, dest / "run", quick)
                if measured is None:
                    log("{}/{} {} measured nothing (it needs the local stack): left out".format(*key, bench_id))
                    del runs[key + (bench_id,)]
                    break
                row[side].append(cell(*measured))
                units[key + (bench_id,)] = "M events/s" if measured[1] else "ms"
                for name, value in figs.items():
                    figures.setdefault(name, {"before": [], "after": []})[side].append(value)
    print(table(commit, runs, figures, units))


def summary(before, after):
    mb, ma = statistics.median(before), statistics.median(after)
    spread = max(before) / min(before) if min(before) > 0 else float("inf")
    ratio = ma / mb if mb else float("inf")
    within = 1 / spread <= ratio <= spread
    return mb, ma, ratio, spread, within


def fmt_runs(values):
    return ", ".join("{:.3g}".format(v) for v in values)


def table(commit, runs, figures, units):
    lines = ["Before: {}; after: this tree. Each cell a run's mean; ABBA order.".format(commit[:12]), "",
             "| bench id | unit | before, each run | after, each run | median before | median after "
             "| after / before | spread of before | within spread |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, row in sorted(runs.items()):
        if not row["before"] or not row["after"]:
            continue
        mb, ma, ratio, spread, within = summary(row["before"], row["after"])
        lines.append("| `{}` | {} | {} | {} | {:.3g} | {:.3g} | {:.2f} | {:.2f} | {} |".format(
            key[2], units[key], fmt_runs(row["before"]), fmt_runs(row["after"]), mb, ma, ratio, spread,
            "yes" if within else "**no**"))
    lines += ["", "| figure file | before: median (range), runs | after: median (range), runs | after / before |",
              "|---|---|---|---|"]
    for name, row in sorted(figures.items()):
        if not row["before"] or not row["after"]:
            continue
        b, a = row["before"], row["after"]
        mb, ma = statistics.median(b), statistics.median(a)
        lines.append("| `{}` | {:.4g} ({:.4g}-{:.4g}), {} | {:.4g} ({:.4g}-{:.4g}), {} | {} |".format(
            name, mb, min(b), max(b), len(b), ma, min(a), max(a), len(a),
            "{:.2f}".format(ma / mb) if mb else "-"))
    return "\n".join(lines)
