"""The fuzzer's well-framed requests: hostile values, a template of fields for every request
code each server serves, and ``hostile_request``, which fills a template and then spoils it.
Used by ``fuzz_servers.py``."""

from __future__ import annotations

import json
import random
from typing import Any

from rocketq.protocol import FLAG_ONEWAY, RemotingCommand, RequestCode
from rocketq.protocol.command import SERIALIZE_ROCKETMQ

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
    RequestCode.SINK_ABORT: _sink, RequestCode.SINK_PREPARE: _sink, RequestCode.POP_MESSAGE: _pop,
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
