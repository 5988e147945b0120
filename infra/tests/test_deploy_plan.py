"""scripts/deploy --dry-run for two regions prints the complete plan: events once in us-east-1,
then ingest → main in each region, with validated parameter overrides; bad input is refused
before anything is built."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stack_templates import ROOT

BASE = ["--product-code", "abc123xyz", "--regions", "us-east-1,eu-west-1", "--stage-name", "test", "--dry-run", "--skip-build"]


def deploy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "deploy"), *args], capture_output=True, text=True, cwd=ROOT)


def overrides(command: list[str]) -> dict[str, str]:
    at = command.index("--parameter-overrides")
    return dict(kv.split("=", 1) for kv in command[at + 1 :])


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_dry_run_for_two_regions_prints_the_ordered_plan():
    r = deploy(*BASE, "--json", "--param", "MeteringLockHours=3", "--param", "ConsumerBatchSize=200")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["dryRun"] is True
    assert [(s["stack"], s["region"]) for s in plan["steps"]] == [
        ("events", "us-east-1"),
        ("ingest", "us-east-1"), ("main", "us-east-1"),
        ("ingest", "eu-west-1"), ("main", "eu-west-1"),
    ]
    names = {s["stack"]: s["name"] for s in plan["steps"]}
    assert names == {"events": "awsmp-test-events", "ingest": "awsmp-test-abc123xyz-ingest", "main": "awsmp-test-abc123xyz-metering"}
    for s in plan["steps"]:
        cmd = s["command"]
        assert cmd[:2] == ["sam", "deploy"] and flag(cmd, "--region") == s["region"] and flag(cmd, "--stack-name") == s["name"]
        template = flag(cmd, "--template-file")
        assert template.endswith(f"target/deploy/{s['stack']}.yaml")
        assert "bootstrap.zip" in open(template, encoding="utf-8").read()
        o = overrides(cmd)
        assert o["StageName"] == "test"
        if s["stack"] == "events":
            assert "ProductCode" not in o and "MeteringLockHours" not in o
        else:
            assert o["ProductCode"] == "abc123xyz" and o["MeteringLockHours"] == "3"
        if s["stack"] == "main":
            assert o["EventsRegion"] == "us-east-1" and "ConsumerBatchSize" not in o
        if s["stack"] == "ingest":
            assert o["ConsumerBatchSize"] == "200"
    assert plan["lint"][0].endswith("cfn-lint")


def test_direct_submit_deploys_no_ingest_stack():
    r = deploy(*BASE, "--json", "--param", "DeploymentMode=direct-submit")
    assert r.returncode == 0, r.stderr
    steps = json.loads(r.stdout)["steps"]
    assert [(s["stack"], s["region"]) for s in steps] == [("events", "us-east-1"), ("main", "us-east-1"), ("main", "eu-west-1")]
    o = overrides(steps[1]["command"])
    assert o["DeploymentMode"] == "direct-submit" and o["UseIngestWatermark"] == "false"


def test_the_human_plan_prints_each_command():
    r = deploy(*BASE)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("sam deploy")]
    assert len(lines) == 5 and "--region eu-west-1" in lines[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--product-code", "ABC"], "ProductCode='ABC'"),
        (["--stage-name", "Prod!"], "StageName='Prod!'"),
        (["--regions", "us-east-1,us-east-1"], "twice"),
        (["--regions", "mars"], "region 'mars'"),
        (["--param", "MeteringLockHours=21"], "outside 1..20"),
        (["--param", "MeteringLockHours=12", "--param", "BillableWindowHours=6"], "below BillableWindowHours"),
        (["--param", "UsageTableTtlDays=1"], "UsageTableTtlDays=1"),
        (["--param", "MeteringMode=dry-run"], "needs DryRunAccounts"),
        (["--param", "MeteringMode=dry-run", "--param", "DryRunAccounts=111122223333", "--param", "DryRunEventSourcePrefix=aws.test"], "DryRunEventSourcePrefix"),
        (["--param", "NoSuchParameter=1"], "no template declares NoSuchParameter"),
        (["--param", "StageName=x"], "set by --stage-name"),
        (["--param", "MeterIngestModules=checkout,bad-name"], "'bad-name'"),
        (["--param", "ConsumerParallelizationFactor=2"], "outside 1..1 (1: with more, the shard watermark cannot tell which lane lags"),
    ],
)
def test_bad_parameters_are_refused(args, message):
    base = list(BASE)
    for i in range(0, len(args), 2):
        if args[i] in base and args[i] != "--param":
            base[base.index(args[i]) + 1] = args[i + 1]
        else:
            base += args[i : i + 2]
    r = deploy(*base)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_stage_name_is_required():
    r = deploy("--product-code", "abc", "--regions", "us-east-1", "--dry-run")
    assert r.returncode == 2 and "--stage-name" in r.stderr


def test_a_dry_run_builds_nothing_and_says_which_zips_a_real_run_would_build(tmp_path):
    base = [a for a in BASE if a != "--skip-build"]
    r = deploy(*base, "--json", "--lambda-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["build"][0].endswith("scripts/build-lambdas")
    assert sorted(plan["wouldBuild"]) == sorted(plan["zips"]) and len(plan["zips"]) == 11
    assert list(tmp_path.iterdir()) == []  # nothing built
    human = deploy(*base, "--lambda-dir", str(tmp_path))
    assert "# a real run builds these zips: aggregator cleanup" in human.stdout


def test_only_the_stack_with_fn_foreach_asks_sam_for_language_extensions():
    r = deploy(*BASE, "--json")
    for s in json.loads(r.stdout)["steps"]:
        assert ("--language-extensions" in s["command"]) == (s["stack"] == "ingest"), s["stack"]
        assert "--no-execute-changeset" in s["command"] and "--resolve-s3" in s["command"]


def test_the_readmes_deploy_dry_run_works_as_written():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Deploy to AWS", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    command = next(c for c in section.replace("\\\n", " ").splitlines() if c.strip().startswith("scripts/deploy"))
    assert "--dry-run" in command
    r = subprocess.run(["bash", "-c", command.split("#", 1)[0]], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("\nsam deploy ") + r.stdout.startswith("sam deploy ") == 5


def fake_cfn_lint(tmp_path, monkeypatch):
    """A cfn-lint that logs each run and fails on a template holding `BROKEN`; a lint cache of
    the test's own."""
    sys.path.insert(0, str(ROOT / "infra"))
    from deploy import plan

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "runs.log"
    exe = bindir / "cfn-lint"
    exe.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\ncat \"$@\" | grep -q BROKEN && exit 2\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setattr(plan, "bin_path", lambda: str(bindir))
    monkeypatch.setenv("AWSMP_LINT_CACHE", str(tmp_path / "cache"))
    return plan, log


def runs(log) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_clean_lint_of_the_same_bytes_is_not_run_again_and_a_changed_byte_is(tmp_path, monkeypatch):
    plan, log = fake_cfn_lint(tmp_path, monkeypatch)
    t = tmp_path / "main.yaml"
    t.write_text("Resources: {}\n")
    assert plan.lint([t])[0] == "cfn-lint" and runs(log) == 1
    plan.lint([t])
    assert runs(log) == 1, "the same bytes, linted clean, were linted again"
    t.write_text("Resources: {A: 1}\n")
    plan.lint([t])
    assert runs(log) == 2, "a changed template was not linted"


def test_a_failing_lint_is_never_remembered(tmp_path, monkeypatch):
    plan, log = fake_cfn_lint(tmp_path, monkeypatch)
    t = tmp_path / "main.yaml"
    t.write_text("BROKEN\n")
    for attempt in (1, 2):
        with pytest.raises(plan.DeployError, match="cfn-lint found problems"):
            plan.lint([t])
        assert runs(log) == attempt
