"""The registration API: API Gateway REST API, `GET` and `POST /register` → the register function, with
throttling and access logs always on and a baseline WAF WebACL unless the seller passes one.

The API is unauthenticated on purpose: AWS Marketplace posts the buyer's fulfillment token to
it (https://docs.aws.amazon.com/marketplace/latest/userguide/saas-product-customer-setup.html),
so the WebACL (a per-IP rate limit and the AWS common rule set), throttling and the handler's
allowlisted, length-bounded fields are its protection.
"""

from __future__ import annotations

from .base import NO_VALUE, get_att, if_, ref, sub

# Requests per 5 minutes per IP before the WebACL blocks
# (https://docs.aws.amazon.com/waf/latest/developerguide/waf-rule-statement-type-rate-based.html).
WAF_RATE_LIMIT_PER_5_MINUTES = 300


def _visibility(name: str) -> dict:
    return {"SampledRequestsEnabled": True, "CloudWatchMetricsEnabled": True, "MetricName": name}


def _method(verb: str) -> dict:
    """GET serves the registration form, POST receives it (and AWS Marketplace's token)."""
    return {
        "Type": "AWS::ApiGateway::Method",
        "Properties": {
            "RestApiId": ref("RegistrationApi"),
            "ResourceId": ref("RegisterResource"),
            "HttpMethod": verb,
            "AuthorizationType": "NONE",
            "Integration": {
                "Type": "AWS_PROXY",
                "IntegrationHttpMethod": "POST",
                "Uri": sub(
                    "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/${RegisterFunction.Arn}/invocations"
                ),
            },
        },
    }


def _permission(verb: str) -> dict:
    return {
        "Type": "AWS::Lambda::Permission",
        "Properties": {
            "Action": "lambda:InvokeFunction",
            "FunctionName": ref("RegisterFunction"),
            "Principal": "apigateway.amazonaws.com",
            "SourceArn": sub(
                f"arn:${{AWS::Partition}}:execute-api:${{AWS::Region}}:${{AWS::AccountId}}:${{RegistrationApi}}/${{StageName}}/{verb}/register"
            ),
        },
    }


def registration_api() -> dict:
    access_log_format = (
        '{"requestId":"$context.requestId","ip":"$context.identity.sourceIp",'
        '"requestTime":"$context.requestTime","httpMethod":"$context.httpMethod",'
        '"resourcePath":"$context.resourcePath","status":"$context.status",'
        '"responseLength":"$context.responseLength","wafError":"$context.waf.error"}'
    )
    return {
        "RegistrationApi": {
            "Type": "AWS::ApiGateway::RestApi",
            "Properties": {
                "Name": sub("${AWS::StackName}-registration"),
                "Description": "AWS Marketplace SaaS registration (fulfillment URL).",
                "EndpointConfiguration": {"Types": ["REGIONAL"]},
            },
        },
        "RegisterResource": {
            "Type": "AWS::ApiGateway::Resource",
            "Properties": {
                "RestApiId": ref("RegistrationApi"),
                "ParentId": get_att("RegistrationApi", "RootResourceId"),
                "PathPart": "register",
            },
        },
        **{f"Register{verb.title()}Method": _method(verb) for verb in ("GET", "POST")},
        "RegistrationApiDeployment": {
            "Type": "AWS::ApiGateway::Deployment",
            "DependsOn": ["RegisterGetMethod", "RegisterPostMethod"],
            "Properties": {"RestApiId": ref("RegistrationApi")},
        },
        "RegistrationApiAccessLogGroup": {
            "Type": "AWS::Logs::LogGroup",
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "LogGroupName": sub("/awsmp/${StageName}/${ProductCode}/registration-api-access"),
                "RetentionInDays": ref("LogRetentionDays"),
                "KmsKeyId": if_("HasLogKmsKey", ref("LogKmsKeyArn"), NO_VALUE),
            },
        },
        "RegistrationApiStage": {
            "Type": "AWS::ApiGateway::Stage",
            "Properties": {
                "RestApiId": ref("RegistrationApi"),
                "DeploymentId": ref("RegistrationApiDeployment"),
                "StageName": ref("StageName"),
                "AccessLogSetting": {
                    "DestinationArn": get_att("RegistrationApiAccessLogGroup", "Arn"),
                    "Format": access_log_format,
                },
                "MethodSettings": [
                    {
                        "ResourcePath": "/*",
                        "HttpMethod": "*",
                        "MetricsEnabled": True,
                        "ThrottlingRateLimit": ref("ApiThrottleRateLimit"),
                        "ThrottlingBurstLimit": ref("ApiThrottleBurstLimit"),
                    }
                ],
            },
        },
        **{f"Register{verb.title()}InvokePermission": _permission(verb) for verb in ("GET", "POST")},
        "RegistrationWebAcl": {
            "Type": "AWS::WAFv2::WebACL",
            "Condition": "CreateWebAcl",
            "Properties": {
                "Scope": "REGIONAL",
                "DefaultAction": {"Allow": {}},
                "VisibilityConfig": _visibility("awsmp-registration"),
                "Rules": [
                    {
                        "Name": "rate-limit-per-ip",
                        "Priority": 0,
                        "Action": {"Block": {}},
                        "Statement": {
                            "RateBasedStatement": {"Limit": WAF_RATE_LIMIT_PER_5_MINUTES, "AggregateKeyType": "IP"}
                        },
                        "VisibilityConfig": _visibility("awsmp-registration-rate"),
                    },
                    {
                        "Name": "aws-common-rule-set",
                        "Priority": 1,
                        "OverrideAction": {"None": {}},
                        "Statement": {
                            "ManagedRuleGroupStatement": {"VendorName": "AWS", "Name": "AWSManagedRulesCommonRuleSet"}
                        },
                        "VisibilityConfig": _visibility("awsmp-registration-common"),
                    },
                ],
            },
        },
        "RegistrationWebAclAssociation": {
            "Type": "AWS::WAFv2::WebACLAssociation",
            "Properties": {
                "ResourceArn": sub(
                    "arn:${AWS::Partition}:apigateway:${AWS::Region}::/restapis/${RegistrationApi}/stages/${RegistrationApiStage}"
                ),
                "WebACLArn": if_("CreateWebAcl", get_att("RegistrationWebAcl", "Arn"), ref("WebAclArn")),
            },
        },
    }
