"""The plan: package the templates (each function's `CodeUri` the built zip), lint them, and one
`sam deploy` command per stack and region, in deploy order: events once, then in each region
ingest, then main (docs/deploy.md, "Stacks")."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from .params import DeployError
from .tools import LOCK, ROOT, bin_path

ORDER = ("ingest", "main")
STACKS = ("events", *ORDER)
LANGUAGE_EXTENSIONS = "AWS::LanguageExtensions"


def stack_names(stage: str, product: str) -> dict[str, str]:
    return {
        "events": f"awsmp-{stage}-events",
        "ingest": f"awsmp-{stage}-{product}-ingest",
        "main": f"awsmp-{stage}-{product}-metering",
    }


def functions(template: dict) -> dict[str, dict]:
    """The template's functions by logical id (a `Fn::ForEach` entry is a list, never a function)."""
    return {k: r for k, r in template["Resources"].items() if isinstance(r, dict) and r["Type"] == "AWS::Serverless::Function"}


def binaries(template: dict) -> list[str]:
    return [r["Metadata"]["BuildProperties"]["Binary"] for r in functions(template).values()]


def transforms(template: dict) -> list[str]:
    t = template.get("Transform") or []
    return [t] if isinstance(t, str) else list(t)


def package(templates: dict[str, dict], lambda_dir: Path, out: Path) -> dict[str, Path]:
    """Copies of the templates whose `CodeUri` is the built zip (`sam deploy` uploads it)."""
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for stack, t in templates.items():
        t = json.loads(json.dumps(t))
        for r in functions(t).values():
            binary = r["Metadata"]["BuildProperties"]["Binary"]
            r["Properties"]["CodeUri"] = str(lambda_dir / binary / "bootstrap.zip")
            r.pop("Metadata")
        path = out / f"{stack}.yaml"
        path.write_text(yaml.safe_dump(t, sort_keys=False, width=120), encoding="utf-8")
        paths[stack] = path
    return paths


def lint_cache_dir() -> Path:
    """Where a clean lint is remembered: beside the deploy tools, outside the repository's files."""
    return Path(os.environ.get("AWSMP_LINT_CACHE") or ROOT / ".awsmp-local" / "cfn-lint-clean").resolve()


def lint_key(paths: list[Path]) -> str:
    """What a lint's verdict depends on: the pinned tools (the lock pins cfn-lint and the resource
    specification it ships) and each template's name and bytes."""
    h = hashlib.sha256(LOCK.read_bytes())
    for p in paths:
        data = p.read_bytes()
        h.update(f"\0{p.name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def lint(paths: list[Path]) -> list[str]:
    """cfn-lint over the packaged templates; a problem stops the deploy. The same bytes linted
    clean by the same pinned cfn-lint are not linted again (every dry run and deploy packages the
    same templates, and one lint costs seconds of CPU); any changed byte lints afresh, and a
    failing lint is never remembered."""
    exe = shutil.which("cfn-lint", path=bin_path())
    if not exe:
        raise DeployError("cfn-lint is missing from the deploy tools (tools/requirements-deploy.lock)")
    clean = lint_cache_dir() / lint_key(paths)
    if not clean.is_file():
        r = subprocess.run([exe, *map(str, paths)], capture_output=True, text=True)
        if r.returncode != 0:
            raise DeployError("cfn-lint found problems:\n" + r.stdout + r.stderr)
        clean.parent.mkdir(parents=True, exist_ok=True)
        clean.write_text("".join(f"{p}\n" for p in paths), encoding="utf-8")
    return ["cfn-lint", *map(str, paths)]


def sam_command(path: Path, stack: str, name: str, region: str, values: dict[str, str], template: dict, bucket: str | None) -> list[str]:
    """`sam deploy` up to a reviewed change set: it processes the template, uploads it and every
    zip, and creates the change set; the deploy reviews the change set and then executes it."""
    cmd = ["sam", "deploy", "--template-file", str(path), "--stack-name", name, "--region", region,
           "--capabilities", "CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"]
    if LANGUAGE_EXTENSIONS in transforms(template):
        # `Fn::ForEach`: without this flag SAM's own processing of the template fails before it
        # reaches CloudFormation ("'list' object has no attribute 'get'"); CloudFormation itself
        # runs the transform (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/transform-aws-languageextensions.html).
        cmd.append("--language-extensions")
    cmd += ["--s3-bucket", bucket] if bucket else ["--resolve-s3"]
    cmd += ["--no-execute-changeset", "--no-fail-on-empty-changeset", "--no-progressbar",
            "--tags", f"awsmp:stage={values['StageName']}", f"awsmp:stack={stack}"]
    return cmd + ["--parameter-overrides", *[f"{k}={v}" for k, v in sorted(values.items())]]


def steps(stage: str, product: str, regions: list[str], events_region: str, skip_events: bool,
          packaged: dict[str, Path], templates: dict[str, dict], values_in, bucket_for) -> list[dict]:
    """The ordered steps. `values_in(region)` gives each stack's parameter values in a region,
    `bucket_for(region)` the artifact bucket there (None: SAM's managed bucket)."""
    names = stack_names(stage, product)
    out = []

    def step(stack: str, region: str, values: dict[str, str]) -> dict:
        cmd = sam_command(packaged[stack], stack, names[stack], region, values, templates[stack], bucket_for(region))
        return {"stack": stack, "region": region, "name": names[stack], "parameters": values, "command": cmd}

    if not skip_events:
        out.append(step("events", events_region, values_in(events_region)["events"]))
    for region in regions:
        per_stack = values_in(region)
        main_values = {**per_stack["main"]}
        main_values.setdefault("EventsRegion", events_region)
        direct = main_values.get("DeploymentMode") == "direct-submit"
        if direct:
            # No raw rows, so no ingest stack and no watermark to wait for.
            main_values.setdefault("UseIngestWatermark", "false")
        for stack in ORDER:
            if direct and stack == "ingest":
                continue
            out.append(step(stack, region, main_values if stack == "main" else per_stack[stack]))
    return out


def build_command(binaries_needed: list[str]) -> list[str]:
    return [str(ROOT / "scripts" / "build-lambdas"), *binaries_needed]
