"""Parameter values for each stack: `--config`, then `--param`, checked against each template's
own declaration (pattern, allowed values, range) and against each other (docs/deploy.md,
"Parameters"), before anything is built."""

from __future__ import annotations

import json
import re
from pathlib import Path


class DeployError(Exception):
    """A refusal: the message says what is wrong and how to fix it."""


# A value may name its region as `{region}` (an alarm topic must be in the alarm's region:
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html).
REGION_PLACEHOLDER = "{region}"
# Stage names that mean production: alarms must notify someone, the archive keeps records for years.
PRODUCTION = re.compile(r"^(prod|production)(-.*)?$")


def is_production(stage: str) -> bool:
    return bool(PRODUCTION.fullmatch(stage))


def check_value(stack: str, key: str, value: str, spec: dict) -> None:
    where = f"{key}={value!r} ({stack} stack)"
    why = f" ({spec['ConstraintDescription']})" if "ConstraintDescription" in spec else ""
    if "AllowedValues" in spec and value not in [str(v) for v in spec["AllowedValues"]]:
        raise DeployError(f"{where}: one of {', '.join(map(str, spec['AllowedValues']))}{why}")
    if "AllowedPattern" in spec and not re.fullmatch(spec["AllowedPattern"], value):
        raise DeployError(f"{where}: does not match {spec['AllowedPattern']}{why}")
    if spec.get("Type") == "Number":
        try:
            n = int(value)
        except ValueError:
            raise DeployError(f"{where}: not a whole number") from None
        if "MinValue" in spec and n < spec["MinValue"] or "MaxValue" in spec and n > spec["MaxValue"]:
            raise DeployError(f"{where}: outside {spec.get('MinValue', '-inf')}..{spec.get('MaxValue', 'inf')}{why}")


def cross_checks(values: dict[str, str]) -> None:
    """What one parameter implies for another."""
    lock = int(values.get("MeteringLockHours", 1))
    window = int(values.get("BillableWindowHours", 24))
    if lock >= window:
        raise DeployError(f"MeteringLockHours={lock} must be below BillableWindowHours={window}")
    ttl = int(values.get("UsageTableTtlDays", 365))
    if ttl != 0 and ttl * 24 <= lock + window:
        raise DeployError(f"UsageTableTtlDays={ttl} must be 0 (keep) or exceed lock + window ({lock + window} h)")
    for module in values.get("MeterIngestModules", "default").split(","):
        if not re.fullmatch(r"[A-Za-z0-9]{1,64}", module):
            raise DeployError(f"MeterIngestModules: {module!r} is not 1-64 letters and digits (it names an alias and its resources)")
    if values.get("MeteringMode") == "dry-run":
        if not values.get("DryRunAccounts"):
            raise DeployError("MeteringMode=dry-run needs DryRunAccounts (the test-account allowlist)")
        prefix = values.get("DryRunEventSourcePrefix", "awsmp.test")
        if prefix == "aws" or prefix.startswith("aws."):
            raise DeployError(f"DryRunEventSourcePrefix={prefix!r}: a dry-run stage never listens to aws.* sources")


def given(config: str | None, params: list[str], stage: str, product: str) -> dict[str, str]:
    """The values the caller gave: `--config FILE` (`{"parameters": {...}}`), then `--param K=V`."""
    out: dict[str, str] = {}
    if config:
        out.update({k: str(v) for k, v in json.loads(Path(config).read_text())["parameters"].items()})
    for kv in params:
        if "=" not in kv:
            raise DeployError(f"--param {kv!r}: Key=Value")
        k, v = kv.split("=", 1)
        out[k] = v
    for k in ("StageName", "ProductCode"):
        if k in out:
            raise DeployError(f"{k} is set by --stage-name / --product-code, not --param")
    out["StageName"] = stage
    out["ProductCode"] = product
    return out


def per_stack(values: dict[str, str], templates: dict[str, dict], region: str) -> dict[str, dict[str, str]]:
    """Each stack's values in `region` (`{region}` replaced), checked against its template."""
    unknown = [k for k in values if not any(k in t["Parameters"] for t in templates.values())]
    if unknown:
        raise DeployError(f"no template declares {', '.join(sorted(unknown))}")
    regional = {k: v.replace(REGION_PLACEHOLDER, region) for k, v in values.items()}
    out = {}
    for stack, t in templates.items():
        mine = {k: v for k, v in regional.items() if k in t["Parameters"]}
        for k, v in mine.items():
            check_value(stack, k, v, t["Parameters"][k])
        missing = [k for k, spec in t["Parameters"].items() if "Default" not in spec and k not in mine]
        if missing:
            raise DeployError(f"{stack} stack needs {', '.join(missing)}")
        out[stack] = mine
    cross_checks(regional)
    return out


def effective(template: dict, values: dict[str, str]) -> dict[str, str]:
    """Every parameter's value as the stack will see it: the given one, else the default."""
    out = {k: str(spec["Default"]) for k, spec in template["Parameters"].items() if "Default" in spec}
    out.update(values)
    return out
