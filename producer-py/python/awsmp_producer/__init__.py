"""awsmp-producer for Python: AWS Marketplace usage events to an Amazon Kinesis data stream,
by the awsmp Rust producer (KPL aggregation, per-shard budgets, retries of only the failed
entries, generated idempotent event ids, a bounded buffer with back-pressure, hand-back of what
could not be delivered) running in this process.

    with Producer("awsmp-usage-events", producer_id="checkout") as producer:
        producer.record(license_arn, account_id, "api_calls", 3)

Leaving the block delivers everything buffered (`shutdown()`), and raises `UndeliveredError`
if anything could not be delivered. See producer-py/README.md and docs/python-producer.md.
"""

import atexit
import logging
import os
import weakref
from typing import Any, Optional

from . import errors
from ._native import Event, Meter, Outcome, Stats, Undelivered
from ._native import Producer as _NativeProducer
from ._native import after_fork_in_child as _after_fork_in_child
from .errors import (BufferFullError, ConfigError, EventTypeError, InvalidEventError, ProducerClosedError,
                     ProducerError, RecordTimeoutError, UndeliveredError)

__all__ = [
    "Producer", "Meter", "Event", "Outcome", "Undelivered", "Stats",
    "ProducerError", "InvalidEventError", "EventTypeError", "BufferFullError", "RecordTimeoutError",
    "ProducerClosedError", "ConfigError", "UndeliveredError", "errors",
]

_log = logging.getLogger("awsmp_producer")

# A producer's threads do not survive os.fork(): what a parent started refuses to work in the
# child (ProducerClosedError) instead of buffering events nothing would send.
os.register_at_fork(after_in_child=_after_fork_in_child)

# Producers not yet shut down, so that the interpreter's exit delivers what they hold.
_open: "weakref.WeakSet[Producer]" = weakref.WeakSet()


class Producer(_NativeProducer):
    """Buffers, packs and ships usage events to a Kinesis data stream from background threads.

    Producer(stream, *, producer_id=None, linger=0.1, collapse=False, region=None,
             endpoint_url=None, max_buffered_bytes=64 MiB, record_ttl=30.0, wire_version=2)

    Credentials and region come from the usual AWS chain (environment, profile, container or
    instance role); `region` and `endpoint_url` override it. Use it as a context manager
    (`with` or `async with`): leaving the block calls `shutdown()` and raises
    `UndeliveredError` if anything could not be delivered. Thread-safe: share one producer.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "Producer":
        self = super().__new__(cls, *args, **kwargs)
        _open.add(self)
        return self

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._finish(self.shutdown(), exc)

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._finish(await self.shutdown_async(), exc)

    def _finish(self, outcome: Outcome, exc: Optional[BaseException]) -> None:
        _open.discard(self)
        if outcome.is_complete:
            return
        if exc is None:
            raise UndeliveredError(outcome)
        # Another exception is on its way out: keep it, and say what was not delivered.
        _log.error("producer for %s: %d events not delivered while leaving on %r: %r",
                   self.stream, outcome.undelivered_events, exc, outcome.undelivered)


@atexit.register
def _shutdown_open_producers() -> None:
    for producer in list(_open):
        try:
            outcome = producer.shutdown()
        except ProducerError:
            continue
        if not outcome.is_complete:
            _log.error("producer for %s: %d events not delivered at exit: %r",
                       producer.stream, outcome.undelivered_events, outcome.undelivered)
