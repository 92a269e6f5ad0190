"""POP's records and values: the receipt handle a popped message carries, the checkpoint a pop
writes to the revive topic, what a pop hands out, a FIFO queue's state, and the constants and
topic names POP shares with its two faces (``requests`` and ``rocketq.grpc``).

They hold no I/O: ``service.PopService`` and its revive side (``revive``) keep them and write
them down.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...protocol.message import MessageRecord
from ...store import StoreMessage

if TYPE_CHECKING:
    from ...store import PutResult

#: The group whose consumer offset on the revive topic says where a replay starts.
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: The bounds of an invisible time, in ms (the 5.x proxy's: 10 s to 12 h for gRPC; a remoting
#: POP_MESSAGE may ask for less, down to 1 s, as RocketMQ's broker allows any positive value).
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: Topic types in a receipt handle (RocketMQ's ExtraInfoUtil): the topic itself, or the
#: group's pop retry topic.
NORMAL_TOPIC, RETRY_TOPIC = "0", "1"
#: How often the revive loop looks for checkpoints whose time is up, in seconds.
REVIVE_INTERVAL = 0.1
#: Most messages one pop reads from one queue before moving to the next.
MAX_POP_NUMS = 32
#: Messages popped for a consumer that asks to have them renewed (the 5.x PushConsumer's
#: ``auto_renew``) stay invisible while it lives: renewed by RENEW_BY_MS whenever less than
#: RENEW_AHEAD_MS is left, for at most RENEW_MAX_MS after the pop.
RENEW_BY_MS = 60_000
RENEW_AHEAD_MS = 20_000
RENEW_MAX_MS = 30 * 60_000


def revive_topic(cluster: str) -> str:
    """The system topic holding checkpoints and acks."""
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def pop_retry_topic(group: str, topic: str) -> str:
    """The topic revived messages of ``topic`` go to for ``group`` (KeyBuilder's V1 name,
    RocketMQ 5's default)."""
    return f"%RETRY%{group}_{topic}"


class PopError(Exception):
    """A pop, ack or invisible-time change that cannot be done. ``kind`` says which:
    ``handle`` (not a receipt handle of a message this group has out), ``expired`` (its
    invisible time is over), ``argument`` (a bad request value), ``topic``, ``group``,
    ``permission``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class ReceiptHandle:
    """What a pop hands out with each message, in RocketMQ's text form: ``start_offset
    pop_time invisible_ms revive_queue topic_type broker queue_id queue_offset
    commitlog_offset``, space-separated."""

    start_offset: int
    pop_time: int
    invisible_ms: int
    revive_queue: int
    topic_type: str
    broker: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int

    def encode(self) -> str:
        return (f"{self.start_offset} {self.pop_time} {self.invisible_ms} {self.revive_queue} "
                f"{self.topic_type} {self.broker} {self.queue_id} {self.queue_offset} "
                f"{self.commitlog_offset}")

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """Raises PopError("handle") for anything that is not a handle."""
        parts = (text or "").split(" ")
        if len(parts) < 8:
            raise PopError("handle", f"not a receipt handle: {text[:80]!r}")
        try:
            return cls(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4],
                       parts[5], int(parts[6]), int(parts[7]),
                       int(parts[8]) if len(parts) > 8 else -1)
        except ValueError:
            raise PopError("handle", f"not a receipt handle: {text[:80]!r}") from None

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms


@dataclass(eq=False)
class CheckPoint:
    """Messages one pop handed out from one queue."""

    group: str
    topic: str  # the topic they were read from: the topic, or the group's pop retry topic
    origin: str  # the topic the consumer asked for
    queue_id: int
    offsets: list[int]
    pop_time: int
    invisible_ms: int
    next_offset: int  # the queue offset the pop read up to
    fifo: bool = False
    attempt: int = 1  # FIFO: the delivery attempt of the batch
    acked: set[int] = field(default_factory=set)
    log_offset: int = -1  # where its record is in the revive topic
    done: bool = False
    #: Offsets whose ack (or move) is being written: not revived meanwhile.
    pending: set[int] = field(default_factory=set)
    #: Offsets moved to another checkpoint by a change of invisible time.
    moved: set[int] = field(default_factory=set)
    #: The consumer its invisible time is renewed for while it lives ("" for none), and
    #: until when at most.
    owner: str = ""
    renew_until: int = 0

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.group, self.topic, self.queue_id, self.offsets[0], self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms

    @property
    def open(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]

    def ref(self) -> dict[str, Any]:
        """What an ack, move or renewal record names its checkpoint by."""
        return {"g": self.group, "tp": self.topic, "q": self.queue_id, "so": self.offsets[0],
                "pt": self.pop_time}

    def record(self) -> dict[str, Any]:
        return {"t": "ck", "g": self.group, "tp": self.topic, "ot": self.origin,
                "q": self.queue_id, "o": self.offsets, "pt": self.pop_time,
                "it": self.invisible_ms, "n": self.next_offset, "f": self.fifo,
                "a": self.attempt}

    @classmethod
    def from_record(cls, data: dict[str, Any], log_offset: int) -> CheckPoint:
        return cls(data["g"], data["tp"], data["ot"], int(data["q"]),
                   [int(o) for o in data["o"]], int(data["pt"]), int(data["it"]),
                   int(data["n"]), bool(data.get("f")), int(data.get("a", 1)),
                   log_offset=log_offset)


@dataclass(slots=True)
class PoppedMessage:
    """A message handed out by a pop."""

    record: MessageRecord
    handle: str
    #: The delivery attempt: 1 the first time (reconsume count + 1; FIFO: the batch's).
    attempt: int
    #: The topic the consumer asked for (the record's topic may be the retry topic).
    topic: str
    invisible_ms: int
    pop_time: int
    #: Whether it was read from the group's pop retry topic.
    retry: bool = False


@dataclass
class PopResult:
    messages: list[PoppedMessage]
    pop_time: int
    invisible_ms: int
    #: Messages left in the queues read after this pop (RocketMQ's restNum).
    rest: int = 0


@dataclass
class FifoState:
    """A FIFO group's queue: the checkpoints out on it (one batch, split when a message's
    invisible time is changed), and the attempt the batch is at."""

    out: list[CheckPoint] = field(default_factory=list)
    attempt: int = 1
    #: Offsets at or after the consumer offset already acked (a batch acked out of order).
    acked: set[int] = field(default_factory=set)
    #: Offsets of the batch whose invisible time ended unacked, while others are still out.
    expired: set[int] = field(default_factory=set)
    #: Where in the revive topic a replay must start to know this state (the oldest record
    #: of the batch out, or the record of its last revival), or -1 when a live checkpoint
    #: holds it all.
    pin: int = -1

    @property
    def busy(self) -> bool:
        return bool(self.out) or bool(self.expired)


#: How PopService stores messages and revive records (the broker's put coroutine).
Put = Callable[[Sequence[StoreMessage]], Awaitable[list["PutResult"]]]


__all__ = [
    "MAX_INVISIBLE_MS", "MAX_POP_NUMS", "MIN_INVISIBLE_MS", "NORMAL_TOPIC", "RENEW_AHEAD_MS",
    "RENEW_BY_MS", "RENEW_MAX_MS", "RETRY_TOPIC", "REVIVE_GROUP", "REVIVE_INTERVAL",
    "CheckPoint", "FifoState", "PopError", "PopResult", "PoppedMessage", "Put",
    "ReceiptHandle", "pop_retry_topic", "revive_topic",
]
