"""What a first deploy needs of the account and the parameters, checked before any stack is
touched (docs/deploy.md, "Checks before the first deploy"). Each finding refuses the deploy or
warns, and says how to fix it. The template checks need no account; the account checks read it
with the caller's credentials."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .params import effective, is_production
from .plan import functions

# Lambda keeps at least this much of a region's concurrency unreserved: a reservation that would
# leave less is refused (https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html).
LAMBDA_MIN_UNRESERVED = 100
# Seven years of days (with two leap days), the retention a production billing archive keeps.
SEVEN_YEARS_DAYS = 2557
APIGW_LOGGING_DOC = "https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-logging.html"


@dataclass(frozen=True)
class Finding:
    check: str
    refuse: bool
    where: str
    message: str
    fix: str

    def line(self) -> str:
        return f"{'refused' if self.refuse else 'warning'} [{self.check}] {self.where}: {self.message}. Fix: {self.fix}"

    def json(self) -> dict:
        return asdict(self)


def resolve(node, values: dict[str, str], conditions: dict, region: str):
    """A template value with `Ref`, `Fn::Sub` (string form) and `Fn::If` resolved over the stack's
    parameter values; None where it depends on anything else."""
    if isinstance(node, (str, int, bool)):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        return None
    (fn, arg), = node.items()
    if fn == "Ref":
        return {"AWS::Region": region}.get(arg, values.get(arg))
    if fn == "Fn::Sub" and isinstance(arg, str):
        out = arg
        for name, value in {**values, "AWS::Region": region}.items():
            out = out.replace("${" + name + "}", str(value))
        return None if "${" in out else out
    if fn == "Fn::If":
        cond, then, otherwise = arg
        return resolve(then if condition(cond, values, conditions) else otherwise, values, conditions, region)
    return None


def condition(name: str, values: dict[str, str], conditions: dict) -> bool:
    return _truth(conditions[name], values, conditions)


def _truth(node, values: dict[str, str], conditions: dict) -> bool:
    (fn, arg), = node.items()
    if fn == "Condition":
        return condition(arg, values, conditions)
    if fn == "Fn::Equals":
        a, b = (str(resolve(x, values, conditions, "")) for x in arg)
        return a == b
    if fn == "Fn::Not":
        return not _truth(arg[0], values, conditions)
    if fn == "Fn::And":
        return all(_truth(x, values, conditions) for x in arg)
    if fn == "Fn::Or":
        return any(_truth(x, values, conditions) for x in arg)
    raise ValueError(f"condition function {fn} is not read by the deploy checks")


def present(template: dict, values: dict[str, str]) -> dict[str, dict]:
    """The resources this stack creates with these values (their `Condition` true)."""
    conds = template.get("Conditions", {})
    return {k: r for k, r in template["Resources"].items()
            if isinstance(r, dict) and ("Condition" not in r or condition(r["Condition"], values, conds))}


def reserved_functions(template: dict, values: dict[str, str], region: str) -> dict[str, int]:
    """Logical id → reserved concurrency of every function this stack creates that reserves some."""
    conds = template.get("Conditions", {})
    live = present(template, values)
    out = {}
    for fid, fn in functions(template).items():
        if fid in live and "ReservedConcurrentExecutions" in fn["Properties"]:
            reserved = resolve(fn["Properties"]["ReservedConcurrentExecutions"], values, conds, region)
            if reserved is not None:
                out[fid] = int(reserved)
    return out


def schedule_targets(template: dict, values: dict[str, str]) -> dict[str, int]:
    """Function logical id → how many schedule targets invoke it. Rules on `rate(...)` fire on
    their own phase, so any of them can fire together: each target may need its own execution."""
    counts: dict[str, int] = {}
    for r in present(template, values).values():
        if r["Type"] != "AWS::Events::Rule" or "ScheduleExpression" not in r["Properties"]:
            continue
        for t in r["Properties"].get("Targets", []):
            arn = t.get("Arn")
            if isinstance(arn, dict) and "Fn::GetAtt" in arn:
                target = arn["Fn::GetAtt"]
                fid = target[0] if isinstance(target, list) else target.split(".")[0]
                counts[fid] = counts.get(fid, 0) + 1
    for fid, fn in functions(template).items():
        for ev in (fn["Properties"].get("Events") or {}).values():
            if ev.get("Type") == "Schedule":
                counts[fid] = counts.get(fid, 0) + 1
    return counts


def template_findings(stage: str, steps: list[dict], templates: dict[str, dict]) -> list[Finding]:
    """The checks that need no account: the alarm topic, the archive's Object Lock, reserved
    concurrency against concurrent schedule targets."""
    out = []
    prod = is_production(stage)
    for s in steps:
        t = templates[s["stack"]]
        values = effective(t, s["parameters"])
        where = f"{s['stack']} stack in {s['region']}"
        topic = values.get("AlarmTopicArn", "")
        if not topic:
            out.append(Finding("alarm-topic", prod, where,
                               "AlarmTopicArn is empty, so its alarms notify no one" + (" on a production stage" if prod else ""),
                               "--param AlarmTopicArn=arn:aws:sns:{region}:ACCOUNT:TOPIC (an SNS topic in each region; {region} becomes the stack's region)"))
        elif topic.split(":")[3] != s["region"]:
            out.append(Finding("alarm-topic", True, where, f"AlarmTopicArn {topic} is not in {s['region']}; an alarm notifies only a topic in its own region",
                               "write the topic's region as {region} in AlarmTopicArn, with a topic of that name in each region"))
        if "ArchiveObjectLockMode" in values:
            out += archive_findings(prod, where, values["ArchiveObjectLockMode"], int(values["ArchiveRetentionDays"]))
        targets = schedule_targets(t, values)
        for fid, reserved in reserved_functions(t, values, s["region"]).items():
            if targets.get(fid, 0) > reserved:
                out.append(Finding("schedule-concurrency", True, where,
                                   f"{fid} reserves {reserved} concurrent executions while {targets[fid]} schedule targets can invoke it at once (the rest are throttled and retried late)",
                                   f"reserve at least {targets[fid]} for it (infra/cfn; docs/deploy.md)"))
    return out


def archive_findings(prod: bool, where: str, mode: str, days: int) -> list[Finding]:
    if prod and (mode != "COMPLIANCE" or days < SEVEN_YEARS_DAYS):
        return [Finding("archive-lock", False, where,
                        f"the billing archive locks records in {mode} mode for {days} days on a production stage",
                        f"--param ArchiveObjectLockMode=COMPLIANCE --param ArchiveRetentionDays={SEVEN_YEARS_DAYS} (seven years; nobody, root included, can then delete a record early)")]
    if not prod and mode == "COMPLIANCE":
        return [Finding("archive-lock", False, where,
                        f"the billing archive locks records in COMPLIANCE mode for {days} days on a non-production stage: nobody can delete this stage's data before then",
                        "leave ArchiveObjectLockMode at its default (GOVERNANCE) for trial stages")]
    return []


def account_findings(clients, steps: list[dict], templates: dict[str, dict]) -> list[Finding]:
    """The checks that read the account: `clients(service, region)` gives a boto3 client."""
    out = []
    for region in dict.fromkeys(s["region"] for s in steps):
        mine = [s for s in steps if s["region"] == region]
        for topic in dict.fromkeys(effective(templates[s["stack"]], s["parameters"]).get("AlarmTopicArn", "") for s in mine):
            if topic and topic.split(":")[3] == region and not _topic_exists(clients("sns", region), topic):
                out.append(Finding("alarm-topic", True, region, f"the alarm topic {topic} does not exist",
                                   "create it (and subscribe the on-call engineer) before the deploy"))
        if any(s["stack"] == "main" for s in mine):
            role = clients("apigateway", region).get_account().get("cloudwatchRoleArn")
            if not role:
                out.append(Finding("apigw-cloudwatch-role", True, region,
                                   "the registration API's stage writes access logs, which needs the account's API Gateway CloudWatch Logs role in this region, and none is set",
                                   f"create a role API Gateway can assume with the managed policy AmazonAPIGatewayPushToCloudWatchLogs, then `aws apigateway update-account --region {region} --patch-operations op=replace,path=/cloudwatchRoleArn,value=ROLE_ARN` ({APIGW_LOGGING_DOC})"))
        out += concurrency_findings(clients("lambda", region), clients("cloudformation", region), region, mine, templates)
    return out


def concurrency_findings(lam, cf, region: str, steps: list[dict], templates: dict[str, dict]) -> list[Finding]:
    """What the stacks would reserve beyond what their functions already reserve, against the
    region's unreserved concurrency (a redeploy reserves nothing new)."""
    unreserved = lam.get_account_settings()["AccountLimit"]["UnreservedConcurrentExecutions"]
    need = 0
    for s in steps:
        t = templates[s["stack"]]
        for fid, reserved in reserved_functions(t, effective(t, s["parameters"]), region).items():
            need += reserved - _current_reservation(lam, cf, s["name"], fid)
    if unreserved - need < LAMBDA_MIN_UNRESERVED:
        return [Finding("lambda-concurrency", True, region,
                        f"the stacks reserve {need} more concurrent executions; the account has {unreserved} unreserved, and Lambda keeps at least {LAMBDA_MIN_UNRESERVED} unreserved",
                        f"ask for a higher 'Concurrent executions' quota in Service Quotas for {region} (a new account may have as few as 10), or deploy fewer stacks to this region")]
    return []


def _current_reservation(lam, cf, stack_name: str, logical_id: str) -> int:
    """What the deployed function of this logical id reserves now; 0 before its first deploy."""
    try:
        physical = cf.describe_stack_resource(StackName=stack_name, LogicalResourceId=logical_id)["StackResourceDetail"]["PhysicalResourceId"]
    except cf.exceptions.ClientError:
        return 0
    try:
        return int(lam.get_function_concurrency(FunctionName=physical).get("ReservedConcurrentExecutions", 0))
    except lam.exceptions.ResourceNotFoundException:
        return 0


def _topic_exists(sns, arn: str) -> bool:
    try:
        sns.get_topic_attributes(TopicArn=arn)
        return True
    except sns.exceptions.NotFoundException:
        return False
