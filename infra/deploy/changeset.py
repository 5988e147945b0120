"""Review, then execute, the change set `sam deploy --no-execute-changeset` made: print every
change, and refuse one that would replace or remove a stateful resource unless the caller named
it with `--allow-replace` (docs/deploy.md, "Change sets")."""

from __future__ import annotations

import sys
import time

from .params import DeployError

# What holds data a deploy must never throw away by accident: usage and billing records, the
# stream's unread events, the archive, queued work. CloudFormation replaces a resource when an
# update changes a property that cannot change in place, and a removed resource with
# `DeletionPolicy: Retain` is orphaned, its name still taken
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html).
STATEFUL_TYPES = frozenset({"AWS::DynamoDB::Table", "AWS::Kinesis::Stream", "AWS::S3::Bucket", "AWS::SQS::Queue"})
# How long a stack operation may take before the deploy gives up waiting (it goes on in AWS).
STACK_WAIT_SECONDS = 3600


def resource_changes(changes: list[dict]) -> list[dict]:
    return [c["ResourceChange"] for c in changes if c.get("Type", "Resource") == "Resource" and "ResourceChange" in c]


def dangerous(changes: list[dict], allowed: set[str]) -> list[str]:
    """Each change that would replace or remove a stateful resource not in `allowed`, described.
    A `Modify` whose `Replacement` is not `False` (`True`, `Conditional`, or not said) counts."""
    out = []
    for rc in resource_changes(changes):
        if rc.get("ResourceType") not in STATEFUL_TYPES or rc.get("LogicalResourceId") in allowed:
            continue
        action = rc.get("Action")
        if action == "Remove":
            out.append(f"{rc['LogicalResourceId']} ({rc['ResourceType']}) would be removed")
        elif action == "Modify" and str(rc.get("Replacement", "Conditional")) != "False":
            out.append(f"{rc['LogicalResourceId']} ({rc['ResourceType']}) would be replaced (Replacement: {rc.get('Replacement', 'not said')})")
    return out


def describe(cf, change_set: str) -> dict:
    """The change set with every page of its changes, once CloudFormation has finished making it."""
    deadline = time.monotonic() + 600
    while True:
        cs = cf.describe_change_set(ChangeSetName=change_set)
        if cs["Status"] not in ("CREATE_PENDING", "CREATE_IN_PROGRESS") or time.monotonic() > deadline:
            break
        time.sleep(2)
    changes = list(cs.get("Changes", []))
    token = cs.get("NextToken")
    while token:
        page = cf.describe_change_set(ChangeSetName=change_set, NextToken=token)
        changes += page.get("Changes", [])
        token = page.get("NextToken")
    cs["Changes"] = changes
    return cs


def available(cf, stack_name: str) -> set[str]:
    """The ids of the stack's change sets that can still be executed."""
    try:
        pages = cf.get_paginator("list_change_sets").paginate(StackName=stack_name)
        return {s["ChangeSetId"] for p in pages for s in p["Summaries"]
                if s.get("StackName") == stack_name and s.get("ExecutionStatus") == "AVAILABLE"}
    except cf.exceptions.ClientError as e:
        if "does not exist" in str(e):
            return set()
        raise


def render(changes: list[dict]) -> list[str]:
    rows = []
    for rc in resource_changes(changes):
        replacement = f" replacement={rc['Replacement']}" if rc.get("Action") == "Modify" and "Replacement" in rc else ""
        rows.append(f"  {rc.get('Action', '?'):<7} {rc.get('LogicalResourceId')} ({rc.get('ResourceType')}){replacement}")
    return rows


def review_and_execute(cf, stack_name: str, change_set: str, allowed: set[str], log=print) -> str:
    """Print the change set, refuse it (deleting it) when it endangers a stateful resource, else
    execute it and wait for the stack. Returns the stack's final status."""
    cs = describe(cf, change_set)
    log(f"deploy: change set {cs.get('ChangeSetName', change_set)} of {stack_name}:")
    for row in render(cs["Changes"]):
        log(row)
    bad = dangerous(cs["Changes"], allowed)
    if bad:
        cf.delete_change_set(ChangeSetName=change_set)
        raise DeployError(
            f"{stack_name}: refused, nothing changed: " + "; ".join(bad)
            + ". Its data would be lost or orphaned. If that is intended (data moved first), run again with "
            + " ".join(f"--allow-replace {b.split(' ', 1)[0]}" for b in bad))
    cf.execute_change_set(ChangeSetName=change_set)
    return wait(cf, stack_name)


def wait(cf, stack_name: str) -> str:
    deadline = time.monotonic() + STACK_WAIT_SECONDS
    while True:
        stack = cf.describe_stacks(StackName=stack_name)["Stacks"][0]
        status = stack["StackStatus"]
        if not status.endswith("_IN_PROGRESS"):
            break
        if time.monotonic() > deadline:
            raise DeployError(f"{stack_name}: still {status} after {STACK_WAIT_SECONDS} s; watch it in the CloudFormation console")
        time.sleep(5)
    if status not in ("CREATE_COMPLETE", "UPDATE_COMPLETE"):
        events = cf.describe_stack_events(StackName=stack_name)["StackEvents"]
        reasons = [f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}" for e in events if e["ResourceStatus"].endswith("FAILED")]
        print("\n".join(reasons[:20]), file=sys.stderr)
        raise DeployError(f"{stack_name}: ended {status}")
    return status
