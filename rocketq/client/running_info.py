"""What a consumer tells admin tools about itself, in the JSON shapes Java's mqadmin decodes:
ConsumerRunningInfo (GET_CONSUMER_RUNNING_INFO, for ``consumerProgress -s`` and
``consumerStatus``) and ConsumeMessageDirectlyResult (CONSUME_MESSAGE_DIRECTLY, for
``consumeMessage``).

ConsumerRunningInfo is fastjson's form of RocketMQ's class: ``properties`` (the consumer's
settings, as strings, and the PROP_* entries mqadmin reads), ``subscriptionSet``
(SubscriptionData), ``mqTable`` (MessageQueue -> ProcessQueueInfo, a map keyed by objects) and
``statusTable`` (topic -> ConsumeStatus). rocketq does not measure pull and consume rates, so
the ConsumeStatus figures are zeros.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys
import threading
import time
import traceback
from typing import Any

from .._version import __version__
from ..protocol import fastjson
from .checks import FROM_WHERE, MODELS
from .consume_service import ConsumeResult
from .message import MessageQueue, ReceivedMessage

PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
#: Spelled so in RocketMQ (ConsumerRunningInfo.PROP_CONSUME_ORDERLY's value).
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"

MIB = 1024 * 1024

#: CMResult: how a message consumed directly fared.
CR_SUCCESS = "CR_SUCCESS"
CR_LATER = "CR_LATER"
CR_ROLLBACK = "CR_ROLLBACK"
CR_COMMIT = "CR_COMMIT"
CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
CR_RETURN_NULL = "CR_RETURN_NULL"


def _properties(consumer: Any) -> dict[str, str]:
    """The consumer's settings under the Java consumer's property names, and the PROP_*."""
    instance = consumer.instance
    props: dict[str, Any] = {
        "consumerGroup": consumer.group,
        "messageModel": MODELS[consumer.model],
        "consumeFromWhere": FROM_WHERE[consumer.from_where],
        "allocateMessageQueueStrategy": getattr(consumer.allocate, "name",
                                                type(consumer.allocate).__name__),
        "namesrvAddr": ";".join(instance.namesrv_addrs),
        "clientIP": instance.client_id.split("@", 1)[0],
        "instanceName": instance.client_id.split("@", 1)[-1],
        "unitMode": False,
    }
    if consumer.consume_timestamp is not None:
        props["consumeTimestamp"] = consumer.consume_timestamp
    if consumer.consume_type == "CONSUME_PASSIVELY":  # the push consumer
        props.update({
            "consumeThreadMin": consumer.consume_thread_min,
            "consumeThreadMax": consumer.consume_thread_max,
            "pullBatchSize": consumer.pull_batch_size,
            "consumeMessageBatchMaxSize": consumer.batch_size,
            "pullThresholdForQueue": consumer.pull_threshold_for_queue,
            "pullThresholdSizeForQueue": consumer.pull_threshold_size_for_queue // MIB,
            "maxReconsumeTimes": consumer.max_reconsume_times,
            "suspendCurrentQueueTimeMillis": int(consumer.suspend_current_queue_time * 1000),
            "persistConsumerOffsetInterval": int(consumer.persist_interval * 1000),
            PROP_CONSUME_ORDERLY: consumer.orderly,
            # The listener pool has consume_thread_max threads from the start.
            PROP_THREADPOOL_CORE_SIZE: consumer.consume_thread_max,
        })
    else:  # the pull consumer
        props.update({
            "pullBatchSize": consumer.pull_batch_size,
            "autoCommit": consumer.auto_commit,
            "pullThresholdForQueue": consumer.pull_threshold_for_queue,
            "pollTimeoutMillis": int(consumer.suspend_timeout * 1000),
        })
    props.update({
        PROP_CONSUMER_START_TIMESTAMP: consumer.start_timestamp,
        # MQClientInstance writes each address followed by ";".
        PROP_NAMESERVER_ADDR: "".join(f"{a};" for a in instance.namesrv_addrs),
        PROP_CONSUME_TYPE: consumer.consume_type,
        PROP_CLIENT_VERSION: f"rocketq {__version__}",
    })
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in props.items()}


def _queue_info(consumer: Any, mq: MessageQueue, state: Any) -> dict[str, Any]:
    """ProcessQueueInfo of one owned queue (ProcessQueue.fillProcessQueueInfo)."""
    commit = consumer.offset_store.read_memory(mq)
    info: dict[str, Any] = {
        "commitOffset": -1 if commit is None else commit,
        "cachedMsgMinOffset": 0, "cachedMsgMaxOffset": 0, "cachedMsgCount": 0,
        "cachedMsgSizeInMiB": 0, "transactionMsgMinOffset": 0, "transactionMsgMaxOffset": 0,
        "transactionMsgCount": 0, "locked": False, "tryUnlockTimes": 0,
        "lastLockTimestamp": 0, "droped": False, "lastPullTimestamp": 0,
        "lastConsumeTimestamp": 0,
    }
    messages = getattr(state, "messages", None)
    if messages is not None:  # the push consumer's ProcessQueue
        offsets = list(messages)
        if offsets:
            info.update(cachedMsgMinOffset=min(offsets), cachedMsgMaxOffset=max(offsets),
                        cachedMsgCount=len(offsets))
        info.update(cachedMsgSizeInMiB=state.cached_bytes // MIB,
                    locked=bool(consumer._locking() and state.locked), droped=state.dropped,
                    lastPullTimestamp=state.last_pull_timestamp,
                    lastConsumeTimestamp=state.last_consume_timestamp)
    else:  # the pull consumer's queue state: messages fetched but not polled yet
        if state.buffered:
            info.update(cachedMsgMinOffset=state.consumed,
                        cachedMsgMaxOffset=state.next_offset - 1)
        info.update(cachedMsgCount=state.buffered)
    return info


def _thread_stacks() -> str:
    """Every thread's stack, the answer to ``jstackEnable``. The garbage collector is off
    meanwhile: a collection run here, holding other threads' live frames, once finalized an
    abandoned event loop in the middle of formatting and never returned."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for ident, frame in sys._current_frames().items():
            parts.append(f'"{names.get(ident, ident)}"\n'
                         + "".join(traceback.format_stack(frame)))
            del frame
    finally:
        if was_enabled:
            gc.enable()
    return "\n".join(parts)


def consumer_running_info(consumer: Any, jstack: bool = False) -> bytes:
    """The ConsumerRunningInfo body of a push or pull consumer."""
    subs = sorted(consumer._all_subscriptions().values(),
                  key=lambda s: (s.topic, s.expression))
    mq_table = fastjson.ObjectKeyMap([
        (mq.to_json(), _queue_info(consumer, mq, state))
        for mq, state in sorted(consumer.owned.items())])
    status = {"pullRT": 0.0, "pullTPS": 0.0, "consumeRT": 0.0, "consumeOKTPS": 0.0,
              "consumeFailedTPS": 0.0, "consumeFailedMsgs": 0}
    info: dict[str, Any] = {
        "properties": _properties(consumer),
        "subscriptionSet": [s.to_json() for s in subs],
        "mqTable": mq_table,
        "statusTable": {s.topic: dict(status) for s in subs},
    }
    if jstack:
        info["jstack"] = _thread_stacks()
    return fastjson.dumps(info)


async def consume_message_directly(consumer: Any, message: ReceivedMessage) -> bytes:
    """Run the push consumer's listener on one message and answer how it went
    (ConsumeMessageConcurrentlyService / ConsumeMessageOrderlyService.consumeMessageDirectly).

    A listener returning None has consumed the message (rocketq's listener contract), so that
    is CR_SUCCESS; CR_RETURN_NULL is kept for a value that is not a ConsumeResult at all."""
    listener = consumer.listener
    begin = time.monotonic()
    remark = None
    try:
        if inspect.iscoroutinefunction(listener):
            result = await listener([message])
        else:
            result = await asyncio.get_running_loop().run_in_executor(
                consumer.executor, listener, [message])
            if inspect.isawaitable(result):
                result = await result
    except Exception as exc:
        outcome = CR_THROW_EXCEPTION
        remark = f"{type(exc).__name__}: {exc}"
    else:
        if result is None or result is ConsumeResult.SUCCESS:
            outcome = CR_SUCCESS
        elif result in (ConsumeResult.RECONSUME_LATER,
                        ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT):
            outcome = CR_LATER
        else:
            outcome = CR_RETURN_NULL
            remark = f"the listener returned {result!r}, not a ConsumeResult"
    answer: dict[str, Any] = {"autoCommit": True, "consumeResult": outcome,
                              "order": bool(consumer.orderly),
                              "spentTimeMills": int((time.monotonic() - begin) * 1000)}
    if remark is not None:
        answer["remark"] = remark
    return fastjson.dumps(answer)
