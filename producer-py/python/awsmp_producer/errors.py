"""The producer's exceptions. Each has `reason`, a stable code (the Rust producer's own:
`InvalidLicenseArn`, `EventTooLarge`, `Full`, `Closed`, ...), and `event`, the event it is
about when there is one: the producer never drops an event silently, it gives it back."""

from typing import Any, Optional

__all__ = [
    "ProducerError",
    "InvalidEventError",
    "EventTypeError",
    "BufferFullError",
    "RecordTimeoutError",
    "ProducerClosedError",
    "ConfigError",
    "UndeliveredError",
]


class ProducerError(Exception):
    """Every error the producer raises.

    Attributes:
        reason: a stable reason code, for logs, metrics and `except` logic.
        event: the `Event` the error is about (given back), or None.
    """

    def __init__(self, message: str, reason: str, event: Optional[Any] = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.event = event

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        return (type(self), (self.message, self.reason, self.event))


class InvalidEventError(ProducerError, ValueError):
    """The event breaks a rule and was not recorded; nothing else is affected. `reason` is
    the Rust `ValidationError`'s code (`InvalidLicenseArn`, `InvalidAccountId`,
    `EmptyDimension`, `DimensionTooLong`, `MalformedTimestamp`, `EmptyProducerId`, `InvalidEventId`,
    `MalformedAllocations`, `TooManyTags`, `MissingTagKeyOrValue`, `TooManyAllocations`,
    `AllocationSumMismatch`, `EventTooLarge`) or, for what Rust's types rule out, the code
    the consumer gives the same fault on the wire (`NegativeQuantity`, `NonIntegerQuantity`,
    `NegativeOrNonIntegerAllocation`, `MalformedTimestamp` for a naive datetime)."""


class EventTypeError(InvalidEventError, TypeError):
    """A field of the wrong type (`reason` is `WrongFieldType`), or a required one missing."""


class BufferFullError(ProducerError):
    """`try_record()`: the buffer is full (`reason` `Full`). `event` has its id assigned, so
    recording it again later is billed once."""


class RecordTimeoutError(BufferFullError, TimeoutError):
    """`record(..., timeout=...)`: no buffer space within the timeout. The event was not
    recorded; `event` is the event as given."""


class ProducerClosedError(ProducerError):
    """The producer was shut down (or started before `os.fork()` in a parent process);
    `reason` `Closed`. `event`, if any, was not recorded."""


class ConfigError(ProducerError, ValueError):
    """An unusable setting (`reason` `Config`)."""


class UndeliveredError(ProducerError):
    """Leaving a `with Producer(...)` block found events that could not be delivered.
    `outcome` is the shutdown's `Outcome`: its `undelivered` events are handed back there."""

    def __init__(self, outcome: Any) -> None:
        super().__init__(
            "{} events could not be delivered (outcome.undelivered has them)".format(
                outcome.undelivered_events),
            "Undelivered",
        )
        self.outcome = outcome

    def __reduce__(self) -> Any:
        return (type(self), (self.outcome,))
