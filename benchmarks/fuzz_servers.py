"""Network fuzzer: malformed, truncated, oversized and valid-but-hostile requests at every
port of a running cluster while healthy clients send and consume; at the end, how many
frames went out, whether any server logged a traceback, whether any healthy request failed
or message was lost, and how each server's memory moved.

    python benchmarks/fuzz_servers.py                       # 1,000,000 frames, a table
    python benchmarks/fuzz_servers.py --frames 20000 --json # one JSON object

The cluster is a NameServer, an ASYNC_MASTER broker with a slave on its HA port, and a
controller node, each its own ``rocketq`` process on loopback, logging to a file. Several
fuzzing connections (asyncio, bounded in number) send:

- random bytes; valid frames cut short (then more bytes, or a close mid-frame);
- lengths that lie: huge, negative, shorter than the header length field, a header length
  past the frame, an unknown serialisation type; frames over the 16 MiB limit; bodies over
  the broker's message size;
- bad JSON headers (not JSON, not an object, fields of the wrong type) and bad ROCKETMQ
  binary headers (lengths past the end, bytes that are not UTF-8);
- unknown request codes; valid codes with hostile extFields and bodies (numbers past Java's
  int and long, negative queue ids, words where numbers go, 10,000-character and illegal
  names, unknown topics and groups);
- on the HA port, reports that are garbage, negative, past the master's end, or real ones
  that make the master stream its CommitLog;
- floods of connections (bounded in number), each closed at once or after a second.

Every request that is whole and well framed must be answered within 5 s (exempt: pulls,
which may be held, and END_TRANSACTION and NOTIFY_BROKER_ROLE_CHANGED, which RocketMQ
answers only in some cases), and every frame that can never be whole must make the server
close the connection.
Hostile names never name what the healthy clients use, so that everything the servers
rightly obey (deleting a topic, resetting offsets) leaves them alone: a healthy failure is
the servers' fault. Meanwhile a producer, a push consumer group and a pull consumer group
run on a thread of their own. Bounded: ``--frames`` frames, at most ``--seconds`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ha_bench import spawn, stop_all  # noqa: E402

from rocketq.cli.cluster import free_port  # noqa: E402
from rocketq.protocol import (  # noqa: E402
    FLAG_ONEWAY,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    RequestCode,
)
from rocketq.protocol.command import SERIALIZE_ROCKETMQ, encode  # noqa: E402

HEALTHY_TOPIC = "FuzzHealthy"
FUZZ_TOPIC = "FuzzTarget"
HEALTHY_GROUPS = ("healthy-producer", "healthy-push", "healthy-pull")
LONG = "x" * 10_000

# ---------------------------------------------------------------------------- hostile values

#: Names the hostile requests use: never the healthy clients' topic, groups, broker or
#: cluster, so that a request the servers rightly obey cannot hurt them.
TOPICS = [FUZZ_TOPIC, "FuzzT1", "FuzzT2", "FuzzT3", "NoSuchTopic", "TBW102",
          "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
          "%RETRY%fuzz-g1", "%DLQ%fuzz-g1", "", " ", "a b", "a\tb", LONG, "x" * 128,
          "x" * 127, "../../etc", "ü", "\u0000", "a,b", "%RETRY%", "rmq_sys_x", "a|b"]
GROUPS = ["fuzz-g1", "fuzz-g2", "fuzz-g3", "", " ", LONG, "a b", "%RETRY%x",
          "CID_RMQ_SYS_TRANS", "TOOLS_CONSUMER", "ü", "x" * 256]
BROKER_NAMES = ["fuzz-broker-1", "fuzz-broker-2", "", LONG, "a b", "ü"]
CLUSTERS = ["FuzzCluster", "", LONG, "ü"]
ADDRS = ["127.0.0.1:1", "", "x", "127.0.0.1:99999", "127.0.0.1:-1", "::::", LONG,
         "256.256.256.256:10911", "127.0.0.1"]
NUMBERS = ["0", "-1", "1", "2147483647", "2147483648", "-2147483648", "-2147483649",
           "9223372036854775807", "9223372036854775808", "-9223372036854775808",
           "-9223372036854775809", "99999999999999999999999999999", "1e9", "NaN", "inf",
           "0x10", " 1", "1 ", "1.5", "", "true", "null", "abc", "１２", "1_000", "+1",
           "-0", "007", LONG]
WORDS = ["", "true", "false", "null", "[]", "{}", "\u0000", "\x01\x02", "ü", LONG,
         "a=b;c=d", "${jndi:x}", "'; drop table", "\ud7ff"]
#: The SEND header's properties string: name \x01 value \x02, often broken.
PROPERTIES = ["", "DELAY\x01-1\x02", "DELAY\x012147483648\x02", "DELAY\x01abc\x02",
              "TIMER_DELIVER_MS\x01-5\x02", "TIMER_DELAY_SEC\x0199999999999999\x02",
              "TRAN_MSG\x01true\x02", "TRAN_MSG\x01true\x02PGROUP\x01fuzz-g1\x02",
              "UNIQ_KEY\x01\x02", "KEYS\x01" + LONG + "\x02", "\x01\x02\x01", "\x02\x02",
              "a\x01b", "RETRY_TOPIC\x01%RETRY%fuzz-g1\x02REAL_TOPIC\x01FuzzT1\x02",
              "MAX_OFFSET\x01abc\x02", "WAIT\x01x\x02", "__SHARDINGKEY\x01\x00\x02",
              "TAGS\x01" + LONG + "\x02", "MSG_REGION\x01ü\x02",
              "TIMER_DELIVER_MS\x0199999999999999999999\x02"]
SUBSCRIPTIONS = ["*", "", "a || b", "||", "a > ", "a > 1", "a = 'x' AND", "(((((", LONG,
                 "a IN ()", "a BETWEEN 1 AND", "TAGS is not null", "1/0 > 1", "a > 1e400",
                 "a = '" + "x" * 5000 + "'", "NOT NOT NOT a", "a IS NULL OR b"]


def hostile_value(rng: random.Random) -> str:
    """A value no request should carry: a bad number, a bad word, or a bad name."""
    pool = rng.choice((NUMBERS, NUMBERS, WORDS, TOPICS, GROUPS))
    return rng.choice(pool)


def num(rng: random.Random, low: int = -1, high: int = 8) -> str:
    """A plausible number, or now and then a hostile one."""
    return str(rng.randint(low, high)) if rng.random() < 0.6 else rng.choice(NUMBERS)


# ---------------------------------------------------------------------------- request templates


def _send(rng: random.Random) -> dict[str, str]:
    return {"a": rng.choice(GROUPS), "b": rng.choice(TOPICS), "c": rng.choice(["TBW102", ""]),
            "d": num(rng), "e": num(rng), "f": num(rng, 0, 255), "g": num(rng, 0, 1 << 42),
            "h": num(rng), "i": rng.choice(PROPERTIES), "j": num(rng), "k": "false",
            "l": num(rng), "m": rng.choice(["false", "true", "x"]), "n": rng.choice(BROKER_NAMES)}


def _send_v1(rng: random.Random) -> dict[str, str]:
    short = _send(rng)
    names = ["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
             "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
             "maxReconsumeTimes", "batch", "brokerName"]
    return dict(zip(names, short.values(), strict=True))


def _pull(rng: random.Random) -> dict[str, str]:
    return {"consumerGroup": rng.choice(GROUPS), "topic": rng.choice(TOPICS + [HEALTHY_TOPIC]),
            "queueId": num(rng), "queueOffset": num(rng, -1, 1000), "maxMsgNums": num(rng, 0, 64),
            # never the SUSPEND bit (0x2) unless hostile: a held pull is answered late
            "sysFlag": str(rng.choice([0, 1, 4, 5, 8, 16, 17, 21])),
            "commitOffset": num(rng), "suspendTimeoutMillis": num(rng, -1, 100),
            "subscription": rng.choice(SUBSCRIPTIONS),
            "subVersion": num(rng, 0, 1 << 42), "expressionType": rng.choice(
                ["TAG", "SQL92", "", "BOGUS"])}


def _names(rng: random.Random) -> dict[str, str]:
    return {"topic": rng.choice(TOPICS), "consumerGroup": rng.choice(GROUPS),
            "queueId": num(rng), "group": rng.choice(GROUPS), "groupName": rng.choice(GROUPS)}


def _offsets(rng: random.Random) -> dict[str, str]:
    return {**_names(rng), "commitOffset": num(rng, -1, 100), "offset": num(rng, -1, 100),
            "timestamp": num(rng, -1, 1 << 42), "boundaryType": rng.choice(["lower", "upper",
                                                                            "x"]),
            "setZeroIfNotFound": rng.choice(["true", "false", "x"])}


def _query(rng: random.Random) -> dict[str, str]:
    return {"topic": rng.choice(TOPICS + [HEALTHY_TOPIC]), "key": rng.choice(WORDS),
            "maxNum": num(rng, -1, 64), "beginTimestamp": num(rng, -1, 1 << 42),
            "endTimestamp": num(rng, -1, 1 << 42), "offset": num(rng, -1, 1 << 20),
            "msgId": rng.choice(["", "0" * 32, "7F00000100002A9F0000000000000000", LONG,
                                 "zz" * 16]), "uniqKey": rng.choice(WORDS)}


def _create_topic(rng: random.Random) -> dict[str, str]:
    return {"topic": rng.choice(TOPICS), "defaultTopic": "TBW102",
            "readQueueNums": num(rng, -1, 16), "writeQueueNums": num(rng, -1, 16),
            "perm": num(rng, 0, 7), "topicFilterType": rng.choice(["SINGLE_TAG", "x", ""]),
            "topicSysFlag": num(rng), "order": rng.choice(["false", "true", "x"])}


def _end_tx(rng: random.Random) -> dict[str, str]:
    return {"producerGroup": rng.choice(GROUPS), "tranStateTableOffset": num(rng, -1, 1 << 20),
            "commitLogOffset": num(rng, -1, 1 << 20),
            "commitOrRollback": rng.choice(["0", "4", "8", "12", "-1", "x"]),
            "fromTransactionCheck": rng.choice(["true", "false"]), "msgId": rng.choice(WORDS),
            "transactionId": rng.choice(WORDS)}


def _send_back(rng: random.Random) -> dict[str, str]:
    return {"offset": num(rng, -1, 1 << 20), "group": rng.choice(GROUPS),
            "delayLevel": num(rng, -1, 20), "originMsgId": rng.choice(WORDS),
            "originTopic": rng.choice(TOPICS), "unitMode": "false",
            "maxReconsumeTimes": num(rng, -1, 20)}


def _pop(rng: random.Random) -> dict[str, str]:
    """POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME: RocketMQ 5's header fields,
    with receipt handles (extraInfo) well formed, forged, short and garbage."""
    handle = " ".join(num(rng, -1, 100) for _ in range(3)) + f" 0 {rng.choice('0129x')} " \
        f"{rng.choice(BROKER_NAMES)} {num(rng, -1, 4)} {num(rng, -1, 100)}"
    return {"consumerGroup": rng.choice(GROUPS), "topic": rng.choice(TOPICS + [HEALTHY_TOPIC]),
            "queueId": num(rng, -1, 8), "maxMsgNums": num(rng, -1, 40),
            "invisibleTime": num(rng, -1, 1 << 36), "pollTime": num(rng, -1, 2000),
            "bornTime": num(rng, -1, 1 << 42), "initMode": num(rng, -1, 2),
            "expType": rng.choice(["TAG", "SQL92", "x", ""]),
            "exp": rng.choice(["*", "a || b", "a > ", LONG, ""]),
            "order": rng.choice(["true", "false", "x"]),
            "extraInfo": rng.choice([handle, "", LONG, "1 2 3", "a b c d e f g h"]),
            "offset": num(rng, -1, 100)}


def _broker_names(rng: random.Random) -> dict[str, str]:
    return {"brokerName": rng.choice(BROKER_NAMES), "brokerAddr": rng.choice(ADDRS),
            "clusterName": rng.choice(CLUSTERS), "brokerId": num(rng, -1, 3),
            "haServerAddr": rng.choice(ADDRS), "compressed": rng.choice(["false", "true"]),
            "bodyCrc32": num(rng), "topic": rng.choice(TOPICS), "cluster": rng.choice(CLUSTERS),
            "namespace": rng.choice(["fuzz-ns", "", LONG]), "key": rng.choice(["k1", "k2", ""]),
            "value": rng.choice(WORDS)}


def _controller(rng: random.Random) -> dict[str, str]:
    return {"clusterName": rng.choice(CLUSTERS), "brokerName": rng.choice(BROKER_NAMES),
            "brokerAddress": rng.choice(ADDRS), "brokerAddr": rng.choice(ADDRS),
            "brokerId": num(rng, -1, 3), "masterEpoch": num(rng, -1, 3),
            "masterBrokerId": num(rng, -1, 3), "syncStateSetEpoch": num(rng, -1, 3),
            "epoch": num(rng, -1, 3), "maxOffset": num(rng, -1, 1 << 30),
            "confirmOffset": num(rng, -1, 1 << 30), "electionPriority": num(rng),
            "heartbeatTimeoutMills": num(rng, -1, 10_000), "masterHaAddress": rng.choice(ADDRS),
            "masterAddress": rng.choice(ADDRS), "appliedBrokerId": num(rng, -1, 3),
            "registerCheckCode": rng.choice(WORDS), "invokeElectPolicy": "true"}


def _sink(rng: random.Random) -> dict[str, str]:
    return {"sink": rng.choice(GROUPS), "batch": num(rng, -1, 100), "topic": rng.choice(TOPICS),
            "producerGroup": rng.choice(GROUPS), "txn": rng.choice(WORDS)}


def _json_body(rng: random.Random, code: int) -> bytes:
    """A body of the shape the code expects, with hostile values in it (or garbage)."""
    r = rng.random()
    if r < 0.15:
        return rng.randbytes(rng.randint(0, 300))
    if r < 0.25:
        return rng.choice([b"[]", b"null", b"1", b'"x"', b"{", b"[" * 2000 + b"]" * 2000,
                           b'{"a":' * 600 + b"1" + b"}" * 600, b"\xff\xfe"])
    mq = {"topic": rng.choice(TOPICS), "brokerName": rng.choice(BROKER_NAMES),
          "queueId": rng.choice([-1, 0, 1 << 40, "x", None, 3])}
    if code == RequestCode.HEART_BEAT:
        sub = {"topic": rng.choice(TOPICS), "subString": rng.choice(SUBSCRIPTIONS),
               "expressionType": rng.choice(["TAG", "SQL92", "x", 5]),
               "tagsSet": rng.choice([[], ["a"] * 3, "x", [LONG]]),
               "codeSet": rng.choice([[], [1, "x"], None]), "subVersion": rng.choice(
                   [0, -1, "x", 1 << 70]), "classFilterMode": False}
        body: Any = {"clientID": rng.choice(["fuzz-client", "", LONG, 5]),
                     "consumerDataSet": [{"groupName": rng.choice(GROUPS),
                                          "consumeType": rng.choice(["CONSUME_PASSIVELY", "x",
                                                                     3]),
                                          "messageModel": rng.choice(["CLUSTERING", "x", None]),
                                          "consumeFromWhere": rng.choice(["x", 4]),
                                          "subscriptionDataSet": [sub] * rng.randint(0, 3),
                                          "unitMode": False}] * rng.randint(0, 2),
                     "producerDataSet": [{"groupName": rng.choice(GROUPS)}]}
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        body = {"consumerGroup": rng.choice(GROUPS), "clientId": rng.choice(WORDS),
                "mqSet": [mq] * rng.randint(0, 4)}
    elif code == RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
        body = {"groupName": rng.choice(GROUPS), "consumeEnable": rng.choice([True, "x"]),
                "retryQueueNums": rng.choice([-1, 0, 1, 1 << 40, "x"]),
                "retryMaxTimes": rng.choice([-1, 16, 1 << 40]),
                "brokerId": rng.choice([0, -1, "x"]),
                "whichBrokerWhenConsumeSlowly": rng.choice([1, -5])}
    elif code == RequestCode.REGISTER_BROKER:
        topic = rng.choice(TOPICS)
        body = {"topicConfigSerializeWrapper": {
            "topicConfigTable": {topic: {"topicName": topic, "readQueueNums": rng.choice(
                [-1, 4, 1 << 31, "x"]), "writeQueueNums": rng.choice([-1, 4, 1 << 40]),
                "perm": rng.choice([6, -1, "x"])}},
            "dataVersion": rng.choice([{"timestamp": "x", "counter": -1}, None, 5])},
            "filterServerList": rng.choice([[], None, "x", [1, 2]])}
    elif code == RequestCode.UPDATE_BROKER_CONFIG:
        return rng.choice([b"", b"fuzzUnknownKey=1\n", b"=\n=\n", b"\xff\xfe=\x00"])
    else:
        body = rng.choice([{"x": LONG}, [mq], {"topic": mq["topic"], "offsetTable": {
            "x": "y"}}, {"groupName": rng.choice(GROUPS)}])
    return json.dumps(body).encode()


BROKER_CODES: dict[int, Any] = {
    RequestCode.SEND_MESSAGE: _send_v1, RequestCode.SEND_MESSAGE_V2: _send,
    RequestCode.SEND_BATCH_MESSAGE: _send, RequestCode.SEND_REPLY_MESSAGE: _send_v1,
    RequestCode.SEND_REPLY_MESSAGE_V2: _send,
    RequestCode.PULL_MESSAGE: _pull, RequestCode.LITE_PULL_MESSAGE: _pull,
    RequestCode.QUERY_MESSAGE: _query, RequestCode.VIEW_MESSAGE_BY_ID: _query,
    RequestCode.QUERY_BROKER_OFFSET: _names, RequestCode.QUERY_CONSUMER_OFFSET: _offsets,
    RequestCode.UPDATE_CONSUMER_OFFSET: _offsets, RequestCode.UPDATE_AND_CREATE_TOPIC:
        _create_topic, RequestCode.GET_ALL_TOPIC_CONFIG: _names,
    RequestCode.UPDATE_BROKER_CONFIG: _names, RequestCode.GET_BROKER_CONFIG: _names,
    RequestCode.GET_BROKER_RUNTIME_INFO: _names,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _offsets, RequestCode.GET_MAX_OFFSET: _names,
    RequestCode.GET_MIN_OFFSET: _names, RequestCode.GET_EARLIEST_MSG_STORETIME: _names,
    RequestCode.HEART_BEAT: _names, RequestCode.UNREGISTER_CLIENT: _names,
    RequestCode.CONSUMER_SEND_MSG_BACK: _send_back, RequestCode.END_TRANSACTION: _end_tx,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _names, RequestCode.LOCK_BATCH_MQ: _names,
    RequestCode.UNLOCK_BATCH_MQ: _names, RequestCode.GET_ALL_CONSUMER_OFFSET: _names,
    RequestCode.GET_ALL_DELAY_OFFSET: _names, RequestCode.CHECK_CLIENT_CONFIG: _names,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _names,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _names,
    RequestCode.GET_TOPIC_STATS_INFO: _names, RequestCode.GET_CONSUMER_CONNECTION_LIST: _names,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: _names,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: _names, RequestCode.GET_CONSUME_STATS: _names,
    RequestCode.DELETE_TOPIC_IN_BROKER: _names,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: _offsets,
    RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: _names,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: _names,
    RequestCode.GET_CONSUMER_RUNNING_INFO: _names, RequestCode.CONSUME_MESSAGE_DIRECTLY:
        _query, RequestCode.QUERY_DATA_VERSION: _names, RequestCode.GET_TOPIC_CONFIG: _names,
    RequestCode.GET_BROKER_EPOCH_CACHE: _names, RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
        _controller, RequestCode.SINK_DECISION: _sink, RequestCode.SINK_COMMIT: _sink,
    RequestCode.SINK_ABORT: _sink, RequestCode.POP_MESSAGE: _pop,
    RequestCode.ACK_MESSAGE: _pop, RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _pop,
    RequestCode.BATCH_ACK_MESSAGE: _pop,
}
NAMESRV_CODES: dict[int, Any] = {code: _broker_names for code in (
    RequestCode.PUT_KV_CONFIG, RequestCode.GET_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
    RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.GET_KVLIST_BY_NAMESPACE, RequestCode.GET_TOPICS_BY_CLUSTER,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, RequestCode.QUERY_DATA_VERSION,
    RequestCode.BROKER_HEARTBEAT)}
CONTROLLER_CODES: dict[int, Any] = {code: _controller for code in (
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_GET_REPLICA_INFO,
    RequestCode.CONTROLLER_GET_METADATA_INFO, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, RequestCode.CONTROLLER_APPLY_BROKER_ID,
    RequestCode.BROKER_HEARTBEAT)}
JSON_BODY_CODES = {RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ,
                   RequestCode.UNLOCK_BATCH_MQ, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                   RequestCode.REGISTER_BROKER, RequestCode.UPDATE_BROKER_CONFIG,
                   RequestCode.CONTROLLER_GET_SYNC_STATE_DATA}
#: Codes not waited for: pulls may be held for a long poll, and RocketMQ answers
#: END_TRANSACTION and NOTIFY_BROKER_ROLE_CHANGED only in some cases (senders send them
#: oneway), as rocketq does.
HELD = {RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.END_TRANSACTION,
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED}


def hostile_request(rng: random.Random, codes: dict[int, Any]) -> RemotingCommand:
    """A well-framed request: a known code (now and then one of another server, or none
    known) with fields made for it and then spoiled (values, missing ones, extra ones)."""
    r = rng.random()
    if r < 0.04:
        code = rng.choice([-1, 0, 9, 999, 65535, 1 << 20, -32768, 2147483647])
    elif r < 0.1:
        code = rng.choice(list(BROKER_CODES) + list(NAMESRV_CODES) + list(CONTROLLER_CODES))
    else:
        code = rng.choice(list(codes))
    make = codes.get(code) or BROKER_CODES.get(code) or NAMESRV_CODES.get(code) or _names
    fields = make(rng)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        fields[rng.choice(list(fields))] = hostile_value(rng)
    if rng.random() < 0.15 and fields:
        del fields[rng.choice(list(fields))]
    if rng.random() < 0.1:
        fields[rng.choice(["zz", LONG[:300], "", "ü"])] = hostile_value(rng)
    body = b""
    if code in JSON_BODY_CODES or rng.random() < 0.1:
        body = _json_body(rng, code)
    elif code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                  RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE,
                  RequestCode.SEND_REPLY_MESSAGE_V2):
        body = rng.randbytes(rng.choice([0, 1, 16, 128, 1024]))
        if rng.random() < 0.0005:
            body = bytes(4_500_000)  # over maxMessageSize (4 MiB), under the 16 MiB frame
    cmd = RemotingCommand(code, body=body)
    cmd.ext_fields = fields
    if rng.random() < 0.3:
        cmd.serialize_type = SERIALIZE_ROCKETMQ
    cmd.flag = rng.choice([0, 0, 0, 0, 0, 0, FLAG_ONEWAY, 1, 4, 255])
    if rng.random() < 0.05:
        cmd.version = rng.choice([-1, 0, 32767, -32768])
    if rng.random() < 0.05:
        cmd.remark = hostile_value(rng)
    return cmd


# ---------------------------------------------------------------------------- malformed frames


def _frame(rng: random.Random, codes: dict[int, Any]) -> bytes:
    cmd = hostile_request(rng, codes)
    try:
        return encode(cmd)
    except (struct.error, UnicodeEncodeError):  # a binary header with a value out of range
        cmd.serialize_type = 0
        return encode(cmd)


def _raw(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) \
        + header + body


def _binary_header(rng: random.Random) -> bytes:
    fixed = struct.pack(">hbhii", RequestCode.GET_BROKER_RUNTIME_INFO, 3, 479, 1, 0)
    choice = rng.randrange(6)
    if choice == 0:
        return fixed + struct.pack(">i", 1 << 20) + b"x"  # remark past the end
    if choice == 1:
        return fixed + struct.pack(">i", -5)
    if choice == 2:
        return fixed + struct.pack(">ii", 0, 100) + b"\x00\x05ab"  # fields past the end
    if choice == 3:
        return fixed + struct.pack(">ii", 0, 8) + b"\x00\x02\xff\xfe" + b"\x00\x00\x00\x00"
    if choice == 4:
        return fixed[:5]
    return fixed + struct.pack(">ii", 0, 9) + b"\x00\x01k" + struct.pack(">i", -1) + b"\x00"


def malformed(rng: random.Random, codes: dict[int, Any]) -> tuple[str, bytes, bool]:
    """One frame (or bytes) that is not a valid request. The flag says whether the server
    must close the connection (a frame it can never complete it may instead wait on)."""
    kind = rng.randrange(14)
    valid = _frame(rng, codes)
    if kind == 0:
        return "random_bytes", rng.randbytes(rng.randint(1, 2048)), False
    if kind == 1:
        return "truncated", valid[:rng.randint(1, len(valid) - 1)], False
    if kind == 2:
        return "length_huge", struct.pack(">i", rng.choice([1 << 30, 0x7FFFFFFF,
                                                            (16 << 20) + 1])) + valid[4:], True
    if kind == 3:
        return "length_negative", struct.pack(">i", rng.choice([-1, -(1 << 31), -4])) \
            + valid[4:], True
    if kind == 4:
        return "length_short", struct.pack(">i", rng.choice([0, 1, 2, 3])) + valid[4:], True
    if kind == 5:
        body = len(valid) - 8
        return "header_past_frame", struct.pack(">ii", len(valid) - 4, body + 50) + valid[8:], \
            True
    if kind == 6:
        return "serialize_type", struct.pack(">iI", len(valid) - 4, (rng.randint(2, 255) << 24)
                                             | struct.unpack(">i", valid[4:8])[0] & 0xFFFFFF) \
            + valid[8:], True
    if kind == 7:
        bad = rng.choice([b"{", b"[1,2]", b"null", b'"x"', b"\xff\xfe", b"{}x",
                          b'{"code": "10"}', b'{"code": 10, "extFields": [1]}',
                          b'{"code": 1e400}', b'{"code": 10, "opaque": 1.5}',
                          b'{"code": 99999999999999999999999}', b'{"code": 10, "flag": null}',
                          b'{"code": 10, "extFields": {"a": {"b": 1}}}',
                          b'{"code": 28, "extFields": {"a": [' + b"1," * 1000 + b'1]}}',
                          b'{"code": 28, "language": {"x": 1}, "remark": 5}',
                          b"[" * 5000 + b"]" * 5000])
        # Some of these are JSON the server can read: it answers them; only the framing
        # matters here, so they count as malformed that need not close.
        return "bad_json_header", _raw(bad), bad[:1] not in b"{" or bad in (
            b"{", b"{}x")
    if kind == 8:
        return "bad_binary_header", _raw(_binary_header(rng), kind=1), True
    if kind == 9:
        return "oversized_frame", struct.pack(">ii", 17 << 20, 200) + rng.randbytes(4096), True
    if kind == 10:
        return "cut_then_close", valid[:max(1, len(valid) // 2)], False
    if kind == 11:
        return "empty_header", _raw(b""), True
    if kind == 12:
        return "zero_frame", struct.pack(">i", 0), True
    return "garbage_after_valid", valid + rng.randbytes(rng.randint(1, 64)), False


# ---------------------------------------------------------------------------- the fuzzing side


@dataclass
class Target:
    name: str
    host: str
    port: int
    kind: str  # "remoting" or "ha"
    codes: dict[int, Any] = field(default_factory=dict)
    server: str = ""  # which process serves it


@dataclass
class Tally:
    frames: int = 0
    valid: int = 0
    malformed: int = 0
    ha: int = 0
    answered: int = 0
    connections: int = 0
    connect_failed: int = 0
    unanswered: Counter = field(default_factory=Counter)
    not_closed: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    bad_answers: int = 0
    floods: int = 0


class Peer(asyncio.Protocol):
    """A fuzzing connection: decodes whatever the server answers and matches opaques."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(64 << 20)
        #: opaque -> request code of the requests not answered yet
        self.waiting: dict[int, int] = {}
        self.answered = 0
        self.bad = 0
        self.raw = 0
        self.closed = asyncio.get_running_loop().create_future()
        self.all_answered = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.raw += len(data)
        if self.decoder is None:
            return
        try:
            commands = self.decoder.feed(data)
        except ProtocolError:
            self.bad += 1
            self.decoder = None  # type: ignore[assignment]
            return
        for cmd in commands:
            if self.waiting.pop(cmd.opaque, None) is not None:
                self.answered += 1
        if not self.waiting:
            self.all_answered.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        self.all_answered.set()


async def _connect(target: Target, tally: Tally) -> Peer | None:
    loop = asyncio.get_running_loop()
    tally.connections += 1
    try:
        async with asyncio.timeout(5):
            _, peer = await loop.create_connection(Peer, target.host, target.port)
    except (OSError, TimeoutError):
        tally.connect_failed += 1
        return None
    return peer


def _close(peer: Peer, rng: random.Random) -> None:
    if peer.transport is None:
        return
    if rng.random() < 0.5:
        # RST instead of FIN: no TIME_WAIT left on this side, and the server sees a reset.
        sock = peer.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        peer.transport.abort()
    else:
        peer.transport.close()


async def remoting_session(target: Target, rng: random.Random, tally: Tally, budget: int,
                           answer_timeout: float, malformed_share: float) -> None:
    """One connection: a burst of ``budget`` hostile but well-framed requests, every answer
    waited for; then (with chance ``malformed_share``) one malformed frame, after which
    the server must close the connection if the frame can never be whole."""
    peer = await _connect(target, tally)
    if peer is None:
        await asyncio.sleep(0.2)
        return
    assert peer.transport is not None
    try:
        frames = []
        for _ in range(budget):
            cmd = hostile_request(rng, target.codes)
            try:
                data = encode(cmd)
            except (struct.error, UnicodeEncodeError, OverflowError):
                cmd.serialize_type = 0
                data = encode(cmd)
            if not (cmd.flag & (FLAG_ONEWAY | 1)) and cmd.code not in HELD:
                peer.waiting[cmd.opaque] = cmd.code
            frames.append(data)
        expected = bool(peer.waiting)
        peer.transport.writelines(frames)
        tally.frames += len(frames)
        tally.valid += len(frames)
        if expected:
            try:
                async with asyncio.timeout(answer_timeout):
                    await peer.all_answered.wait()
            except TimeoutError:
                pass
            tally.answered += peer.answered
            if peer.waiting:
                closed = " (closed)" if peer.closed.done() else ""
                for code in peer.waiting.values():
                    tally.unanswered[f"{target.name} {code}{closed}"] += 1
        tally.bad_answers += peer.bad
        if peer.closed.done() or rng.random() >= malformed_share:
            return
        name, data, must_close = malformed(rng, target.codes)
        tally.kinds[name] += 1
        tally.frames += 1
        tally.malformed += 1
        if name == "oversized_frame" or len(data) > 65536:
            for i in range(0, len(data), 65536):
                peer.transport.write(data[i:i + 65536])
        else:
            peer.transport.write(data)
        if must_close:
            try:
                async with asyncio.timeout(answer_timeout):
                    await asyncio.shield(peer.closed)
            except TimeoutError:
                tally.not_closed[name] += 1
        else:
            await asyncio.sleep(rng.choice([0, 0, 0.01, 0.05]))
    finally:
        _close(peer, rng)


async def ha_session(target: Target, rng: random.Random, tally: Tally) -> None:
    """One connection to the HA port: garbage, a hello, reports good and bad."""
    peer = await _connect(target, tally)
    if peer is None:
        await asyncio.sleep(0.2)
        return
    peer.decoder = None  # type: ignore[assignment]  # the HA stream is not framed
    assert peer.transport is not None
    try:
        kind = rng.randrange(7)
        tally.kinds[f"ha_{kind}"] += 1
        q = struct.Struct(">q")
        if kind == 0:
            data = rng.randbytes(rng.randint(1, 256))
        elif kind == 1:
            data = q.pack(rng.choice([-5, -(1 << 63), -2]))
        elif kind == 2:
            data = q.pack(-1) + q.pack(rng.choice([-1, 1 << 62, 7])) + q.pack(-7)
        elif kind == 3:
            data = q.pack(1 << 60)  # past the master's end
        elif kind == 4:
            data = q.pack(0) + b"".join(q.pack(rng.randint(0, 4096)) for _ in range(20))
        elif kind == 5:
            data = b"\x00" * rng.randint(1, 7)  # a report never finished
        else:
            data = q.pack(-1) + q.pack(2) + q.pack(0)
        peer.transport.write(data)
        tally.frames += 1
        tally.ha += 1
        await asyncio.sleep(rng.choice([0, 0.01, 0.1, 0.3]))
    finally:
        _close(peer, rng)


async def flood(target: Target, rng: random.Random, tally: Tally, count: int) -> None:
    """``count`` connections at once, held a moment, half of them sending a little."""
    tally.floods += 1
    peers = await asyncio.gather(*(_connect(target, tally) for _ in range(count)))
    for p in peers:
        if p is not None and p.transport is not None and rng.random() < 0.5:
            p.transport.write(rng.randbytes(rng.randint(1, 16)))
    await asyncio.sleep(rng.choice([0, 1.0]))
    for p in peers:
        if p is not None:
            _close(p, rng)


async def fuzz(targets: list[Target], frames: int, seconds: float, workers: int, seed: int,
               tally: Tally, warm: threading.Event, on_warm: Any) -> None:
    """Run ``workers`` fuzzing connections until ``frames`` frames went out or ``seconds``
    passed; call ``on_warm`` once a tenth of either is done."""
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    remoting = [t for t in targets if t.kind == "remoting"]
    ha = [t for t in targets if t.kind == "ha"]

    def done() -> bool:
        return tally.frames >= frames or time.monotonic() >= deadline

    def check_warm() -> None:
        if not warm.is_set() and (tally.frames >= frames / 10
                                  or time.monotonic() - started >= seconds / 10):
            warm.set()
            on_warm()

    async def worker(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        for _ in range(10_000_000):
            if done():
                return
            check_warm()
            r = rng.random()
            if ha and r < 0.1:
                await ha_session(rng.choice(ha), rng, tally)
            elif r < 0.4:  # a malformed frame, after a request or none
                await remoting_session(rng.choice(remoting), rng, tally, rng.randint(0, 1),
                                       5.0, 1.0)
            else:
                burst = min(rng.choice([1, 10, 50, 200, 400]), max(1, frames - tally.frames))
                await remoting_session(rng.choice(remoting), rng, tally, burst, 5.0, 0.3)

    async def flooder() -> None:
        rng = random.Random(seed)
        for _ in range(20):  # at most 20 floods
            await asyncio.sleep(min(10.0, max(1.0, seconds / 40)))
            if done():
                return
            await flood(rng.choice(remoting + ha), rng, tally, rng.randint(20, 200))

    await asyncio.gather(flooder(), *(worker(n) for n in range(workers)))


# ---------------------------------------------------------------------------- healthy clients


class Healthy:
    """A producer, a push consumer group and a pull consumer group on their own thread's
    event loop; every failed send and every acknowledged message a group never got count."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.sent = 0
        self.failed = 0
        self.failures: Counter = Counter()
        self.acked: set[bytes] = set()
        self.got: dict[str, set[bytes]] = {"push": set(), "pull": set()}
        self.probes = 0
        self.probe_failed = 0
        self._stop = threading.Event()
        self._done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(drain + 60)

    def _run(self) -> None:
        from rocketq.remoting import run

        try:
            run(self._main())
        except BaseException as exc:  # reported, not raised on a thread nobody joins
            self.error = exc

    async def _main(self) -> None:
        from rocketq.aio import Message, Producer, PullConsumer, PushConsumer, SendStatus

        async def on_push(messages: list[Any]) -> None:
            for m in messages:
                self.got["push"].add(m.body)

        push = PushConsumer("healthy-push", namesrv=self.namesrv, from_where="first")
        push.subscribe(self.topic)
        push.register(on_push)
        pull = PullConsumer("healthy-pull", namesrv=self.namesrv, from_where="first")
        pull.subscribe(self.topic)
        await push.start()
        await pull.start()
        stopped = asyncio.Event()

        async def poll() -> None:
            for _ in range(100_000_000):
                if stopped.is_set():
                    return
                for m in await pull.poll(0.5):
                    self.got["pull"].add(m.body)

        poller = asyncio.get_running_loop().create_task(poll())
        async with Producer("healthy-producer", namesrv=self.namesrv) as producer:
            async def sender(k: int) -> None:
                for i in range(100_000_000):
                    if self._stop.is_set():
                        return
                    body = b"healthy-%d-%d" % (k, i)
                    self.sent += 1
                    try:
                        r = await producer.send(Message(self.topic, body))
                    except Exception as exc:
                        self.failed += 1
                        self.failures[type(exc).__name__ + ": " + str(exc)[:120]] += 1
                        await asyncio.sleep(0.05)
                        continue
                    if r.status is SendStatus.SEND_OK:
                        self.acked.add(body)
                    else:
                        self.failed += 1
                        self.failures[r.status.name] += 1
                    await asyncio.sleep(0.01)

            await asyncio.gather(*(sender(k) for k in range(2)))
        # Nothing more is sent: wait until both groups have every acknowledged message.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(self.acked - got for got in
                                                  self.got.values()):
            await asyncio.sleep(0.2)
        stopped.set()
        await poller
        await push.shutdown()
        await pull.shutdown()

    def lost(self) -> dict[str, int]:
        return {group: len(self.acked - got) for group, got in self.got.items()}


# ---------------------------------------------------------------------------- servers


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MiB (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Cluster:
    """The processes under fuzz: NameServer, master, slave (over the HA port), controller."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[str]] = {}
        ns_port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.ports = {"namesrv": ns_port, "master": free_port(), "slave": free_port(),
                      "ha": free_port(), "controller": free_port(pair=True)}

    def start(self) -> None:
        d = self.directory
        self.procs["namesrv"] = spawn(["namesrv", "--port", str(self.ports["namesrv"])], d,
                                      "namesrv")
        for broker_id, name in enumerate(("master", "slave")):
            conf = os.path.join(d, f"{name}.conf")
            with open(conf, "w") as fh:
                fh.write(f"brokerName=broker-a\nbrokerId={broker_id}\n"
                         f"namesrvAddr={self.namesrv}\nlistenPort={self.ports[name]}\n"
                         f"storePathRootDir={os.path.join(d, name)}\n"
                         "flushDiskType=ASYNC_FLUSH\nautoCreateTopicEnable=false\n"
                         "mappedFileSizeCommitLog=67108864\nmaxHashSlotNum=100000\n"
                         "maxIndexNum=400000\n")
                if broker_id == 0:
                    fh.write(f"brokerRole=ASYNC_MASTER\nhaListenPort={self.ports['ha']}\n")
                else:
                    fh.write("brokerRole=SLAVE\nhaListenPort=0\n"
                             f"haMasterAddress=127.0.0.1:{self.ports['ha']}\n")
            self.procs[name] = spawn(["broker", "-c", conf], d, name)
        self.procs["controller"] = spawn(["controller", "--port", str(self.ports["controller"])],
                                         d, "controller")

    def targets(self) -> list[Target]:
        p = self.ports
        return [Target("namesrv", "127.0.0.1", p["namesrv"], "remoting", NAMESRV_CODES,
                       "namesrv"),
                Target("master", "127.0.0.1", p["master"], "remoting", BROKER_CODES, "master"),
                Target("slave", "127.0.0.1", p["slave"], "remoting", BROKER_CODES, "slave"),
                Target("master-ha", "127.0.0.1", p["ha"], "ha", {}, "master"),
                Target("controller", "127.0.0.1", p["controller"], "remoting",
                       CONTROLLER_CODES, "controller")]

    def rss(self) -> dict[str, float]:
        return {name: round(rss_mb(proc.pid), 1) for name, proc in self.procs.items()}

    def alive(self) -> dict[str, bool]:
        return {name: proc.poll() is None for name, proc in self.procs.items()}

    def stop(self) -> None:
        stop_all(list(self.procs.values()))

    def logs(self) -> dict[str, dict[str, Any]]:
        """Per server log: tracebacks, ERROR lines and the first few distinct ERROR
        messages (timestamps and ports taken out)."""
        out: dict[str, dict[str, Any]] = {}
        for name in self.procs:
            path = os.path.join(self.directory, f"{name}.log")
            tracebacks = errors = 0
            kinds: Counter = Counter()
            with open(path, errors="replace") as fh:
                for line in fh:
                    if line.startswith("Traceback"):
                        tracebacks += 1
                    if " ERROR " in line or " CRITICAL " in line:
                        errors += 1
                        text = line.split(": ", 1)[-1].strip()
                        kinds[re.sub(r"\d+", "N", text)[:160]] += 1
            out[name] = {"tracebacks": tracebacks, "errors": errors,
                         "error_kinds": dict(kinds.most_common(8))}
        return out


async def create_topics(master: str, namesrv: str) -> None:
    from rocketq.client.instance import ClientInstance

    instance = ClientInstance(namesrv)
    try:
        for topic in (HEALTHY_TOPIC, FUZZ_TOPIC):
            r = await instance.remoting.invoke(master, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": 4,
                                                      "writeQueueNums": 4, "perm": 6}))
            assert r.code == 0, r.remark
        for _ in range(200):
            if await instance.fetch_route(HEALTHY_TOPIC):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError("the healthy topic never got a route")
    finally:
        await instance.remoting.close()


def run_fuzz(frames: int, seconds: float, workers: int, seed: int, quiet: bool,
             keep: bool = False) -> dict[str, Any]:
    from rocketq.remoting import run

    directory = tempfile.mkdtemp(prefix="rocketq-fuzz-")
    cluster = Cluster(directory)
    healthy: Healthy | None = None
    try:
        cluster.start()
        run(create_topics(f"127.0.0.1:{cluster.ports['master']}", cluster.namesrv))
        healthy = Healthy(cluster.namesrv, HEALTHY_TOPIC)
        healthy.start()
        time.sleep(3)  # the healthy clients are up and flowing
        rss_start = cluster.rss()
        rss_warm: dict[str, float] = {}
        tally = Tally()
        warm = threading.Event()

        def on_warm() -> None:
            rss_warm.update(cluster.rss())
            if not quiet:
                print(f"warmed up after {tally.frames} frames: RSS {rss_warm}", file=sys.stderr,
                      flush=True)

        began = time.monotonic()
        stop_progress = threading.Event()

        def progress() -> None:
            while not stop_progress.wait(10):
                rate = tally.frames / max(1e-9, time.monotonic() - began)
                print(f"{tally.frames} frames ({rate:.0f}/s), healthy sent {healthy.sent} "
                      f"failed {healthy.failed}, unanswered {sum(tally.unanswered.values())}",
                      file=sys.stderr, flush=True)

        if not quiet:
            threading.Thread(target=progress, daemon=True).start()
        try:
            run(fuzz(cluster.targets(), frames, seconds, workers, seed, tally, warm, on_warm))
        finally:
            stop_progress.set()
        elapsed = time.monotonic() - began
        if not rss_warm:
            rss_warm = cluster.rss()
        time.sleep(2)  # let the servers settle (held pulls, floods closing)
        healthy.stop()
        alive = cluster.alive()
        rss_end = cluster.rss()
    except BaseException:
        cluster.stop()
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    finally:
        if healthy is not None:
            healthy._stop.set()
        cluster.stop()
    logs = cluster.logs()
    if keep:
        print(f"logs kept in {directory}", file=sys.stderr)
    else:
        shutil.rmtree(directory, ignore_errors=True)
    growth = {n: round((rss_end[n] - rss_warm[n]) / rss_warm[n] * 100, 1)
              for n in rss_end if rss_warm.get(n)}
    lost = healthy.lost()
    return {
        "frames_sent": tally.frames, "frames_valid": tally.valid,
        "frames_malformed": tally.malformed, "frames_ha": tally.ha,
        "frames_per_s": round(tally.frames / elapsed, 1), "seconds": round(elapsed, 1),
        "connections": tally.connections, "connect_failed": tally.connect_failed,
        "floods": tally.floods,
        "answered": tally.answered, "unanswered": sum(tally.unanswered.values()),
        "unanswered_by_target": dict(tally.unanswered),
        "not_closed": sum(tally.not_closed.values()),
        "not_closed_by_kind": dict(tally.not_closed), "bad_answers": tally.bad_answers,
        "tracebacks": sum(v["tracebacks"] for v in logs.values()),
        "error_lines": sum(v["errors"] for v in logs.values()),
        "logs": logs, "servers_alive": alive,
        "healthy_sent": healthy.sent, "healthy_acked": len(healthy.acked),
        "healthy_failed": healthy.failed, "healthy_failures": dict(healthy.failures),
        "healthy_lost": sum(lost.values()), "healthy_lost_by_group": lost,
        "healthy_error": repr(healthy.error) if healthy.error else None,
        "rss_mb_start": rss_start, "rss_mb_after_warmup": rss_warm, "rss_mb_end": rss_end,
        "rss_growth_pct_by_server": growth,
        "rss_growth_pct": max(growth.values()) if growth else 0.0,
        "seed": seed,
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"fuzz, seed {r['seed']}: {r['frames_sent']:,} frames in {r['seconds']} s "
          f"({r['frames_per_s']:,.0f}/s): {r['frames_valid']:,} well framed, "
          f"{r['frames_malformed']:,} malformed, {r['frames_ha']:,} on the HA port; "
          f"{r['connections']:,} connections, {r['floods']} floods")
    print(f"answered {r['answered']:,}, unanswered {r['unanswered']}, malformed frames not "
          f"closed {r['not_closed']}, malformed answers {r['bad_answers']}")
    print(f"healthy: sent {r['healthy_sent']:,}, failed {r['healthy_failed']}, lost "
          f"{r['healthy_lost']}")
    print(f"{'server':<12}{'alive':>7}{'tracebacks':>12}{'errors':>8}{'RSS start':>11}"
          f"{'warm':>8}{'end':>8}{'growth':>9}")
    for name, log in r["logs"].items():
        print(f"{name:<12}{str(r['servers_alive'][name]):>7}{log['tracebacks']:>12}"
              f"{log['errors']:>8}{r['rss_mb_start'][name]:>11.1f}"
              f"{r['rss_mb_after_warmup'][name]:>8.1f}{r['rss_mb_end'][name]:>8.1f}"
              f"{r['rss_growth_pct_by_server'].get(name, 0.0):>8.1f}%")
        for kind, n in log["error_kinds"].items():
            print(f"    {n:>6} x {kind}")
    if r["unanswered_by_target"]:
        print("unanswered (target, code):", r["unanswered_by_target"])
    if r["healthy_failures"]:
        print("healthy failures:", r["healthy_failures"])


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000,
                        help="frames to send (default 1,000,000)")
    parser.add_argument("--seconds", type=float, default=3600.0,
                        help="stop after this long whatever was sent (default 3600)")
    parser.add_argument("--workers", type=int, default=8, help="fuzzing connections at once")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the servers' logs and stores (their directory is printed)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # stop the servers started, as Ctrl-C does
    seed = args.seed if args.seed is not None else int(time.time())
    result = run_fuzz(args.frames, args.seconds, args.workers, seed, quiet=args.json,
                      keep=args.keep_logs)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    clean = (result["tracebacks"] == 0 and result["healthy_failed"] == 0
             and result["healthy_lost"] == 0 and all(result["servers_alive"].values()))
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
