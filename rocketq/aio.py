"""asyncio API: the same producers and consumers as ``rocketq``, as coroutines.

    from rocketq.aio import Producer, PushConsumer, PullConsumer
    async with Producer("pg", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"hi"))

A PushConsumer listener may be a coroutine function; it then runs on the event loop.
"""

from .client import ConsumeResult, Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from .client.admin import AsyncAdmin as Admin
from .client.producer import AsyncProducer as Producer
from .client.pull import AsyncPullConsumer as PullConsumer
from .client.push import AsyncPushConsumer as PushConsumer
from .client.transaction import AsyncTransactionProducer as TransactionProducer
from .client.transaction import LocalTransactionState

__all__ = ["Admin", "ConsumeResult", "LocalTransactionState", "Message", "MessageQueue", "Producer",
           "PullConsumer", "PushConsumer", "ReceivedMessage", "SendResult", "SendStatus",
           "TransactionProducer"]
