"""The deploy's checks and its change-set review, on recorded AWS responses where the emulated
account has no such API (Lambda's GetAccountSettings) or does not say what AWS says (a change
set's `Replacement`), and on the templates themselves."""

from __future__ import annotations

import copy
import json
import sys

import pytest

from stack_templates import INFRA, STACKS

sys.path.insert(0, str(INFRA))
import yaml  # noqa: E402
from deploy import changeset, preflight  # noqa: E402
from deploy.params import is_production  # noqa: E402

FIXTURES = INFRA / "tests" / "fixtures"


def raw_templates() -> dict[str, dict]:
    return {s: yaml.safe_load((INFRA / f"{s}.yaml").read_text(encoding="utf-8")) for s in STACKS}


def steps(stage: str = "test", **overrides: str) -> list[dict]:
    values = {"StageName": stage, "ProductCode": "abc123xyz", **overrides}
    t = raw_templates()
    return [{"stack": s, "region": "eu-west-1", "name": f"awsmp-{stage}-{s}",
             "parameters": {k: v for k, v in values.items() if k in t[s]["Parameters"]}} for s in STACKS]


def checks(findings, check: str) -> list[preflight.Finding]:
    return [f for f in findings if f.check == check]


def test_a_change_set_that_replaces_or_removes_stateful_resources_is_dangerous():
    changes = json.loads((FIXTURES / "describe_change_set_replacement.json").read_text())["Changes"]
    bad = changeset.dangerous(changes, allowed=set())
    assert bad == [
        "RejectedEventsTable (AWS::DynamoDB::Table) would be replaced (Replacement: True)",
        "DedupTable (AWS::DynamoDB::Table) would be replaced (Replacement: Conditional)",
        "ConsumerFailureQueue (AWS::SQS::Queue) would be removed",
    ]
    # the stream updates in place and a function is not stateful: neither is named
    assert changeset.dangerous(changes, allowed={"RejectedEventsTable", "DedupTable", "ConsumerFailureQueue"}) == []


def test_a_modify_that_does_not_say_whether_it_replaces_counts_as_a_replacement():
    change = {"Type": "Resource", "ResourceChange": {"Action": "Modify", "LogicalResourceId": "UsageTable", "ResourceType": "AWS::DynamoDB::Table"}}
    assert changeset.dangerous([change], set()) == ["UsageTable (AWS::DynamoDB::Table) would be replaced (Replacement: not said)"]


class FakeLambda:
    """A Lambda client answering from a recorded GetAccountSettings response."""

    class exceptions:
        class ResourceNotFoundException(Exception):
            pass

    def __init__(self, settings: dict, reserved: dict[str, int]):
        self.settings, self.reserved = settings, reserved

    def get_account_settings(self) -> dict:
        return self.settings

    def get_function_concurrency(self, FunctionName: str) -> dict:
        if FunctionName not in self.reserved:
            raise self.exceptions.ResourceNotFoundException(FunctionName)
        return {"ReservedConcurrentExecutions": self.reserved[FunctionName]}


class FakeCloudFormation:
    class exceptions:
        class ClientError(Exception):
            pass

    def __init__(self, deployed: dict[tuple[str, str], str]):
        self.deployed = deployed

    def describe_stack_resource(self, StackName: str, LogicalResourceId: str) -> dict:
        if (StackName, LogicalResourceId) not in self.deployed:
            raise self.exceptions.ClientError("does not exist")
        return {"StackResourceDetail": {"PhysicalResourceId": self.deployed[StackName, LogicalResourceId]}}


def test_a_new_accounts_concurrency_refuses_the_first_deploy():
    settings = json.loads((FIXTURES / "lambda_get_account_settings.json").read_text())
    found = preflight.concurrency_findings(FakeLambda(settings, {}), FakeCloudFormation({}), "eu-west-1", steps(), raw_templates())
    assert len(found) == 1 and found[0].refuse
    # 31 discoverer + 1 submitter + 1 expiry + 1 heartbeat + 1 deprovision-cleanup
    assert "reserve 35 more" in found[0].message and "10 unreserved" in found[0].message


def test_a_redeploy_reserves_only_what_is_new():
    settings = {"AccountLimit": {"UnreservedConcurrentExecutions": 120}}
    t = raw_templates()
    all_reserved = {(s["name"], fid): f"fn-{fid}" for s in steps() for fid in preflight.reserved_functions(t[s["stack"]], preflight.effective(t[s["stack"]], s["parameters"]), "eu-west-1")}
    already = {f"fn-{fid}": n for s in steps() for fid, n in preflight.reserved_functions(t[s["stack"]], preflight.effective(t[s["stack"]], s["parameters"]), "eu-west-1").items()}
    lam = FakeLambda(settings, already)
    assert preflight.concurrency_findings(lam, FakeCloudFormation(all_reserved), "eu-west-1", steps(), t) == []
    # the same account before any of it was deployed: 120 - 35 < 100
    assert preflight.concurrency_findings(FakeLambda(settings, {}), FakeCloudFormation({}), "eu-west-1", steps(), t)


def test_the_shipped_templates_reserve_a_discoverer_execution_per_schedule_target():
    assert checks(preflight.template_findings("test", steps(), raw_templates()), "schedule-concurrency") == []


def test_fewer_reserved_executions_than_schedule_targets_are_refused():
    t = raw_templates()
    broken = copy.deepcopy(t)
    broken["main"]["Resources"]["DiscovererFunction"]["Properties"]["ReservedConcurrentExecutions"] = 30
    found = checks(preflight.template_findings("test", steps(), broken), "schedule-concurrency")
    assert len(found) == 1 and found[0].refuse
    assert "DiscovererFunction reserves 30" in found[0].message and "31 schedule targets" in found[0].message


def test_in_direct_submit_mode_the_gated_discoverer_is_not_counted():
    t = raw_templates()
    broken = copy.deepcopy(t)
    broken["main"]["Resources"]["DiscovererFunction"]["Properties"]["ReservedConcurrentExecutions"] = 1
    found = preflight.template_findings("test", steps(DeploymentMode="direct-submit"), broken)
    assert checks(found, "schedule-concurrency") == []


@pytest.mark.parametrize(("stage", "prod"), [("prod", True), ("production", True), ("prod-eu", True), ("test", False), ("producer", False), ("staging", False)])
def test_which_stages_are_production(stage, prod):
    assert is_production(stage) is prod


def test_alarm_topics_are_required_on_production_and_warned_about_elsewhere():
    t = raw_templates()
    prod = checks(preflight.template_findings("prod", steps("prod"), t), "alarm-topic")
    assert len(prod) == 3 and all(f.refuse for f in prod)
    trial = checks(preflight.template_findings("test", steps(), t), "alarm-topic")
    assert len(trial) == 3 and not any(f.refuse for f in trial)
    topic = "arn:aws:sns:eu-west-1:123456789012:oncall"
    assert checks(preflight.template_findings("prod", steps("prod", AlarmTopicArn=topic), t), "alarm-topic") == []
    elsewhere = checks(preflight.template_findings("prod", steps("prod", AlarmTopicArn=topic.replace("eu-west-1", "us-east-1")), t), "alarm-topic")
    assert elsewhere and all(f.refuse and "not in eu-west-1" in f.message for f in elsewhere)


def test_the_archive_lock_defaults_to_a_short_governance_retention_and_production_is_told():
    t = raw_templates()
    params = t["ingest"]["Parameters"]
    assert params["ArchiveObjectLockMode"]["Default"] == "GOVERNANCE" and params["ArchiveRetentionDays"]["Default"] == 1
    assert checks(preflight.template_findings("test", steps(), t), "archive-lock") == []
    prod = checks(preflight.template_findings("prod", steps("prod"), t), "archive-lock")
    assert len(prod) == 1 and not prod[0].refuse and "ArchiveRetentionDays=2557" in prod[0].fix
    chosen = steps("prod", ArchiveObjectLockMode="COMPLIANCE", ArchiveRetentionDays="2557")
    assert checks(preflight.template_findings("prod", chosen, t), "archive-lock") == []
    trial_compliance = checks(preflight.template_findings("test", steps(ArchiveObjectLockMode="COMPLIANCE"), t), "archive-lock")
    assert len(trial_compliance) == 1 and "nobody can delete" in trial_compliance[0].message
