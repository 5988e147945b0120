"""The Python producer behaves as the Rust producer it wraps: its records deaggregate with
`aws_kinesis_agg`, a full buffer pushes back (`try_record` refuses with the event and its id,
`record` waits without the GIL, `record_async` waits on the event loop), bad input gets a typed
exception with the Rust reason code and loses nothing else, and a producer is not usable across
`os.fork()`. On the local stack's Kinesis, streams of the tests' own.
"""

import asyncio
import datetime as dt
import os
import threading
import time
from collections import Counter

import pytest

from awsmp_producer import (BufferFullError, Event, EventTypeError, InvalidEventError, Producer,
                            ProducerClosedError, RecordTimeoutError, UndeliveredError)
from py_producer_stack import KinesisGate

UTC = dt.timezone.utc
ARN = "arn:aws:license-manager::123456789012:license:l-{:032x}"
ACCOUNT = "{:012d}"


def group(i):
    return ARN.format(0xB0B000 + i), ACCOUNT.format(310_000_000_000 + i)


def test_records_deaggregate_with_aws_kinesis_agg_in_v1_and_v2(stack, stream):
    other = stack.new_stream()
    try:
        sent = Counter()
        by_wire = {}
        for wire, name in ((1, stream), (2, other)):
            with Producer(name, producer_id="py-wire", wire_version=wire, linger=0.05) as p:
                for i in range(600):
                    lic, acct = group(i % 30)
                    if i % 2:
                        p.meter(lic, acct, "api_calls").record(i % 7)
                    else:
                        p.record(lic, acct, "api_calls", i % 7,
                                 usage_allocations=[{"AllocatedUsageQuantity": i % 7,
                                                     "Tags": [{"Key": "team", "Value": "t%d" % (i % 3)}]}])
                    if wire == 1:
                        sent[(lic, acct, i % 7)] += 1
            by_wire[wire] = p.stats()
        events = stack.v1_events(stream)
        records = stack.user_records(stream)
        assert any(aggregated for _, _, aggregated in records), "KPL aggregates were written"
        assert Counter((e["licenseArn"], e["customerAWSAccountId"], e["quantity"]) for e in events) == sent
        assert len({e["eventId"] for e in events}) == 600
        assert all(e["v"] == 1 and e["producerId"] == "py-wire" for e in events)
        assert all(pk == "%s|%s|api_calls" % (e["licenseArn"], e["customerAWSAccountId"])
                   for (pk, _, _), e in zip(records, events))
        v2 = stack.user_records(other)
        # v2 (docs/wire-format.md): an aggregate's first user record is its group table, then
        # one binary record per event.
        assert all(data[0] == 0x02 for _, data, _ in v2)
        assert sum(1 for _, data, _ in v2 if data[1] != 0x00) == 600
        for s in by_wire.values():
            assert (s.events_recorded, s.events_acked, s.events_undelivered) == (600, 600, 0)
            assert s.put_calls >= 1 and s.records_acked >= 1 and s.buffered_bytes == 0
            assert s.as_dict()["bytes_acked"] == s.bytes_acked
        assert by_wire[2].bytes_acked * 3 < by_wire[1].bytes_acked
    finally:
        stack.kinesis.delete_stream(StreamName=other, EnforceConsumerDeletion=True)


def test_a_full_buffer_pushes_back_as_the_rust_producer_does(stack, stream):
    gate = KinesisGate()
    lic, acct = group(1)
    try:
        p = Producer(stream, producer_id="py-full", endpoint_url=gate.url, max_buffered_bytes=64 * 1024,
                     linger=0.01, wire_version=1)
        # GIVEN a stream that takes nothing: try_record fills the buffer, then refuses
        accepted = 0
        for _ in range(100_000):
            try:
                p.try_record(lic, acct, "api_calls", 1)
                accepted += 1
            except BufferFullError as e:
                full = e
                break
        else:
            pytest.fail("the buffer never filled")
        assert accepted > 50 and full.reason == "Full"
        assert full.event.quantity == 1 and full.event.event_id.startswith("p:"), "given back with its id"
        assert p.stats().buffered_bytes > 60 * 1024

        # WHEN record() has a timeout, THEN past it the event comes back as given, not recorded
        t0 = time.monotonic()
        with pytest.raises(RecordTimeoutError) as timed_out:
            p.record(lic, acct, "api_calls", 2, timeout=0.3)
        assert time.monotonic() - t0 >= 0.3
        assert isinstance(timed_out.value, TimeoutError) and timed_out.value.reason == "Full"
        assert (timed_out.value.event.quantity, timed_out.value.event.event_id) == (2, None)

        # WHEN record() waits, THEN it waits without the GIL: this thread keeps running
        waited = threading.Event()
        threading.Thread(target=lambda: (p.record(lic, acct, "api_calls", 3), waited.set()), daemon=True).start()
        spins, end = 0, time.monotonic() + 0.3
        while time.monotonic() < end:
            spins += 1
        assert not waited.is_set() and spins > 10_000

        # ... and record_async waits on the event loop, which keeps running, until space frees
        async def waiting():
            task = asyncio.ensure_future(p.record_async(lic, acct, "api_calls", 4))
            for _ in range(20):
                await asyncio.sleep(0.01)
            assert not task.done()
            gate.open()
            await asyncio.wait_for(task, 30)

        asyncio.run(waiting())
        assert waited.wait(30)
        p.record(full.event)  # the refused event, recorded again with its id
        outcome = p.shutdown()
        assert outcome.is_complete and outcome.delivered == accepted + 3
    finally:
        gate.close()

    # THEN the stream has every accepted event once, the timed-out one not at all
    events = stack.v1_events(stream)
    assert Counter(e["quantity"] for e in events) == {1: accepted + 1, 3: 1, 4: 1}
    assert len({e["eventId"] for e in events}) == len(events)
    assert full.event.event_id in {e["eventId"] for e in events}


def allocation(q, *tags):
    return {"AllocatedUsageQuantity": q, "Tags": [{"Key": k, "Value": v} for k, v in tags]}


# (reason, exception class, what is wrong)
REFUSALS = [
    ("InvalidLicenseArn", InvalidEventError, dict(license_arn="arn:aws:license-manager::1:license:l-1")),
    ("InvalidAccountId", InvalidEventError, dict(customer_aws_account_id="12345")),
    ("EmptyDimension", InvalidEventError, dict(dimension="")),
    ("MalformedTimestamp", InvalidEventError, dict(timestamp=dt.datetime(2026, 1, 1, 12))),  # naive
    ("MalformedTimestamp", InvalidEventError, dict(timestamp=dt.datetime(1969, 12, 31, tzinfo=UTC))),
    ("MalformedTimestamp", InvalidEventError, dict(timestamp=1.8e12)),  # milliseconds by mistake
    ("NegativeQuantity", InvalidEventError, dict(quantity=-1)),
    ("NonIntegerQuantity", InvalidEventError, dict(quantity=2.5)),
    ("NonIntegerQuantity", InvalidEventError, dict(quantity=2**64)),
    ("WrongFieldType", EventTypeError, dict(quantity="3")),
    ("WrongFieldType", EventTypeError, dict(quantity=True)),
    ("WrongFieldType", EventTypeError, dict(dimension=b"api_calls")),
    ("WrongFieldType", EventTypeError, dict(timestamp="2026-01-01T00:00:00Z")),
    ("WrongFieldType", EventTypeError, dict(customer_aws_account_id=None)),
    ("InvalidEventId", InvalidEventError, dict(event_id="")),
    ("InvalidEventId", InvalidEventError, dict(event_id="x" * 300)),
    ("EmptyProducerId", InvalidEventError, dict(producer_id="")),
    ("AllocationSumMismatch", InvalidEventError, dict(quantity=5, usage_allocations=[allocation(4, ("t", "a"))])),
    ("TooManyTags", InvalidEventError,
     dict(quantity=1, usage_allocations=[allocation(1, *[("k%d" % i, "v") for i in range(6)])])),
    ("MissingTagKeyOrValue", InvalidEventError, dict(quantity=1, usage_allocations=[allocation(1, ("", "v"))])),
    ("MalformedAllocations", InvalidEventError, dict(quantity=1, usage_allocations=[])),
    ("MalformedAllocations", InvalidEventError, dict(quantity=1, usage_allocations="team=a")),
    ("NegativeOrNonIntegerAllocation", InvalidEventError,
     dict(quantity=1, usage_allocations=[allocation(-1, ("t", "a"))])),
    ("DimensionTooLong", InvalidEventError, dict(dimension="d" * 256)),
    ("EventTooLarge", InvalidEventError, dict(producer_id="p" * (1 << 20))),
]


def test_bad_input_gets_a_typed_exception_and_loses_nothing_else(stack, stream):
    lic, acct = group(2)
    good = dict(license_arn=lic, customer_aws_account_id=acct, dimension="api_calls", quantity=1,
                timestamp=dt.datetime.now(UTC))
    p = Producer(stream, producer_id="py-refusals", wire_version=1, linger=0.01)
    ways = [p.record, p.try_record, lambda **kw: asyncio.run(p.record_async(**kw))]
    meter = p.meter(lic, acct, "storage_gb_hours")
    for n, (reason, cls, wrong) in enumerate(REFUSALS):
        record = ways[n % 3]
        with pytest.raises(cls) as refused:
            record(**{**good, **wrong})
        assert refused.value.reason == reason, (wrong, refused.value)
        if refused.value.event is not None:  # refused by the Rust producer: given back whole
            assert refused.value.event.license_arn == {**good, **wrong}["license_arn"]
        # ... and the next event of the same caller is recorded as if nothing happened
        record(**{**good, "quantity": 100 + n})
        meter.record(n)
    for call, reason in [(lambda: p.meter("arn:x", acct, "d"), "InvalidLicenseArn"),
                         (lambda: p.meter(lic, acct, ""), "EmptyDimension"),
                         (lambda: meter.record(-1), "NegativeQuantity"),
                         (lambda: meter.record(1, dt.datetime(2026, 1, 1)), "MalformedTimestamp"),
                         (lambda: meter.try_record("1"), "WrongFieldType")]:
        with pytest.raises(InvalidEventError) as refused:
            call()
        assert refused.value.reason == reason
    outcome = p.shutdown()
    assert outcome.is_complete and outcome.delivered == 2 * len(REFUSALS)
    with pytest.raises(ProducerClosedError) as closed:
        p.record(**good)
    assert closed.value.reason == "Closed" and closed.value.event.quantity == 1

    events = stack.v1_events(stream)
    assert sorted(e["quantity"] for e in events if e["dimension"] == "api_calls") == \
        [100 + n for n in range(len(REFUSALS))]
    assert sorted(e["quantity"] for e in events if e["dimension"] == "storage_gb_hours") == \
        list(range(len(REFUSALS)))


def test_timestamps_are_aware_datetimes_or_epoch_seconds_to_the_millisecond():
    lic, acct = group(3)
    at = dt.datetime(2026, 11, 30, 12, 34, 56, 789_999, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    expected = dt.datetime(2026, 11, 30, 17, 34, 56, 789_000, tzinfo=UTC)
    for given in (at, at.timestamp(), expected):
        assert Event(lic, acct, "d", 1, given).timestamp == expected
    assert Event(lic, acct, "d", 1, 1_796_041_800).timestamp == dt.datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
    assert Event(lic, acct, "d", 1, 1_796_041_800.123).timestamp.microsecond == 123_000
    made = Event(lic, acct, "d", 1)
    assert abs(made.timestamp - dt.datetime.now(UTC)) < dt.timedelta(seconds=5)
    e = Event(lic, acct, "d", 4, at, event_id="x-1", producer_id="svc",
              usage_allocations=[allocation(4, ("team", "a"))])
    assert (e.event_id, e.producer_id, e.usage_allocations) == ("x-1", "svc", [allocation(4, ("team", "a"))])
    assert e == Event(lic, acct, "d", 4, expected, event_id="x-1", producer_id="svc",
                      usage_allocations=[allocation(4, ("team", "a"))])


def test_a_producer_started_before_fork_refuses_in_the_child(stream):
    lic, acct = group(4)
    p = Producer(stream)
    pid = os.fork()
    if pid == 0:  # the child: the parent's producer refuses, a new one works
        code = 1
        try:
            p.record(lic, acct, "api_calls", 1)
        except ProducerClosedError:
            with Producer(stream, producer_id="py-child") as mine:
                mine.record(lic, acct, "api_calls", 1)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    p.record(lic, acct, "api_calls", 2)
    assert p.shutdown().delivered == 1


def test_async_with_delivers_and_with_raises_what_it_could_not_deliver(stack, stream):
    lic, acct = group(5)

    async def service():
        async with Producer(stream, producer_id="py-async", wire_version=1) as p:
            await p.record_async(lic, acct, "api_calls", 5)
            await p.meter(lic, acct, "api_calls").record_async(6)
            assert (await p.flush_async()).delivered == 2
            await p.record_async(Event(lic, acct, "api_calls", 7))

    asyncio.run(service())
    assert sorted(e["quantity"] for e in stack.v1_events(stream)) == [5, 6, 7]

    # A `with` block whose events cannot be delivered raises them back on leaving
    with pytest.raises(UndeliveredError) as raised:
        with Producer(stream, endpoint_url="http://127.0.0.1:9", record_ttl=0.3) as p:
            p.record(lic, acct, "api_calls", 8)
    assert raised.value.reason == "Undelivered"
    assert [u.event.quantity for u in raised.value.outcome.undelivered] == [8]
