"""infra/events/ holds a sample event for every function the templates deploy, in the shape
Lambda delivers it; the discoverer's samples are inputs its rules really send, and the
subscription sample is an event its rule really matches. The Rust handlers run the samples in
pipeline/tests/integration/sample_events.rs, consumer/tests/integration/sample_events.rs,
meter-ingest/tests/integration/sample_events.rs and lifecycle/tests/integration/sample_events.rs."""

from __future__ import annotations

import json

from stack_templates import INFRA, STACKS, functions, load

EVENTS = INFRA / "events"


def samples() -> dict[str, object]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(EVENTS.glob("*.json"))}


def test_every_function_has_a_sample_event():
    names = set(samples())
    for stack in STACKS:
        for fid, fn in functions(load(stack)).items():
            binary = fn["Metadata"]["BuildProperties"]["Binary"]
            assert any(n == f"{binary}.json" or n.startswith(f"{binary}-") for n in names), f"no infra/events/{binary}*.json"


def test_discoverer_samples_are_inputs_of_its_rules():
    inputs = [
        json.loads(t["Input"])
        for r in load("main")["Resources"].values()
        if r["Type"] == "AWS::Events::Rule"
        for t in r["Properties"]["Targets"]
        if "Input" in t
    ]
    assert len(inputs) == 31  # 23 meter offsets, 7 age-out shards, the flush
    for name, event in samples().items():
        if name.startswith("discoverer-"):
            assert event in inputs, name


def test_sqs_samples_are_sqs_events_and_the_subscription_one_matches_the_rule():
    s = samples()
    for name in ("aggregator.json", "cleanup.json", "subscription.json"):
        assert all(r["eventSource"] == "aws:sqs" and "body" in r for r in s[name]["Records"]), name
    body = json.loads(s["subscription.json"]["Records"][0]["body"])
    pattern = load("events")["Resources"]["AgreementEventsRule"]["Properties"]["EventPattern"]
    live_source = pattern["source"][0]["Fn::If"][2]
    assert body["source"] == live_source and body["detail-type"] in pattern["detail-type"]


def test_the_other_samples_have_their_event_shapes():
    s = samples()
    assert s["register.json"]["httpMethod"] == "POST" and s["register.json"]["resource"] == "/register"
    assert "x-amzn-marketplace-token=" in s["register.json"]["body"]
    assert all(r["eventSource"] == "aws:kinesis" for r in s["kinesis-consumer.json"]["Records"])
    for name in ("submitter.json", "expiry.json", "deprovision-cleanup.json", "stream-heartbeat.json"):
        assert s[name]["detail-type"] == "Scheduled Event" and s[name]["source"] == "aws.events"
    assert isinstance(s["meter-ingest.json"]["events"], list)
