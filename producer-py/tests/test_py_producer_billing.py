"""Events recorded with the Python producer are billed exactly once: through the usage stream,
the consumer and the pipeline into the Marketplace simulator's ledger, on the local stack, as a
seller's service would record them — from threads and from asyncio, through `record`,
`try_record`, meters and re-recorded hand-backs — and the README's example as it is written.

Every test meters a license of its own (subscribed at the simulator), so the ledger's entries
for it are this test's alone. Billing goes by the stream's arrival time, so a test compares
what each dimension was billed over the hours it ran in.
"""

import asyncio
import datetime as dt
import os
import random
import re
import socket
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from awsmp_producer import BufferFullError, Event, Producer
from py_producer_stack import REPO, utc_hour

DIMENSIONS = ("api_calls", "storage_gb_hours", "compute_minutes")


def now():
    return dt.datetime.now(dt.timezone.utc)


def totals(billed):
    """{dimension: quantity} over every hour billed."""
    out = Counter()
    for (dimension, _hour), q in billed.items():
        out[dimension] += q
    return dict(out)


def assert_billed_once(stack, license_arn, expected, started):
    """Ticks the pipeline, then: each dimension billed exactly `expected`, in the hours the
    test ran, no DuplicateRecord; a second tick bills nothing more."""
    stack.bill_hours_of_now(started)
    billed, duplicates = stack.billed(license_arn)
    assert totals(billed) == {d: q for d, q in expected.items() if q}, billed
    assert {h for _, h in billed} <= {utc_hour(started), utc_hour(now())}
    assert duplicates == []
    stack.bill_hours_of_now(started)
    assert stack.billed(license_arn) == (billed, [])


def test_events_recorded_from_threads_and_asyncio_are_billed_exactly_once(stack):
    lic, acct = stack.fresh_license()
    stream = os.environ["AWSMP_USAGE_STREAM"]
    started = now()
    plain = Producer(stream, producer_id="py-threads", linger=0.05)
    collapsing = Producer(stream, producer_id="py-collapse", collapse=True, linger=0.05)
    counted = threading.Lock()
    expected = Counter()

    # GIVEN 8 threads recording through every synchronous call, with and without collapse
    def thread(i):
        rng = random.Random(i)
        meter = plain.meter(lic, acct, "api_calls")
        collapsing_meter = collapsing.meter(lic, acct, "compute_minutes")
        mine = Counter()
        for n in range(400):
            q = rng.randrange(0, 10)
            way = n % 5
            if way == 0:
                plain.record(lic, acct, "api_calls", q, now())
            elif way == 1:
                meter.record(q)
            elif way == 2:
                collapsing.record(lic, acct, "compute_minutes", q, now().timestamp())
            elif way == 3:
                collapsing_meter.record(q, now())
            else:
                while True:
                    try:
                        meter.try_record(q)
                        break
                    except BufferFullError as full:
                        plain.record(full.event)  # its id assigned: recorded once
                        break
            mine["compute_minutes" if way in (2, 3) else "api_calls"] += q
        with counted:
            expected.update(mine)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(thread, range(8)))

    # ... and 8 asyncio tasks through the asynchronous ones
    async def tasks():
        meter = collapsing.meter(lic, acct, "storage_gb_hours")

        async def task(i):
            rng = random.Random(100 + i)
            for n in range(200):
                q = rng.randrange(0, 10)
                if n % 2:
                    await plain.record_async(lic, acct, "storage_gb_hours", q)
                else:
                    await meter.record_async(q)
                expected["storage_gb_hours"] += q

        await asyncio.gather(*(task(i) for i in range(8)))

    asyncio.run(tasks())

    # ... and an event with an id of its own, recorded twice (a retry after a crash, say)
    order = Event(lic, acct, "api_calls", 7, now(), event_id="order-%d-line-1" % random.randrange(10**9))
    plain.record(order)
    plain.record(order)
    expected["api_calls"] += 7

    # WHEN both producers shut down
    for p in (plain, collapsing):
        outcome = p.shutdown()
        assert outcome.is_complete, outcome.undelivered
        assert outcome.delivered == p.stats().events_recorded
    assert plain.stats().events_recorded == 8 * 240 + 8 * 100 + 2
    assert collapsing.stats().events_recorded == 8 * 160 + 8 * 100

    # THEN the pipeline bills every unit once
    assert_billed_once(stack, lic, expected, started)


def test_handed_back_events_recorded_again_are_billed_once(stack):
    lic, acct = stack.fresh_license()
    stream = os.environ["AWSMP_USAGE_STREAM"]
    started = now()
    # GIVEN a producer whose Kinesis endpoint refuses every connection
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    dead = Producer(stream, producer_id="py-handback", endpoint_url="http://127.0.0.1:%d" % dead_port,
                    record_ttl=0.5)
    meter = dead.meter(lic, acct, "api_calls")
    recorded = []
    for i in range(30):
        if i % 3 == 0:
            meter.record(i)
            recorded.append(("api_calls", i, None))
        else:
            own = "job-%d-%d" % (random.randrange(10**9), i) if i % 3 == 1 else None
            dead.record(lic, acct, "compute_minutes", i, event_id=own)
            recorded.append(("compute_minutes", i, own))

    # WHEN it shuts down, THEN every event comes back, with its id, as it was recorded
    outcome = dead.shutdown()
    assert outcome.delivered == 0 and outcome.undelivered_events == 30
    assert {u.reason for u in outcome.undelivered} == {"RecordTtlExpired"}
    back = [u.event for u in outcome.undelivered]
    assert sorted((e.dimension, e.quantity) for e in back) == sorted((d, q) for d, q, _ in recorded)
    assert {e.event_id for e in back} >= {own for _, _, own in recorded if own}
    assert all(e.event_id and e.producer_id == "py-handback" for e in back)

    # WHEN a working producer records them again — a third of them twice
    with Producer(stream, producer_id="py-handback-2") as good:
        for e in back + back[::3]:
            good.record(e)

    # THEN each is billed once
    expected = Counter()
    for d, q, _ in recorded:
        expected[d] += q
    assert_billed_once(stack, lic, expected, started)


def readme_example(path):
    text = path.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "%s has a Python example" % path
    return blocks[0]


def test_the_readme_example_is_billed_exactly_once(stack):
    example = readme_example(REPO / "README.md")
    assert example == readme_example(REPO / "producer-py" / "README.md"), "one example, in both READMEs"
    code = [line for line in example.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(code) <= 10, code
    lic = re.search(r'arn = "([^"]+)"', example).group(1)
    started = now()
    if stack.billed(lic)[0]:
        # A stack that ran the example before (a developer's): the same lines, a fresh license.
        fresh, account = stack.fresh_license()
        example = example.replace(lic, fresh).replace(re.search(r'account = "(\d+)"', example).group(1), account)
        lic = fresh
    subprocess.run([sys.executable, "-c", example], check=True, timeout=120)
    assert_billed_once(stack, lic, {"api_calls": 1000, "storage_gb_hours": 5}, started)
