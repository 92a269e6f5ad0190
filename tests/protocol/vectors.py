"""Frames real RocketMQ clients sent to a NameServer or a broker, as the bytes on the wire.

Each vector is a whole frame: ``[length i32][serialize type << 24 | header length i32]
[header][body]``, captured with tcpdump on loopback (client to server only).

- ``CPP_*``: the C++ client of the PyPI wheel ``rocketmq`` 0.4.4 (language CPP, protocol
  version 63). Its JSON header has sorted keys, ``"remark":""``, a trailing newline, and some
  extFields as bare JSON numbers. The capture files named in the comments (``frames.jsonl``,
  ``frames2.jsonl``, ``frames3.jsonl``) hold producer sends, a push consumer, a transactional
  producer, a pull consumer and a consumer that fails a message.
- ``JAVA_*``: the Apache RocketMQ 4.9.8 Java client and its mqadmin tool (language JAVA,
  version 409). No trailing newline; ``extFields`` is left out when there are none.

The C++ send frames and all the Java frames are already kept as literals in
``tests/compat/cpp_frames.py`` and ``tests/compat/java498_frames.py``; they are imported from
there rather than copied.
"""

from __future__ import annotations

from ..compat.cpp_frames import FRAMES as _CPP_SENDS
from ..compat.java498_frames import frames as _java_frames


def _cpp_send(step: str) -> bytes:
    (frame,) = (f for f in _CPP_SENDS if f.step == step)
    return frame.encode()


def _java(scenario: str, code: int, step: str | None = None) -> bytes:
    """The first frame of ``scenario`` with ``code`` (sent during ``step`` if given)."""
    return next(f for f in _java_frames(scenario, code)
                if step is None or f.step == step).encode()


# ---------------------------------------------------------------------------- C++ client

# GET_ROUTEINFO_BY_TOPIC (105) to the NameServer for TopicTest (frames.jsonl line 1).
CPP_ROUTE_QUERY = (
    b'\x00\x00\x00\xc1\x00\x00\x00\xbd'
    b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=","topic":"TopicTest"},"flag":0,'
    b'"language":"CPP","opaque":0,"remark":"","version":63}\n'
)

# HEART_BEAT (34) of a push consumer (CG_TEST, subscription "TagA || TagB") and a producer
# (PG_TEST); the JSON body ends with a newline (frames.jsonl line 8).
CPP_HEARTBEAT_CONSUMER = (
    b'\x00\x00\x02\x39\x00\x00\x00\xa8'
    b'{"code":34,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"molmIvUxT1rmLXWrnpqTVv2Uqi4="},"flag":0,"language":"CPP","opaque":7,'
    b'"remark":"","version":63}\n'
    b'{"clientID":"17447-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,'
    b'"consumeType":1,"groupName":"CG_TEST","messageModel":1,"subscriptionDataSet":[{'
    b'"subString":"*","subVersion":"1795358563649","topic":"%RETRY%CG_TEST"},{'
    b'"codeSet":[0,0],"subString":"TagA || TagB","subVersion":"1795358563648",'
    b'"tagsSet":["TagA","TagB"],"topic":"TopicTest"}]}],"producerDataSet":[{'
    b'"groupName":"PG_TEST"}]}\n'
)

# GET_CONSUMER_LIST_BY_GROUP (38) for CG_TEST (frames.jsonl line 9).
CPP_CONSUMER_LIST = (
    b'\x00\x00\x00\xc6\x00\x00\x00\xc2'
    b'{"code":38,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"kFkfecoDJxI2CS1WefYEb/Ypr2s=","consumerGroup":"CG_TEST"},"flag":0,'
    b'"language":"CPP","opaque":8,"remark":"","version":63}\n'
)

# QUERY_CONSUMER_OFFSET (14) for queue 0 of %RETRY%CG_TEST; queueId is a bare JSON number
# (frames.jsonl line 10).
CPP_QUERY_OFFSET = (
    b'\x00\x00\x00\xeb\x00\x00\x00\xe7'
    b'{"code":14,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"p+ZK6li74Pz/jJS2MD93yX63dLY=","consumerGroup":"CG_TEST","queueId":0,'
    b'"topic":"%RETRY%CG_TEST"},"flag":0,"language":"CPP","opaque":9,"remark":"",'
    b'"version":63}\n'
)

# PULL_MESSAGE (11), first long-poll pull of TopicTest queue 0 with "TagA || TagB" (sysFlag 6:
# suspend + subscription) (frames.jsonl line 36).
CPP_PULL_FIRST = (
    b'\x00\x00\x01\x82\x00\x00\x01\x7e'
    b'{"code":11,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"N3tjTeXQbZR+CNE8NG1KEyYbP40=","commitOffset":"0",'
    b'"consumerGroup":"CG_TEST","maxMsgNums":32,"queueId":0,"queueOffset":"0",'
    b'"subVersion":"1795358563648","subscription":"TagA || TagB",'
    b'"suspendTimeoutMillis":"15000","sysFlag":6,"topic":"TopicTest"},"flag":0,'
    b'"language":"CPP","opaque":35,"remark":"","version":63}\n'
)

# PULL_MESSAGE (11) carrying a commit offset (sysFlag 7: commit + suspend + subscription)
# (frames.jsonl line 44).
CPP_PULL_COMMIT = (
    b'\x00\x00\x01\x82\x00\x00\x01\x7e'
    b'{"code":11,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"n9DdF4ohS0fuo802aCsUVgQG1cg=","commitOffset":"1",'
    b'"consumerGroup":"CG_TEST","maxMsgNums":32,"queueId":2,"queueOffset":"1",'
    b'"subVersion":"1795358563648","subscription":"TagA || TagB",'
    b'"suspendTimeoutMillis":"15000","sysFlag":7,"topic":"TopicTest"},"flag":0,'
    b'"language":"CPP","opaque":43,"remark":"","version":63}\n'
)

# HEART_BEAT (34) of a transactional producer alone (PG_TX) (frames2.jsonl line 6).
CPP_HEARTBEAT_PRODUCER = (
    b'\x00\x00\x00\xfd\x00\x00\x00\xa8'
    b'{"code":34,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"vD8KXKyb2q2hH5b8WBvd5ufcLm0="},"flag":0,"language":"CPP","opaque":5,'
    b'"remark":"","version":63}\n'
    b'{"clientID":"22876-127.0.0.1@DEFAULT","producerDataSet":[{'
    b'"groupName":"PG_TX"}]}\n'
)

# END_TRANSACTION (37) with commitOrRollback 0 (UNKNOW) for the second half message (frames2.jsonl
# line 5).
CPP_END_TRANSACTION_UNKNOWN = (
    b'\x00\x00\x01\x67\x00\x00\x01\x63'
    b'{"code":37,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"EYMqq9kBKXnsPdudBzG8xFMF1EM=","commitLogOffset":"193",'
    b'"commitOrRollback":"0","fromTransactionCheck":"0",'
    b'"msgId":"0100007F0000063B0000E24EAE740200","producerGroup":"PG_TX",'
    b'"tranStateTableOffset":"0","transactionId":""},"flag":0,"language":"CPP",'
    b'"opaque":4,"remark":"","version":63}\n'
)

# END_TRANSACTION (37) answering CHECK_TRANSACTION_STATE with COMMIT (fromTransactionCheck 1)
# (frames2.jsonl line 9).
CPP_END_TRANSACTION_CHECKED = (
    b'\x00\x00\x01\x85\x00\x00\x01\x81'
    b'{"code":37,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"YHPjGaipaaYJT76+7kTRB4ze35k=","commitLogOffset":"0",'
    b'"commitOrRollback":"8","fromTransactionCheck":"1",'
    b'"msgId":"0100007F0000063B0000E14EAE740100","producerGroup":"PG_TX",'
    b'"tranStateTableOffset":"0","transactionId":"0100007F0000063B0000E14EAE740100"},'
    b'"flag":0,"language":"CPP","opaque":6,"remark":"","version":63}\n'
)

# GET_MAX_OFFSET (30) of TopicFail queue 0, from a pull consumer (frames2.jsonl line 30).
CPP_MAX_OFFSET = (
    b'\x00\x00\x00\xcd\x00\x00\x00\xc9'
    b'{"code":30,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"dZVuz+1JbRkUBZE3MKqGOZo0VqQ=","queueId":0,"topic":"TopicFail"},'
    b'"flag":0,"language":"CPP","opaque":27,"remark":"","version":63}\n'
)

# UPDATE_CONSUMER_OFFSET (15): CG_FAIL, TopicFail queue 0, offset 1 (frames2.jsonl line 57).
CPP_UPDATE_OFFSET = (
    b'\x00\x00\x00\xfa\x00\x00\x00\xf6'
    b'{"code":15,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"dZudawnL9hdLPsMg9Z6kxp/QpfY=","commitOffset":"1",'
    b'"consumerGroup":"CG_FAIL","queueId":0,"topic":"TopicFail"},"flag":0,'
    b'"language":"CPP","opaque":54,"remark":"","version":63}\n'
)

# UNREGISTER_CLIENT (35) of consumer group CG_FAIL (empty producerGroup) (frames2.jsonl line 67).
CPP_UNREGISTER_CONSUMER = (
    b'\x00\x00\x00\xff\x00\x00\x00\xfb'
    b'{"code":35,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"rtli5k7tcyM4mt8BsMzYA4dkWmE=","clientID":"22876-127.0.0.1@DEFAULT",'
    b'"consumerGroup":"CG_FAIL","producerGroup":""},"flag":0,"language":"CPP",'
    b'"opaque":64,"remark":"","version":63}\n'
)

# UNREGISTER_CLIENT (35) of producer group PG_TX (empty consumerGroup) (frames2.jsonl line 69).
CPP_UNREGISTER_PRODUCER = (
    b'\x00\x00\x00\xfd\x00\x00\x00\xf9'
    b'{"code":35,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"2BjUKV+uNtnzmQbhHtFXnF0MPAk=","clientID":"22876-127.0.0.1@DEFAULT",'
    b'"consumerGroup":"","producerGroup":"PG_TX"},"flag":0,"language":"CPP",'
    b'"opaque":66,"remark":"","version":63}\n'
)

# CONSUMER_SEND_MSG_BACK (36) of a message the consumer failed; delayLevel is a bare JSON number
# (frames3.jsonl line 25).
CPP_SEND_BACK = (
    b'\x00\x00\x00\xdb\x00\x00\x00\xd7'
    b'{"code":36,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"V3oduUJt9WIjCvyzIY+r8antvb4=","delayLevel":0,"group":"CG_FAIL",'
    b'"offset":"0"},"flag":0,"language":"CPP","opaque":24,"remark":"","version":63}\n'
)

# Sends of the C++ client (tests/compat/cpp_frames.py).
# SEND_MESSAGE (10), sync, tags, keys and a user property.
CPP_SEND_SYNC = _cpp_send("frames.jsonl 1")
# SEND_MESSAGE (10) of a 5000-byte body the client zlib-compressed (sysFlag 1).
CPP_SEND_COMPRESSED = _cpp_send("frames.jsonl 2")
# SEND_MESSAGE (10) sent oneway; the C++ client leaves the header's flag at 0.
CPP_SEND_ONEWAY = _cpp_send("frames.jsonl 3")
# SEND_MESSAGE (10) with batch=1: the body holds two batch elements.
CPP_SEND_BATCH = _cpp_send("frames.jsonl 4")
# SEND_MESSAGE (10) of a transactional half message (sysFlag 4, TRAN_MSG).
CPP_SEND_HALF = _cpp_send("frames2.jsonl 1")
# END_TRANSACTION (37) committing that half message (commitOrRollback 8).
CPP_END_TRANSACTION_COMMIT = _cpp_send("frames2.jsonl 2")
# SEND_MESSAGE (10) with delay level 2.
CPP_SEND_DELAYED = _cpp_send("frames3.jsonl 1")

#: Every C++ vector, in the order the clients sent them.
CPP_FRAMES: tuple[bytes, ...] = (
    CPP_ROUTE_QUERY, CPP_SEND_SYNC, CPP_SEND_COMPRESSED, CPP_SEND_ONEWAY, CPP_SEND_BATCH,
    CPP_HEARTBEAT_CONSUMER, CPP_CONSUMER_LIST, CPP_QUERY_OFFSET, CPP_PULL_FIRST,
    CPP_PULL_COMMIT, CPP_SEND_HALF, CPP_END_TRANSACTION_COMMIT, CPP_END_TRANSACTION_UNKNOWN,
    CPP_HEARTBEAT_PRODUCER, CPP_END_TRANSACTION_CHECKED, CPP_MAX_OFFSET, CPP_UPDATE_OFFSET,
    CPP_UNREGISTER_CONSUMER, CPP_UNREGISTER_PRODUCER, CPP_SEND_DELAYED, CPP_SEND_BACK,
)

# --------------------------------------------------------------------------- Java client
# All from tests/compat/java498_frames.py.

# HEART_BEAT (34) of a producer at start; no extFields in the header.
JAVA_HEARTBEAT_PRODUCER = _java("producer", 34)
# SEND_MESSAGE_V2 (310), sync, tags TagA, keys "KEY1 KEY2", user properties color and size;
# extFields under the short keys a..n, the property string without a trailing \x02.
JAVA_SEND_SYNC = _java("producer", 310, "sync send with tags+keys+2 user properties")
# SEND_MESSAGE_V2 (310) sent oneway: flag 2.
JAVA_SEND_ONEWAY = _java("producer", 310, "oneway send")
# SEND_MESSAGE_V2 (310) of a 5 KB body, zlib-compressed (sysFlag 769 = compressed | zlib type).
JAVA_SEND_COMPRESSED = _java("producer", 310, "send 5 KB body (compressed)")
# SEND_BATCH_MESSAGE (320) of three messages.
JAVA_SEND_BATCH = _java("producer", 320)
# PULL_MESSAGE (11) of a lite pull consumer: subscription "*", subVersion 0, sysFlag 22, ReqT.
JAVA_LITE_PULL = _java("lite-pull", 11)
# END_TRANSACTION (37), oneway, answering CHECK_TRANSACTION_STATE with COMMIT.
JAVA_END_TRANSACTION_CHECKED = _java(
    "transaction", 37,
    "client answers CHECK_TRANSACTION_STATE (checkLocalTransaction -> COMMIT_MESSAGE)")
# SEND_REPLY_MESSAGE_V2 (325): the replier's answer to a request, MSG_TYPE reply.
JAVA_SEND_REPLY = _java("request-reply", 325)
# A response (code 0, flag 1): the client answering a request the broker sent it; no
# extFields, no body.
JAVA_RESPONSE = _java("request-reply", 0)
# UPDATE_BROKER_CONFIG (25) from mqadmin without tools.yml: no extFields, a properties body.
JAVA_UPDATE_BROKER_CONFIG = _java(
    "mqadmin", 25,
    "[no tools.yml, no ACL hook] mqadmin updateBrokerConfig -k flushConsumerOffsetInterval "
    "-v 6000")
