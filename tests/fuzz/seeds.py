"""Rebuild the seed corpora under ``tests/fuzz/corpus/<target>/`` (they are checked in).

    python -m tests.fuzz.seeds

Seeds are what the decoders meet in practice: the frames real C++ and Java clients and
mqadmin sent (``tests/compat/cpp_frames.py``, ``tests/compat/java498_frames.py``,
``tests/protocol/vectors.py``), the property strings, batch bodies and heartbeat bodies they
carry, and valid encodings of what no capture holds (records, binary headers, the HA
stream, controller requests, config files). Each file is named for what it holds; the whole
set stays at a few dozen small files per target.
"""

from __future__ import annotations

import os
import shutil
import struct

import orjson

from rocketq.ha.protocol import encode_hello, encode_report, encode_transfer_header
from rocketq.protocol import RemotingCommand, fastjson
from rocketq.protocol.command import SERIALIZE_ROCKETMQ, decode_frame, encode, encode_header
from rocketq.protocol.message import (
    MAGIC_V2,
    MessageRecord,
    SysFlag,
    encode_batch,
    encode_properties,
    encode_record,
)

from ..compat.java498_frames import FRAMES as JAVA_FRAMES
from ..protocol import vectors
from .run import CORPUS_ROOT


def _frames() -> dict[str, bytes]:
    """Whole captured frames, named after their vector."""
    return {name.lower(): value for name, value in vars(vectors).items()
            if name.isupper() and isinstance(value, bytes)}


def _commands() -> dict[str, RemotingCommand]:
    return {name: decode_frame(frame[4:]) for name, frame in _frames().items()}


def _property_strings() -> dict[str, bytes]:
    out = {}
    for name, cmd in _commands().items():
        props = cmd.ext_fields.get("properties") or cmd.ext_fields.get("i")
        if props:
            out[name] = props.encode()
    return out


def _record(topic: str, body: bytes, props: dict[str, str], **kw: object) -> bytes:
    return encode_record(MessageRecord(topic=topic, body=body, properties=props,
                                       born_host=("192.0.2.7", 52358),
                                       store_host=("127.0.0.1", 10911), **kw))  # type: ignore


def _v2(record: bytes) -> bytes:
    """The v1 record as a v2 one (MAGIC_V2: the topic length is two bytes)."""
    body_len = struct.unpack_from(">i", record, 84)[0]
    at = 88 + body_len
    out = bytearray(record[:at]) + b"\x00" + record[at:]
    struct.pack_into(">ii", out, 0, len(out), MAGIC_V2)
    return bytes(out)


def build() -> dict[str, dict[str, bytes]]:
    """Every target's seeds: target -> file name -> bytes."""
    frames = _frames()
    commands = _commands()
    seeds: dict[str, dict[str, bytes]] = {}

    seeds["frames"] = dict(frames)
    seeds["frames"]["two_frames_and_a_partial_one"] = (
        frames["cpp_route_query"] + frames["java_response"] + frames["cpp_send_sync"][:40])
    binary = RemotingCommand(10, {"topic": "TopicTest", "queueId": "1"}, b"hello",
                             opaque=3, remark="r", serialize_type=SERIALIZE_ROCKETMQ)
    seeds["frames"]["rocketmq_binary_header"] = encode(binary)

    def header(frame: bytes) -> bytes:
        return frame[8:8 + (struct.unpack_from(">i", frame, 4)[0] & 0xFFFFFF)]

    seeds["header_json"] = {name: header(frame) for name, frame in frames.items()
                            if name.startswith(("cpp_send", "java_", "cpp_heartbeat",
                                                "cpp_pull", "cpp_route"))}
    seeds["header_rocketmq"] = {}
    for name, cmd in list(commands.items())[::2]:
        cmd.serialize_type = SERIALIZE_ROCKETMQ
        seeds["header_rocketmq"][name] = encode_header(cmd)

    props = _property_strings()
    seeds["properties"] = dict(props)
    seeds["properties"]["offset_msg_id"] = b"7F00000100002A9F0000000000000000"
    seeds["properties"]["non_ascii_key"] = "KEYS\x01clé ключ 键\x02".encode()

    sync = {"TAGS": "TagA", "KEYS": "KEY1 KEY2", "UNIQ_KEY": "0100007F000066360000BAFBAA740100",
            "color": "red"}
    one = _record("TopicTest", b"hello world", sync, queue_offset=7, commitlog_offset=0)
    two = _record("%RETRY%CG", b"x" * 40, {"RETRY_TOPIC": "TopicTest", "DELAY": "3"},
                  queue_id=3, reconsume_times=2, commitlog_offset=len(one))
    compressed = _record("TopicTest", bytes.fromhex("789c4b4c4a0600024d0127"), {},
                         sysflag=SysFlag.COMPRESSED)
    seeds["records"] = {"one_record": one, "two_records": one + two,
                        "v2_magic_record": _v2(one), "compressed_body": compressed,
                        "no_properties": _record("T", b"", {}),
                        "record_then_garbage": one + b"\x00\x00\x00\x10garbage"}

    batch = encode_batch([(0, b"m1", "KEYS\x01k1\x02"), (1, b"m-two", encode_properties(sync)),
                          (0, b"", "")])
    seeds["batch"] = {"three_elements": batch, "empty": b"",
                      "cpp_send_batch_body": bytes(commands["cpp_send_batch"].body),
                      "java_send_batch_body": bytes(commands["java_send_batch"].body)}

    confirm, plain = b"\x87", b"\x07"
    seeds["ha"] = {
        "slave_reports": plain + encode_report(0) + encode_report(1024) + encode_report(2048),
        "controller_hello": confirm + encode_hello(2) + encode_report(4096),
        "transfer_chunks": plain + encode_transfer_header(0, len(one)) + one
        + encode_transfer_header(len(one), 0),
        "confirm_chunks": confirm + encode_transfer_header(0, len(two), 0) + two
        + encode_transfer_header(len(two), 0, len(two)),
    }

    sync_state_set = orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1})

    def request(code_index: int, fields: dict[str, str], body: bytes = b"") -> bytes:
        head = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        return bytes((code_index,)) + head + b"\x00" + body

    group = {"clusterName": "DefaultCluster", "brokerName": "broker-a"}
    register = [request(1, {**group, "brokerAddress": f"127.0.0.1:1091{i}", "brokerId": str(i),
                            "haServerAddr": f"127.0.0.1:1091{i + 2}"}) for i in (1, 2)]
    elect = request(2, {**group, "brokerId": "1", "epoch": "0"})
    heartbeat = request(0, {**group, "brokerId": "1", "brokerAddr": "127.0.0.1:10911",
                            "epoch": "1", "maxOffset": "100", "confirmOffset": "100",
                            "electionPriority": "1", "heartbeatTimeoutMills": "3000"})
    alter = request(4, {**group, "masterBrokerId": "1", "masterEpoch": "1"}, sync_state_set)
    seeds["controller"] = {
        "register_elect_heartbeat": b"\x1e".join([*register, elect, heartbeat]),
        "register_elect_alter": b"\x1e".join([*register, elect, alter, request(3, group)]),
        "metadata_and_sync_state_data": b"\x1e".join(
            [register[0], request(5, {}), request(6, {}, b'["broker-a"]')]),
    }

    heartbeats = {name: bytes(cmd.body) for name, cmd in commands.items()
                  if name.startswith(("cpp_heartbeat", "java_heartbeat", "cpp_consumer_list",
                                      "cpp_unregister"))
                  and cmd.body}
    mq = {"brokerName": "broker-a", "queueId": 0, "topic": "TopicTest"}
    seeds["fastjson"] = {
        **heartbeats,
        "consume_stats": fastjson.dumps({"offsetTable": fastjson.ObjectKeyMap(
            [(mq, {"brokerOffset": 5, "consumerOffset": 3, "lastTimestamp": 0})]),
            "consumeTps": 0.5}),
        "numeric_keys": b'{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}}',
        "nested": b'{"a":[1,-2.5e3,true,false,null,"s\\u0001\\"q"],"b":{}}',
    }
    for scenario in ("mqadmin", "two-consumers"):
        for frame in JAVA_FRAMES[scenario]:
            if frame.body.startswith(b"{") and len(seeds["fastjson"]) < 12:
                seeds["fastjson"][f"java_{scenario}_{frame.code}"] = frame.body

    seeds["sql92"] = {f"expr_{i:02d}": text.encode() for i, text in enumerate((
        "region = 'eu'", "amount >= 100.5", "amount NOT BETWEEN 10 AND 200",
        "region IN ('eu', 'us')", "region NOT IN ('eu')", "vip IS NOT NULL AND vip = TRUE",
        "(a = 1 OR b <> 'x') AND NOT c < -3", "name = 'it''s'", "FALSE",
        "a Between 1 and 2 AnD b Is Not Null", "x > .5e-3 or y <= 7",
        "TAGS = 'TagA' OR KEYS IS NULL"))}

    seeds["plain_acl"] = {
        "rocketmq_example": b"""globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    admin: true
""",
        "flow_style": b'{globalWhiteRemoteAddresses: ["127.0.0.1", "192.168.1.{1,2,3}"], '
                      b'accounts: [{accessKey: abcdefg, secretKey: "1234567", '
                      b'whiteRemoteAddress: "10.0.1-100.*.*", topicPerms: ["t=PUB"]}], '
                      b'dataVersion: [{timestamp: 1, counter: 2}]}\n',
        "ipv6_and_typo": b"accounts:\n- accessKey: abcdefgh\n  secretKey: secret99\n"
                         b"  whiteRemoteAddress: '::1'\n  defaultTopicPerms: PUB\n",
        "empty": b"",
    }

    update_body = bytes(commands["java_update_broker_config"].body)
    seeds["broker_conf"] = {
        "broker_conf": b"""# a broker.conf
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = ASYNC_FLUSH
namesrvAddr=127.0.0.1:9876;127.0.0.1:9877
listenPort: 10911
autoCreateTopicEnable=true
tls.server.mode=permissive
mapedFileSizeCommitLog=1073741824
""",
        "mqadmin_update_body": update_body,
        "runtime_changes": b"brokerPermission=6\ndeleteWhen=01;13\ndiskMaxUsedSpaceRatio=80\n"
                           b"namesrvAddr=127.0.0.1:9876\ncleanFileForciblyEnable=false\n",
        "escapes_and_continuations": b"! comment\nkey\\ with\\:colon = a\\\n    b\\u0041\\t\n"
                                     b"slaveReadEnable : yes\n",
    }
    return seeds


def write(root: str = CORPUS_ROOT) -> None:
    """Replace every target's seed directory with the seeds ``build`` makes."""
    for target, files in build().items():
        path = os.path.join(root, target)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        for name, data in files.items():
            with open(os.path.join(path, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    write()
