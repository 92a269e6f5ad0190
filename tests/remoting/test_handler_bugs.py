"""A handler whose answer cannot be encoded (a bug) is answered SYSTEM_ERROR at once, on every
request family of the broker, the NameServer and the controller, in both header encodings;
the connection goes on serving."""

from __future__ import annotations

import inspect
import time

from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.protocol.command import SERIALIZE_ROCKETMQ
from rocketq.remoting import RemotingClient

from ..conftest import run_async
from ..controller.conftest import start_controllers

#: One request of each family a broker serves, with plausible fields, so the real handler
#: takes its usual path (synchronous answer, or awaited as sends and long pulls are).
BROKER_REQUESTS = {
    "send": (RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "T", "c": "TBW102", "d": "4",
                                           "e": "0", "f": "0", "g": "0", "h": "0", "i": "",
                                           "j": "0", "k": "false"}),
    "pull": (RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "T", "queueId": "0",
                                        "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "2",
                                        "commitOffset": "0", "suspendTimeoutMillis": "100",
                                        "subscription": "*", "subVersion": "0"}),
    "heartbeat": (RequestCode.HEART_BEAT, {}),
    "offsets": (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T",
                                                    "queueId": "0"}),
    "admin": (RequestCode.GET_BROKER_RUNTIME_INFO, {}),
    "topic admin": (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "readQueueNums": "4",
                                                          "writeQueueNums": "4", "perm": "6"}),
    "transaction": (RequestCode.END_TRANSACTION, {"producerGroup": "g", "tranStateTableOffset":
                                                  "0", "commitLogOffset": "0",
                                                  "commitOrRollback": "8", "msgId": "x"}),
    "send back": (RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": "0", "group": "g",
                                                       "delayLevel": "0"}),
    "query": (RequestCode.QUERY_MESSAGE, {"topic": "T", "key": "k", "maxNum": "1",
                                          "beginTimestamp": "0", "endTimestamp": "1"}),
    "consumer list": (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"}),
}
NAMESRV_REQUESTS = {
    "route": (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}),
    "cluster": (RequestCode.GET_BROKER_CLUSTER_INFO, {}),
}
CONTROLLER_REQUESTS = {
    "replica info": (RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "g"}),
    "metadata": (RequestCode.CONTROLLER_GET_METADATA_INFO, {}),
}


def break_answers(handlers: dict, code: int, seen: list[int]) -> None:
    """Make the handler of ``code`` answer as it would, but with a field no encoder takes."""
    real = handlers[code]
    takes_conn = len(inspect.signature(real).parameters) == 2  # the controller's take cmd only

    def corrupt(cmd: RemotingCommand, result):
        if not isinstance(result, RemotingCommand):
            result = cmd.response(ResponseCode.SUCCESS)
        result.ext_fields["broken"] = object()
        seen.append(cmd.code)
        return result

    def handler(*args):
        cmd = args[-1]
        try:
            result = real(*args) if takes_conn else real(cmd)
        except Exception:
            return corrupt(cmd, None)
        if inspect.isawaitable(result):
            async def later():
                try:
                    answer = await result
                except Exception:
                    answer = None
                return corrupt(cmd, answer)
            return later()
        return corrupt(cmd, result)

    handlers[code] = handler


async def answered_at_once(address: str, requests: dict, handlers: dict) -> None:
    client = RemotingClient()
    try:
        for family, (code, fields) in requests.items():
            seen: list[int] = []
            real = handlers[code]
            break_answers(handlers, code, seen)
            try:
                for serialize_type in (0, SERIALIZE_ROCKETMQ):
                    cmd = RemotingCommand.request(code, dict(fields))
                    cmd.serialize_type = serialize_type
                    started = time.monotonic()
                    r = await client.invoke(address, cmd, 10)
                    took = time.monotonic() - started
                    assert r.code == ResponseCode.SYSTEM_ERROR, (family, r.code, r.remark)
                    assert "could not be encoded" in r.remark, (family, r.remark)
                    assert took < 3, (family, took)  # not the 10 s timeout
            finally:
                handlers[code] = real
            assert seen == [code, code], family
        # The same connection serves a healthy request afterwards.
        code, fields = next(iter(requests.values()))
        r = await client.invoke(address, RemotingCommand.request(code, dict(fields)), 10)
        assert r.code != ResponseCode.SYSTEM_ERROR or "could not be encoded" not in r.remark
    finally:
        await client.close()


def test_broker_families_answer_a_handler_bug_at_once(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        try:
            await answered_at_once(broker.address, BROKER_REQUESTS, broker._handlers)
        finally:
            await cluster.stop()

    run_async(main(), 120)


def test_namesrv_families_answer_a_handler_bug_at_once(cluster):
    async def main():
        ns = await cluster.start_namesrv()
        try:
            await answered_at_once(ns.address, NAMESRV_REQUESTS, ns._handlers)
        finally:
            await cluster.stop()

    run_async(main(), 60)


def test_controller_families_answer_a_handler_bug_at_once():
    async def main():
        (node,) = await start_controllers(1)
        try:
            await answered_at_once(node.address, CONTROLLER_REQUESTS, node._handlers)
        finally:
            await node.stop()

    run_async(main(), 60)
