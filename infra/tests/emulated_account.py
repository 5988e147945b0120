#!/usr/bin/env python3
"""An emulated AWS account on 127.0.0.1, for the deploy tests (docs/deploy.md, "Tested against an
emulated account").

It is moto's server (S3, CloudFormation, DynamoDB, SQS, Kinesis, Lambda, IAM, API Gateway, ...)
plus the parts of a real account that moto lacks and a deploy of awsmp reaches:

- The transforms CloudFormation runs on its side before it makes a change set: the
  `AWS::LanguageExtensions` transform (`Fn::ForEach`), by the pinned SAM CLI's own implementation
  of it, then `AWS::Serverless-2016-10-31`, by the pinned SAM translator (what CloudFormation's
  managed SAM transform runs). A template given by `TemplateURL` is read from the emulated S3.
- The `AWS::Lambda::Alias` resource type (moto has the alias API but no CloudFormation model).
- A `CreateChangeSet` with nothing to change accepted, its change set FAILED, as AWS does; a
  stack's resources read without the gaps moto leaves for types it does not model; a list
  parameter's previous value kept on update.
- Lambda's `GetAccountSettings`, which moto does not serve: answered from what a test sets with
  `POST /_emulated/lambda-account-settings` (the response body AWS gives).

Run with the deploy tools' python (tools/requirements-deploy.lock has moto, the SAM CLI and the
translator):

    .awsmp-local/deploy-venv/bin/python infra/tests/emulated_account.py --port 0

The first line on stdout is `listening on http://127.0.0.1:PORT`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
import urllib.parse
from typing import Any

import yaml
from moto.awslambda.models import lambda_backends
from moto.cloudformation import parsing as cfn_parsing
from moto.cloudformation.models import CloudFormationBackend, Stack
from moto.cloudformation.responses import CloudFormationResponse
from moto.core.common_models import CloudFormationModel
from moto.moto_server.threaded_moto_server import MotoRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.s3.models import s3_backends
from werkzeug.serving import make_server

ACCOUNT_ID = "123456789012"
SAM_TRANSFORM = "AWS::Serverless-2016-10-31"
LANGUAGE_EXTENSIONS = "AWS::LanguageExtensions"
# Actions whose request carries a template that CloudFormation transforms first.
TEMPLATE_ACTIONS = {"CreateChangeSet", "CreateStack", "UpdateStack", "ValidateTemplate"}


class LambdaAliasModel(CloudFormationModel):
    """`AWS::Lambda::Alias` over moto's Lambda alias API: `Ref` and `AliasArn` are the alias ARN."""

    # moto files every model under the service its module names.
    __module__ = "moto.awslambda.emulated_alias"

    def __init__(self, alias: Any):
        self.alias = alias

    @property
    def physical_resource_id(self) -> str:
        return self.alias.arn

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @staticmethod
    def cloudformation_type() -> str:
        # https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-lambda-alias.html
        return "AWS::Lambda::Alias"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "AliasArn"

    def get_cfn_attribute(self, attribute_name: str) -> str:
        if attribute_name == "AliasArn":
            return self.alias.arn
        raise cfn_parsing.UnformattedGetAttTemplateException()

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):  # type: ignore[no-untyped-def]
        props = cloudformation_json["Properties"]
        function_name = props["FunctionName"].split(":function:")[-1].split(":")[0]
        alias = lambda_backends[account_id][region_name].create_alias(
            name=props["Name"], function_name=function_name, function_version=str(props["FunctionVersion"]),
            description=props.get("Description", ""), routing_config=props.get("RoutingConfig"),
        )
        return cls(alias)

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):  # type: ignore[no-untyped-def]
        cls.delete_from_cloudformation_json(original_resource.alias.name, {"Properties": {"FunctionName": original_resource.alias.arn}}, account_id, region_name)
        return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)

    @classmethod
    def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):  # type: ignore[no-untyped-def]
        arn = cloudformation_json["Properties"]["FunctionName"]
        function_name = arn.split(":function:")[-1].split(":")[0]
        lambda_backends[account_id][region_name].delete_alias(resource_name.split(":")[-1], function_name)

    def is_created(self) -> bool:
        return True


def template_from_url(url: str, endpoint_port: int | None) -> str:
    """The text of a template CloudFormation is told to read from S3: path style on the emulator's
    own endpoint or `s3[.region].amazonaws.com`, virtual-hosted style otherwise."""
    u = urllib.parse.urlparse(url)
    host = u.hostname or ""
    if host in ("127.0.0.1", "localhost") or (host.startswith("s3") and host.endswith("amazonaws.com")):
        bucket, key = u.path.lstrip("/").split("/", 1)
    else:
        bucket, key = host.split(".")[0], u.path.lstrip("/")
    obj = s3_backends[ACCOUNT_ID]["aws"].get_object(bucket, urllib.parse.unquote(key))
    return obj.value.decode("utf-8")


def parameter_values(form: dict[str, list[str]], template: dict) -> dict[str, Any]:
    """The stack's parameter values: the request's, else each parameter's default."""
    values: dict[str, Any] = {k: v.get("Default") for k, v in template.get("Parameters", {}).items() if "Default" in v}
    i = 1
    while f"Parameters.member.{i}.ParameterKey" in form:
        key = form[f"Parameters.member.{i}.ParameterKey"][0]
        if f"Parameters.member.{i}.ParameterValue" in form:
            values[key] = form[f"Parameters.member.{i}.ParameterValue"][0]
        i += 1
    for k, spec in template.get("Parameters", {}).items():
        if spec.get("Type") == "CommaDelimitedList" and isinstance(values.get(k), str):
            values[k] = [s.strip() for s in values[k].split(",")]
    return values


# The SAM translator reads the region from the environment (boto3's session): one transform at a time.
TRANSFORM_LOCK = threading.Lock()


def transform(template: dict, values: dict[str, Any], region: str) -> dict:
    """What CloudFormation does with a template's `Transform` before it makes a change set."""
    with TRANSFORM_LOCK:
        os.environ["AWS_DEFAULT_REGION"] = region
        return _transform(template, values, region)


def _transform(template: dict, values: dict[str, Any], region: str) -> dict:
    transforms = template.get("Transform") or []
    transforms = [transforms] if isinstance(transforms, str) else list(transforms)
    if LANGUAGE_EXTENSIONS in transforms:
        from samcli.lib.cfn_language_extensions import PseudoParameterValues, process_template

        pseudo = PseudoParameterValues(region=region, account_id=ACCOUNT_ID, partition="aws")
        template = process_template(template, parameter_values=values, pseudo_parameters=pseudo)
        transforms.remove(LANGUAGE_EXTENSIONS)
        template["Transform"] = transforms
    if SAM_TRANSFORM in transforms:
        from samtranslator.translator.transform import transform as sam_transform

        class Policies:
            """The managed policies a template names, by ARN (no IAM call, as a real transform has the account's)."""

            def load(self) -> dict[str, str]:
                return {}

        template["Transform"] = SAM_TRANSFORM
        template = sam_transform(template, {k: v for k, v in values.items() if v is not None}, Policies())
    template.pop("Transform", None)
    return template


class Account:
    """The WSGI application: moto behind the transforms and the extra answers above."""

    def __init__(self) -> None:
        self.moto = DomainDispatcherApplication(create_backend_app)
        self.lambda_account_settings: dict | None = None
        self.port: int | None = None

    def __call__(self, environ, start_response):  # type: ignore[no-untyped-def]
        path = environ.get("PATH_INFO", "")
        if path == "/_emulated/lambda-account-settings" and environ["REQUEST_METHOD"] == "POST":
            self.lambda_account_settings = json.loads(self._body(environ) or b"null")
            return self._reply(start_response, 200, b"{}")
        if path.startswith("/2016-08-19/account-settings") and self._service(environ) == "lambda":
            if self.lambda_account_settings is None:
                return self._reply(start_response, 501, b'{"Message":"GetAccountSettings: not set in this emulated account"}')
            return self._reply(start_response, 200, json.dumps(self.lambda_account_settings).encode())
        if environ["REQUEST_METHOD"] == "POST" and self._service(environ) == "cloudformation":
            body = self._body(environ)
            form = urllib.parse.parse_qs(body.decode(), keep_blank_values=True)
            if form.get("Action", [""])[0] in TEMPLATE_ACTIONS:
                try:
                    body = self._transformed(form, self._region(environ))
                except Exception as e:  # a template CloudFormation would refuse
                    msg = f"Transform failed: {type(e).__name__}: {e}"
                    print(msg, file=sys.stderr)
                    xml = ("<ErrorResponse><Error><Type>Sender</Type><Code>ValidationError</Code>"
                           f"<Message>{_xml_escape(msg)}</Message></Error></ErrorResponse>")
                    return self._reply(start_response, 400, xml.encode(), "text/xml")
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.moto(environ, start_response)

    def _transformed(self, form: dict[str, list[str]], region: str) -> bytes:
        if "TemplateURL" in form:
            text = template_from_url(form.pop("TemplateURL")[0], self.port)
        elif "TemplateBody" in form:
            text = form["TemplateBody"][0]
        else:
            return urllib.parse.urlencode(form, doseq=True).encode()
        template = yaml.safe_load(text)
        if template.get("Transform"):
            template = transform(template, parameter_values(form, template), region)
        form["TemplateBody"] = [json.dumps(template, sort_keys=True)]
        return urllib.parse.urlencode(form, doseq=True).encode()

    @staticmethod
    def _body(environ) -> bytes:  # type: ignore[no-untyped-def]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        return environ["wsgi.input"].read(length) if length else b""

    @staticmethod
    def _service(environ) -> str:  # type: ignore[no-untyped-def]
        auth = environ.get("HTTP_AUTHORIZATION", "")
        # "AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE/aws4_request, ..."
        parts = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
        return parts[3] if len(parts) > 3 else ""

    @staticmethod
    def _region(environ) -> str:  # type: ignore[no-untyped-def]
        parts = environ.get("HTTP_AUTHORIZATION", "").split("Credential=", 1)[-1].split(",", 1)[0].split("/")
        return parts[2] if len(parts) > 2 else "us-east-1"

    @staticmethod
    def _reply(start_response, status: int, body: bytes, content_type: str = "application/json"):  # type: ignore[no-untyped-def]
        reason = {200: "OK", 400: "Bad Request", 501: "Not Implemented"}[status]
        start_response(f"{status} {reason}", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]


def _xml_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def aws_empty_change_sets() -> None:
    """CreateChangeSet with nothing to change: AWS accepts it and the change set ends FAILED
    ("The submitted information didn't contain changes"), which `sam deploy
    --no-fail-on-empty-changeset` reads as "no changes". moto refuses the call instead (as AWS does
    only for UpdateStack), and when `sam` sends the unchanged parameters as `UsePreviousValue` it
    sees a change where AWS, comparing effective values, sees none."""
    CloudFormationResponse._validate_different_update = lambda self, *args, **kwargs: None
    create = CloudFormationBackend.create_change_set

    def create_change_set(self, stack_name, change_set_name, template, parameters, *args, **kwargs):
        change_set_id, stack_id = create(self, stack_name, change_set_name, template, parameters, *args, **kwargs)
        cs = self.change_sets[change_set_id]
        stack = self.stacks[stack_id]
        if cs.change_set_type == "UPDATE" and stack.has_template(template) and effective(stack.template_dict, stack.parameters) == effective(cs.template_dict, parameters):
            cs.status, cs.execution_status = "FAILED", "UNAVAILABLE"
            cs.status_reason = "The submitted information didn't contain changes. Submit different information to create a change set."
        return change_set_id, stack_id

    CloudFormationBackend.create_change_set = create_change_set


def effective(template: dict, parameters: dict) -> dict[str, str]:
    """A stack's parameter values as CloudFormation compares them: given, else the default."""
    out = {k: str(v["Default"]) for k, v in (template.get("Parameters") or {}).items() if "Default" in v}
    out.update({k: str(v) for k, v in parameters.items()})
    return out


def stack_resources_without_gaps() -> None:
    """moto leaves None in a stack's resource map for each resource type it has no model of
    (alarms, dashboards, queue policies, ...), and its DescribeStackResource(s) then fail; AWS has
    every resource. List the resources moto made."""
    Stack.stack_resources = property(lambda self: [r for r in self.resource_map.values() if r is not None])


def previous_list_values() -> None:
    """An update that keeps a `CommaDelimitedList` parameter's previous value (`UsePreviousValue`,
    as `sam deploy` sends every parameter it does not override) hands moto the value it stored,
    already split, which it splits again and fails on; AWS keeps the value. Join it back first."""
    load = cfn_parsing.ResourceMap.load_parameters

    def load_parameters(self) -> None:
        self.input_parameters = {k: ",".join(v) if isinstance(v, list) else v for k, v in self.input_parameters.items()}
        load(self)

    cfn_parsing.ResourceMap.load_parameters = load_parameters


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="0: any free port")
    args = ap.parse_args(argv)
    aws_empty_change_sets()
    stack_resources_without_gaps()
    previous_list_values()
    cfn_parsing.get_model_list.cache_clear()
    cfn_parsing.get_model_map.cache_clear()
    app = Account()
    server = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler)
    app.port = server.server_address[1]
    print(f"listening on http://127.0.0.1:{app.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
