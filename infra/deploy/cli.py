"""`scripts/deploy`'s command line and the order of its work."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from . import changeset, params, plan, preflight
from .params import DeployError
from .tools import ROOT, bin_path

USAGE = """Deploy awsmp for one product to a list of regions (docs/deploy.md).

  scripts/deploy --product-code CODE --regions us-east-1,eu-west-1 --stage-name NAME
                 [--param Key=Value ...] [--config FILE.json] [--events-region us-east-1]
                 [--artifact-bucket NAME] [--allow-replace LOGICAL_ID ...]
                 [--skip-build] [--skip-events] [--dry-run] [--json]

--dry-run needs no AWS account and builds nothing: it checks the parameters, packages and lints
the templates, runs the checks that need no account, and prints the plan with the zips a real run
would build. A real run builds the zips, checks the account, then for each stack in order runs its
`sam deploy` command (which uploads and makes a change set), shows the change set, refuses one that
would replace or remove a table, stream, bucket or queue not named by --allow-replace, and
executes it. A value may contain {region}, replaced by each stack's region.
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scripts/deploy", description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--product-code", required=True)
    ap.add_argument("--regions", required=True, type=lambda s: [r.strip() for r in s.split(",") if r.strip()])
    ap.add_argument("--stage-name", required=True)
    ap.add_argument("--events-region", default="us-east-1")
    ap.add_argument("--param", action="append", default=[], metavar="Key=Value")
    ap.add_argument("--config")
    ap.add_argument("--artifact-bucket", metavar="NAME", help="S3 bucket for the zips and templates, {region} allowed; default: SAM's managed bucket (--resolve-s3)")
    ap.add_argument("--allow-replace", action="append", default=[], metavar="LOGICAL_ID", help="allow this stateful resource to be replaced or removed")
    ap.add_argument("--lambda-dir", default=str(ROOT / "target" / "lambda"), help="where the zips are (<binary>/bootstrap.zip)")
    ap.add_argument("--templates", default=str(ROOT / "infra"), help="the directory of events.yaml, ingest.yaml and main.yaml")
    ap.add_argument("--skip-build", action="store_true", help="use the zips already in --lambda-dir")
    ap.add_argument("--skip-events", action="store_true", help="the events stack of this stage is already deployed")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = ap.parse_args(argv)
    region = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
    if not args.regions:
        raise DeployError("--regions: at least one region")
    for r in [*args.regions, args.events_region]:
        if not region.fullmatch(r):
            raise DeployError(f"region {r!r} does not look like us-east-1")
    if len(set(args.regions)) != len(args.regions):
        raise DeployError("--regions lists a region twice")
    return args


def load_templates(directory: Path) -> dict[str, dict]:
    import yaml

    return {s: yaml.safe_load((directory / f"{s}.yaml").read_text(encoding="utf-8")) for s in plan.STACKS}


def main(argv: list[str]) -> int:
    try:
        return run(parse_args(argv))
    except DeployError as e:
        print(f"deploy: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    templates = load_templates(Path(args.templates))
    given = params.given(args.config, args.param, args.stage_name, args.product_code)
    by_region = {r: params.per_stack(given, templates, r) for r in dict.fromkeys([args.events_region, *args.regions])}
    lambda_dir = Path(args.lambda_dir).resolve()
    needed = sorted({b for t in templates.values() for b in plan.binaries(t)})
    zips = {b: lambda_dir / b / "bootstrap.zip" for b in needed}
    build = None if args.skip_build else plan.build_command(needed)
    if build and not args.dry_run:
        print("deploy: building the Lambda zips: " + shlex.join(build), file=sys.stderr)
        subprocess.run(build, check=True)
        # build-lambdas writes target/lambda; a --lambda-dir elsewhere is the caller's to fill.
    # Where the packaged templates go: target/deploy, or AWSMP_DEPLOY_DIR (the suite's deploys
    # to an emulated account run beside its dry runs, each writing templates of its own).
    packaged = plan.package(templates, lambda_dir, Path(os.environ.get("AWSMP_DEPLOY_DIR") or ROOT / "target" / "deploy"))
    lint_cmd = plan.lint(list(packaged.values()))
    bucket_for = (lambda r: args.artifact_bucket.replace(params.REGION_PLACEHOLDER, r)) if args.artifact_bucket else (lambda r: None)
    steps = plan.steps(args.stage_name, args.product_code, args.regions, args.events_region, args.skip_events,
                       packaged, templates, by_region.__getitem__, bucket_for)
    findings = preflight.template_findings(args.stage_name, steps, templates)
    would_build = [b for b in needed if build or not zips[b].is_file()]
    if not args.dry_run:
        missing = [b for b in needed if not zips[b].is_file()]
        if missing:
            raise DeployError(f"no zip for {', '.join(missing)} in {lambda_dir}: run scripts/build-lambdas")
        findings += preflight.account_findings(clients(), steps, templates)
    report(args, build, would_build, zips, lint_cmd, findings, steps)
    refused = [f for f in findings if f.refuse]
    if refused:
        raise DeployError(f"{len(refused)} check(s) refused the deploy (above); nothing was changed")
    if args.dry_run:
        return 0
    for s in steps:
        deploy_step(s, set(args.allow_replace))
    return 0


def report(args, build, would_build, zips, lint_cmd, findings, steps) -> None:
    if args.json:
        print(json.dumps({"dryRun": args.dry_run, "build": build, "wouldBuild": would_build,
                          "zips": {b: str(p) for b, p in zips.items()}, "lint": lint_cmd,
                          "checks": [f.json() for f in findings], "steps": steps}, indent=1))
    else:
        if args.dry_run:
            built = "builds" if build else "needs (--skip-build)"
            print(f"# a real run {built} these zips: {' '.join(would_build) or 'none'}")
        for f in findings:
            print(f"# {f.line()}")
        for i, s in enumerate(steps, 1):
            print(f"# {i}. {s['stack']} stack {s['name']} in {s['region']}: sam makes the change set; the deploy shows it, refuses a stateful replacement, executes it")
            print(shlex.join(s["command"]))
        return
    for f in findings:
        print(f"deploy: {f.line()}", file=sys.stderr)


def clients():
    import boto3

    session = boto3.session.Session()
    cache: dict = {}

    def client(service: str, region: str):
        if (service, region) not in cache:
            cache[service, region] = session.client(service, region_name=region)
        return cache[service, region]

    return client


def deploy_step(s: dict, allowed: set[str]) -> None:
    cf = clients()("cloudformation", s["region"])
    print(f"deploy: {s['stack']} stack {s['name']} in {s['region']}", file=sys.stderr)
    before = changeset.available(cf, s["name"])
    print(f"deploy: running: {shlex.join(s['command'])}", file=sys.stderr)
    subprocess.run(s["command"], check=True, env={**os.environ, "PATH": bin_path(), "AWS_REGION": s["region"], "SAM_CLI_TELEMETRY": "0"})
    made = changeset.available(cf, s["name"]) - before
    if not made:
        print(f"deploy: {s['name']} in {s['region']}: no changes", file=sys.stderr)
        return
    if len(made) > 1:
        raise DeployError(f"{s['name']}: {len(made)} new change sets appeared during the step; another deploy is running")
    status = changeset.review_and_execute(cf, s["name"], made.pop(), allowed, log=lambda m: print(m, file=sys.stderr))
    print(f"deploy: {s['name']} in {s['region']}: {status}", file=sys.stderr)
