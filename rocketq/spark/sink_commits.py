"""The driver's side of the exactly-once sink: commit a batch's halves on every broker that
may hold them, once (a decision recorded before wins), or roll them back. The brokers'
side is ``broker/transactions/sink.py``. No Spark imports."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import orjson

from ..protocol import RemotingCommand, RequestCode, ResponseCode
from .access import PLAIN, Access, worker_client

log = logging.getLogger("rocketq.spark")


async def _brokers(namesrv: str, topics: Iterable[str], addrs: dict[str, str],
                   access: Access) -> list[str]:
    """The addresses in ``addrs`` (name -> address) and the masters of the topics' routes."""
    instance = access.instance(namesrv)
    out = dict(addrs)
    try:
        for topic in topics:
            route = await instance.fetch_route(topic)
            for name, by_id in (route.broker_addrs if route else {}).items():
                if 0 in by_id:
                    out.setdefault(name, by_id[0])
    finally:
        await instance.remoting.close()
    return sorted(set(out.values()) - {""})


def _sink_request(code: int, sink: str, batch: str, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, {"sink": sink, "batch": batch}, body)


def commit_sink(namesrv: str, topics: Iterable[str], addrs: dict[str, str], sink: str,
                batch: str, decision: dict[str, dict[str, int]],
                access: Access = PLAIN) -> dict[str, dict[str, int]]:
    """Commit a sink's batch on every broker: the brokers that hold its halves (``addrs``,
    name -> address) and those of ``topics``. A decision recorded before (the batch is
    replayed) wins over ``decision``; the one applied is returned. Raises if a broker refuses
    or cannot be reached: the batch is then not done, and Spark runs it again."""
    loop, client = worker_client(access)

    async def go() -> dict[str, dict[str, int]]:
        targets = await _brokers(namesrv, topics, addrs, access)
        # A decision recorded on any broker is the batch's: a driver that died after
        # committing on some brokers and not others left it there.
        answers = await asyncio.gather(*(client.invoke(addr, _sink_request(
            RequestCode.SINK_DECISION, sink, batch), 30) for addr in targets))
        chosen = decision
        for addr, r in zip(targets, answers, strict=True):
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"reading sink {sink} batch {batch} on {addr}: {r.remark}")
            if r.ext_fields.get("decided") == "true":
                chosen = orjson.loads(r.body)["txns"]
                break
        body = orjson.dumps({"txns": chosen})
        answers = await asyncio.gather(*(client.invoke(addr, _sink_request(
            RequestCode.SINK_COMMIT, sink, batch, body), 60) for addr in targets))
        for addr, r in zip(targets, answers, strict=True):
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"committing on {addr}: {r.remark}")
        return chosen

    return loop.run(go())


def abort_sink(namesrv: str, topics: Iterable[str], addrs: dict[str, str], sink: str,
               batch: str, access: Access = PLAIN) -> None:
    """Roll back a sink's batch's open halves on every broker (a recorded decision's are
    committed instead). Best effort: halves left open are resolved by the brokers' checks."""
    loop, client = worker_client(access)

    async def go() -> None:
        targets = await _brokers(namesrv, topics, addrs, access)
        answers = await asyncio.gather(*(client.invoke(addr, _sink_request(
            RequestCode.SINK_ABORT, sink, batch), 60) for addr in targets),
            return_exceptions=True)
        for addr, r in zip(targets, answers, strict=True):
            if isinstance(r, BaseException) or r.code != ResponseCode.SUCCESS:
                log.warning("rolling back sink %s batch %s on %s failed: %s", sink, batch,
                            addr, r if isinstance(r, BaseException) else r.remark)

    loop.run(go())
