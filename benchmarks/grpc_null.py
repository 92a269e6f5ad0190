"""A do-nothing RocketMQ 5.x ``MessagingService`` (gRPC): the baseline of grpc_bench.py.

    python benchmarks/grpc_null.py --port 8081      # prints "grpc_null listening on HOST:PORT"

It answers what the official 5.x clients (PyPI ``rocketmq-python-client``, npm
``rocketmq-client-nodejs``) need to produce and consume, and nothing more, at as little cost
per call as it can (docs: /work/shared/docs/GRPC.md):

- QueryRoute: any topic has one READ_WRITE queue (id 0) on broker id 0, whose endpoint is this
  server (scheme IPv4), accepting NORMAL, FIFO, DELAY and TRANSACTION. QueryAssignment: that
  queue.
- Telemetry: each settings command gets status OK and the settings echoed back, with
  publishing.max_body_size 4 MiB, validate_message_type and max_attempts 3 for producers,
  receive_batch_size 32, long_polling_timeout 20 s and max_attempts 17 for consumers.
- SendMessage: OK with one entry per message (message_id echoed, offset counting up). A
  TRANSACTION message not ended within ``--tx-check-delay`` seconds is sent back to its client
  as a RecoverOrphanedTransactionCommand (once), so a transaction checker can be exercised; the
  message gets a body digest, without which the Node client fails to decode it.
- ReceiveMessage: a status OK frame, then ``batch_size`` (at most 1024) pre-built, pre-serialized
  messages, then a delivery_timestamp frame (now), then the end of the stream, as the Java proxy
  writes them. The Python PushConsumer needs the delivery_timestamp frame (without it every
  batch fails in its metrics code with a TypeError and is received again a second later), and
  the messages carry a body digest (MD5): without one the Python client logs an error for every
  message received.
- Heartbeat, AckMessage (one entry per entry), ChangeInvisibleDuration, EndTransaction,
  ForwardMessageToDeadLetterQueue, NotifyClientTermination: OK.

In-process use: ``await serve(...)`` (on a running loop) or ``start_in_thread(...)``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable

import grpc


def _bare_proto_package() -> None:
    """Make ``rocketq.grpc`` a bare package, so that importing its ``proto`` modules does not
    run ``rocketq/grpc/__init__.py`` (the real server, which the baseline must not load)."""
    import types

    import rocketq

    package = types.ModuleType("rocketq.grpc")
    package.__path__ = [os.path.join(os.path.dirname(rocketq.__file__), "grpc")]
    sys.modules["rocketq.grpc"] = package


if __name__ == "__main__" and "rocketq.grpc" not in sys.modules:
    _bare_proto_package()

from rocketq.grpc.proto import definition_pb2 as pb  # noqa: E402
from rocketq.grpc.proto import service_pb2 as spb  # noqa: E402
from rocketq.grpc.proto import service_pb2_grpc  # noqa: E402

SERVICE = "apache.rocketmq.v2.MessagingService"
OK = pb.Status(code=pb.Code.OK, message="OK")
MAX_BATCH = 1024
MAX_BODY_SIZE = 4 * 1024 * 1024
ACCEPT_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
#: consumers' retry delays, as the Java proxy's default delay levels from level 3 on
CONSUMER_BACKOFF_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                      3600, 7200)


class NullMessaging(service_pb2_grpc.MessagingServiceServicer):
    """The servicer. ``host``/``port`` are what routes point at (set once the port is bound)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, body: bytes = b"x" * 128,
                 tx_check_delay: float = 1.0, credentials: tuple[str, str] | None = None,
                 queues: int = 1) -> None:
        self.host, self.port = host, port
        #: Queues in a route: as many as the broker it is compared with has, so that the
        #: client's per-send work (it filters the route's queues on every send) is the same.
        self.queues = max(1, queues)
        self.body = body
        self.body_md5 = hashlib.md5(body).hexdigest().upper()
        self.tx_check_delay = tx_check_delay
        self.credentials = credentials
        self._offsets = itertools.count()
        self._frames: dict[tuple[str, str], list[bytes]] = {}
        self._status_frame = spb.ReceiveMessageResponse(status=OK).SerializeToString()
        self._stamp: tuple[int, bytes] = (0, b"")
        self._heartbeat = spb.HeartbeatResponse(status=OK)
        self._end_tx = spb.EndTransactionResponse(status=OK)
        self._notify = spb.NotifyClientTerminationResponse(status=OK)
        self._forward = spb.ForwardMessageToDeadLetterQueueResponse(status=OK)
        self._telemetry: dict[str, asyncio.Queue[spb.TelemetryCommand | None]] = {}
        self._pending_tx: dict[str, asyncio.TimerHandle] = {}
        #: counters a test may look at (in-process use)
        self.stats = {"send": 0, "receive": 0, "ack": 0, "end_transaction": 0,
                      "recover_sent": 0, "settings": 0}

    # ------------------------------------------------------------------ helpers
    def queue(self, topic: pb.Resource) -> pb.MessageQueue:
        return pb.MessageQueue(
            topic=topic, id=0, permission=pb.READ_WRITE,
            broker=pb.Broker(name="null-broker", id=0, endpoints=pb.Endpoints(
                scheme=pb.IPv4, addresses=[pb.Address(host=self.host, port=self.port)])),
            accept_message_types=ACCEPT_TYPES)

    def _unauthorized(self, context: grpc.aio.ServicerContext) -> bool:
        """With credentials configured: whether the request's signature is wrong."""
        if self.credentials is None:
            return False
        md = dict(context.invocation_metadata() or ())
        auth, when = md.get("authorization", ""), md.get("x-mq-date-time", "")
        access_key, secret = self.credentials
        want = hmac.new(secret.encode(), when.encode(), hashlib.sha1).hexdigest()
        fields = dict(part.strip().split("=", 1) for part in auth.partition(" ")[2].split(",")
                      if "=" in part)
        return not (fields.get("Credential") == access_key
                    and fields.get("Signature", "").lower() == want)

    def _frames_for(self, topic: pb.Resource) -> list[bytes]:
        key = (topic.resource_namespace, topic.name)
        frames = self._frames.get(key)
        if frames is None:
            frames = []
            now = pb.SystemProperties().born_timestamp
            now.GetCurrentTime()
            for i in range(MAX_BATCH):
                props = pb.SystemProperties(
                    tag="null", keys=[f"key-{i}"], message_id=f"01NULL{i:028X}",
                    body_digest=pb.Digest(type=pb.MD5, checksum=self.body_md5),
                    body_encoding=pb.IDENTITY, message_type=pb.NORMAL, born_timestamp=now,
                    born_host="127.0.0.1", store_timestamp=now, store_host="127.0.0.1",
                    receipt_handle=f"null-handle-{i}", queue_id=0, queue_offset=i,
                    delivery_attempt=1)
                message = pb.Message(topic=topic, user_properties={"null": str(i)},
                                     system_properties=props, body=self.body)
                frames.append(spb.ReceiveMessageResponse(message=message).SerializeToString())
            self._frames[key] = frames
        return frames

    # ------------------------------------------------------------------ unary RPCs
    async def QueryRoute(self, request, context):  # noqa: N802
        if self._unauthorized(context):
            return spb.QueryRouteResponse(status=pb.Status(code=pb.UNAUTHORIZED,
                                                           message="bad signature"))
        first = self.queue(request.topic)
        queues = [first]
        for queue_id in range(1, self.queues):
            more = pb.MessageQueue()
            more.CopyFrom(first)
            more.id = queue_id
            queues.append(more)
        return spb.QueryRouteResponse(status=OK, message_queues=queues)

    async def Heartbeat(self, request, context):  # noqa: N802
        return self._heartbeat

    async def SendMessage(self, request, context):  # noqa: N802
        if self.credentials is not None and self._unauthorized(context):
            return spb.SendMessageResponse(status=pb.Status(code=pb.UNAUTHORIZED,
                                                            message="bad signature"))
        entries = []
        for message in request.messages:
            props = message.system_properties
            tx_id = ""
            if props.message_type == pb.TRANSACTION:
                tx_id = "TX" + props.message_id
                self._watch_transaction(context, message, tx_id)
            entries.append(spb.SendResultEntry(status=OK, message_id=props.message_id,
                                               transaction_id=tx_id,
                                               offset=next(self._offsets)))
        self.stats["send"] += len(entries)
        return spb.SendMessageResponse(status=OK, entries=entries)

    async def QueryAssignment(self, request, context):  # noqa: N802
        return spb.QueryAssignmentResponse(
            status=OK, assignments=[pb.Assignment(message_queue=self.queue(request.topic))])

    async def AckMessage(self, request, context):  # noqa: N802
        self.stats["ack"] += len(request.entries)
        return spb.AckMessageResponse(status=OK, entries=[
            spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                      status=OK) for e in request.entries])

    async def ChangeInvisibleDuration(self, request, context):  # noqa: N802
        return spb.ChangeInvisibleDurationResponse(status=OK,
                                                   receipt_handle=request.receipt_handle + "+")

    async def EndTransaction(self, request, context):  # noqa: N802
        self.stats["end_transaction"] += 1
        timer = self._pending_tx.pop(request.transaction_id, None)
        if timer is not None:
            timer.cancel()
        return self._end_tx

    async def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: N802
        return self._forward

    async def NotifyClientTermination(self, request, context):  # noqa: N802
        return self._notify

    # ------------------------------------------------------------------ streams
    async def ReceiveMessage(self, request, context) -> AsyncIterator[bytes]:  # noqa: N802
        """Yields serialized frames (the handler's serializer is the identity)."""
        frames = self._frames_for(request.message_queue.topic)
        n = min(max(request.batch_size, 1), MAX_BATCH)
        self.stats["receive"] += n
        yield self._status_frame
        for frame in frames[:n]:
            yield frame
        yield self._delivery_timestamp_frame()

    def _delivery_timestamp_frame(self) -> bytes:
        """``ReceiveMessageResponse{delivery_timestamp: now}``, made again once a second."""
        now = int(time.time())
        if self._stamp[0] != now:
            response = spb.ReceiveMessageResponse()
            response.delivery_timestamp.seconds = now
            self._stamp = (now, response.SerializeToString())
        return self._stamp[1]

    async def Telemetry(self, request_iterator, context):  # noqa: N802
        md = dict(context.invocation_metadata() or ())
        client_id = md.get("x-mq-client-id", "")
        out: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        self._telemetry[client_id] = out

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if command.HasField("settings"):
                        self.stats["settings"] += 1
                        out.put_nowait(spb.TelemetryCommand(
                            status=OK, settings=self.reply_settings(command.settings)))
            except (asyncio.CancelledError, grpc.RpcError):
                pass
            finally:
                out.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while (command := await out.get()) is not None:
                await context.write(command)
        finally:
            reader.cancel()
            if self._telemetry.get(client_id) is out:
                del self._telemetry[client_id]

    def reply_settings(self, settings: pb.Settings) -> pb.Settings:
        """The client's settings with the server's values, as the Java proxy merges them."""
        reply = pb.Settings()
        reply.CopyFrom(settings)
        if settings.HasField("publishing") or settings.client_type == pb.PRODUCER:
            reply.publishing.max_body_size = MAX_BODY_SIZE
            reply.publishing.validate_message_type = True
            reply.backoff_policy.max_attempts = 3
            backoff = reply.backoff_policy.exponential_backoff
            backoff.initial.FromMilliseconds(10)
            backoff.max.FromSeconds(1)
            backoff.multiplier = 2.0
        else:
            reply.subscription.receive_batch_size = 32
            reply.subscription.long_polling_timeout.FromSeconds(20)
            reply.subscription.fifo = False
            reply.backoff_policy.max_attempts = 17
            for seconds in CONSUMER_BACKOFF_S:
                reply.backoff_policy.customized_backoff.next.add().FromSeconds(seconds)
        return reply

    def _watch_transaction(self, context, message: pb.Message, tx_id: str) -> None:
        md = dict(context.invocation_metadata() or ())
        client_id = md.get("x-mq-client-id", "")
        if self.tx_check_delay <= 0 or tx_id in self._pending_tx:
            return
        kept = pb.Message()
        kept.CopyFrom(message)
        # the Node client cannot decode a message without a body digest (MessageView throws)
        kept.system_properties.body_digest.type = pb.MD5
        kept.system_properties.body_digest.checksum = hashlib.md5(message.body).hexdigest().upper()

        def check() -> None:
            self._pending_tx.pop(tx_id, None)
            queue = self._telemetry.get(client_id)
            if queue is not None:
                self.stats["recover_sent"] += 1
                queue.put_nowait(spb.TelemetryCommand(
                    status=OK, recover_orphaned_transaction_command=
                    spb.RecoverOrphanedTransactionCommand(message=kept, transaction_id=tx_id)))

        self._pending_tx[tx_id] = asyncio.get_running_loop().call_later(
            self.tx_check_delay, check)


def _identity(frame: bytes) -> bytes:
    return frame


def handlers(servicer: NullMessaging) -> grpc.GenericRpcHandler:
    """The service's method handlers; ReceiveMessage yields pre-serialized frames."""
    def unary(name: str, request: type, response: type) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), request_deserializer=request.FromString,
            response_serializer=response.SerializeToString)

    methods = {name: unary(name, getattr(spb, name + "Request"), getattr(spb, name + "Response"))
               for name in ("QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment",
                            "AckMessage", "ChangeInvisibleDuration", "EndTransaction",
                            "ForwardMessageToDeadLetterQueue", "NotifyClientTermination")}
    methods["ReceiveMessage"] = grpc.unary_stream_rpc_method_handler(
        servicer.ReceiveMessage, request_deserializer=spb.ReceiveMessageRequest.FromString,
        response_serializer=_identity)
    methods["Telemetry"] = grpc.stream_stream_rpc_method_handler(
        servicer.Telemetry, request_deserializer=spb.TelemetryCommand.FromString,
        response_serializer=spb.TelemetryCommand.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


async def serve(host: str = "127.0.0.1", port: int = 0, *, tls: tuple[bytes, bytes] | None = None,
                **options) -> tuple[grpc.aio.Server, NullMessaging]:
    """Start the null service on the running loop; ``servicer.port`` is the bound port.
    ``tls`` is (private key PEM, certificate chain PEM)."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    servicer = NullMessaging(host, port, **options)
    server.add_generic_rpc_handlers((handlers(servicer),))
    address = f"{host}:{port}"
    if tls:
        bound = server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
    else:
        bound = server.add_insecure_port(address)
    servicer.port = bound
    await server.start()
    return server, servicer


def start_in_thread(host: str = "127.0.0.1", port: int = 0, **options
                    ) -> tuple[NullMessaging, threading.Thread, Callable[[], None]]:
    """The null service on a loop of its own in a daemon thread: (servicer, thread, stop)."""
    ready = threading.Event()
    box: dict = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        server, servicer = loop.run_until_complete(serve(host, port, **options))
        box.update(loop=loop, server=server, servicer=servicer)
        ready.set()
        loop.run_forever()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, name="grpc-null", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the null gRPC service did not start")

    def stop() -> None:
        loop = box["loop"]
        try:
            asyncio.run_coroutine_threadsafe(box["server"].stop(0), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    return box["servicer"], thread, stop


def parse(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--queues", type=int, default=1,
                        help="queues in each route (match the broker compared with)")
    parser.add_argument("--body-size", type=int, default=128,
                        help="body size of the messages ReceiveMessage returns")
    parser.add_argument("--tx-check-delay", type=float, default=1.0,
                        help="seconds before an unended transaction is checked (0: never)")
    parser.add_argument("--tls-cert", help="serve TLS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="... and this private key (PEM)")
    parser.add_argument("--access-key", help="check every QueryRoute/SendMessage signature")
    parser.add_argument("--secret-key", default="")
    return parser.parse_args(list(argv) if argv is not None else None)


async def main_async(args: argparse.Namespace) -> None:
    tls = None
    if args.tls_cert:
        with open(args.tls_key, "rb") as key, open(args.tls_cert, "rb") as cert:
            tls = (key.read(), cert.read())
    credentials = (args.access_key, args.secret_key) if args.access_key else None
    server, servicer = await serve(args.host, args.port, tls=tls,
                                   body=os.urandom(args.body_size) if args.body_size else b"x",
                                   tx_check_delay=args.tx_check_delay, credentials=credentials,
                                   queues=args.queues)
    print(f"grpc_null listening on {args.host}:{servicer.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(0)


def main(argv: Iterable[str] | None = None) -> int:
    asyncio.run(main_async(parse(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
