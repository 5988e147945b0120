"""Type stubs of the extension module (src/*.rs). Import from `awsmp_producer`."""

import datetime
from typing import Any, Dict, List, Optional, Sequence, TypedDict, Union, overload

Timestamp = Union[datetime.datetime, int, float]
Seconds = Union[int, float, datetime.timedelta]

class Tag(TypedDict):
    Key: str
    Value: str

class UsageAllocation(TypedDict):
    AllocatedUsageQuantity: int
    Tags: List[Tag]

class Event:
    """One usage event. `timestamp`: an aware datetime or epoch seconds (now when left out);
    `event_id`: the caller's idempotency key (None: one is generated at `record()`)."""

    def __init__(
        self,
        license_arn: str,
        customer_aws_account_id: str,
        dimension: str,
        quantity: int,
        timestamp: Optional[Timestamp] = None,
        *,
        event_id: Optional[str] = None,
        producer_id: Optional[str] = None,
        usage_allocations: Optional[Sequence[UsageAllocation]] = None,
    ) -> None: ...
    @property
    def license_arn(self) -> str: ...
    @property
    def customer_aws_account_id(self) -> str: ...
    @property
    def dimension(self) -> str: ...
    @property
    def quantity(self) -> int: ...
    @property
    def timestamp(self) -> datetime.datetime:
        """An aware datetime in UTC, to the millisecond."""
    @property
    def event_id(self) -> Optional[str]: ...
    @property
    def producer_id(self) -> Optional[str]: ...
    @property
    def usage_allocations(self) -> Optional[List[UsageAllocation]]: ...

class Undelivered:
    """An event the producer could not deliver, handed back."""

    @property
    def event(self) -> Event:
        """The event as sent, with its id: recording it again as it is bills it once."""
    @property
    def partition_key(self) -> str: ...
    @property
    def reason(self) -> str:
        """`RecordTtlExpired` or `Rejected`."""
    @property
    def detail(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def maybe_delivered(self) -> bool:
        """A call carrying it may have been applied (its response was lost)."""
    @property
    def constituents(self) -> int:
        """Recorded events it stands for (more than 1 when collapsed)."""

class Outcome:
    """What `flush()` and `shutdown()` return."""

    @property
    def delivered(self) -> int:
        """Events acknowledged by Kinesis since the producer started."""
    @property
    def undelivered(self) -> List[Undelivered]:
        """Events handed back since the last flush."""
    @property
    def undelivered_events(self) -> int:
        """Recorded events among them (collapsed events count their constituents)."""
    @property
    def is_complete(self) -> bool: ...

class Stats:
    """The producer's counters since it started."""

    events_recorded: int
    events_acked: int
    events_undelivered: int
    records_acked: int
    bytes_acked: int
    put_calls: int
    retries: int
    throttles: int
    shard_refreshes: int
    buffered_bytes: int
    max_buffered_bytes: int
    def as_dict(self) -> Dict[str, int]: ...

class Meter:
    """A producer bound to one group: `record(quantity)` per event."""

    def record(
        self, quantity: int = 1, timestamp: Optional[Timestamp] = None, *, timeout: Optional[Seconds] = None
    ) -> None:
        """Records `quantity` units at `timestamp` (now when left out); waits, without the GIL,
        while the buffer is full (up to `timeout`: then `RecordTimeoutError`)."""
    def try_record(self, quantity: int = 1, timestamp: Optional[Timestamp] = None) -> None:
        """Records if there is buffer space now; else `BufferFullError`."""
    async def record_async(self, quantity: int = 1, timestamp: Optional[Timestamp] = None) -> None:
        """`record()` for asyncio: waits on the event loop while the buffer is full."""
    @property
    def partition_key(self) -> str: ...

class Producer:
    def __init__(
        self,
        stream: str,
        *,
        producer_id: Optional[str] = None,
        linger: Optional[Seconds] = None,
        collapse: bool = False,
        region: Optional[str] = None,
        endpoint_url: Optional[str] = None,
        max_buffered_bytes: Optional[int] = None,
        record_ttl: Optional[Seconds] = None,
        wire_version: int = 2,
    ) -> None: ...
    @overload
    def record(self, event: Event, *, timeout: Optional[Seconds] = None) -> None: ...
    @overload
    def record(
        self,
        license_arn: str,
        customer_aws_account_id: str,
        dimension: str,
        quantity: int,
        timestamp: Optional[Timestamp] = None,
        *,
        event_id: Optional[str] = None,
        producer_id: Optional[str] = None,
        usage_allocations: Optional[Sequence[UsageAllocation]] = None,
        timeout: Optional[Seconds] = None,
    ) -> None:
        """Records one event; waits, without the GIL, while the buffer is full (up to
        `timeout`: then `RecordTimeoutError`). Invalid events raise `InvalidEventError`."""
    @overload
    def try_record(self, event: Event) -> None: ...
    @overload
    def try_record(
        self,
        license_arn: str,
        customer_aws_account_id: str,
        dimension: str,
        quantity: int,
        timestamp: Optional[Timestamp] = None,
        *,
        event_id: Optional[str] = None,
        producer_id: Optional[str] = None,
        usage_allocations: Optional[Sequence[UsageAllocation]] = None,
    ) -> None:
        """Records one event if there is buffer space now; else `BufferFullError`."""
    @overload
    async def record_async(self, event: Event) -> None: ...
    @overload
    async def record_async(
        self,
        license_arn: str,
        customer_aws_account_id: str,
        dimension: str,
        quantity: int,
        timestamp: Optional[Timestamp] = None,
        *,
        event_id: Optional[str] = None,
        producer_id: Optional[str] = None,
        usage_allocations: Optional[Sequence[UsageAllocation]] = None,
    ) -> None:
        """`record()` for asyncio: waits on the event loop while the buffer is full."""
    def meter(self, license_arn: str, customer_aws_account_id: str, dimension: str) -> Meter:
        """A `Meter` for one group, validated once (`InvalidEventError` if it is not valid)."""
    def flush(self) -> Outcome:
        """Sends everything buffered; waits until every event recorded before it is
        acknowledged or handed back."""
    async def flush_async(self) -> Outcome: ...
    def shutdown(self) -> Outcome:
        """Stops accepting events, delivers everything buffered (bounded by `record_ttl`)."""
    async def shutdown_async(self) -> Outcome: ...
    def take_undelivered(self) -> List[Undelivered]: ...
    def stats(self) -> Stats: ...
    @property
    def stream(self) -> str: ...

def after_fork_in_child() -> None: ...
