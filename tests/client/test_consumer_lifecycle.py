"""What a new user meets first with the consumers, against real brokers: listener answers that
are not a ConsumeResult, ``with`` / ``async with`` starting and stopping consumers set up
inside, iterating a pull consumer, the first message of a topic its first send creates, and
the starting positions' two spellings."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

import pytest

from rocketq import ConsumeResult, Message, Producer, PullConsumer, PushConsumer, create_reply
from rocketq.aio import Producer as AsyncProducer
from rocketq.aio import PullConsumer as AsyncPullConsumer
from rocketq.aio import PushConsumer as AsyncPushConsumer

from ..conftest import run_async, until, wait_for
from ..servers import ServerThread

#: Every delay level 200 ms: a message handed back for a retry comes again at once.
QUICK_RETRIES = " ".join(["200ms"] * 18)


@pytest.fixture
def quick_retries(tmp_path):
    """A NameServer and a Broker whose retries come back after 200 ms."""
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        st.start_broker(messageDelayLevel=QUICK_RETRIES)
        yield st
    finally:
        st.stop()


class Seen:
    """A listener recording ``(body, reconsume_times)`` of what it gets, and answering
    ``first`` to a message's first delivery and ``then`` to later ones."""

    def __init__(self, first: object, then: object = ConsumeResult.SUCCESS) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[bytes, int]] = []
        self.first, self.then = first, then

    def __call__(self, msgs):
        with self.lock:
            self.seen.extend((m.body, m.reconsume_times) for m in msgs)
        return self.first if msgs[0].reconsume_times == 0 else self.then

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


def send_many(namesrv: str, topic: str, n: int, prefix: bytes = b"m") -> None:
    with Producer("pg", namesrv=namesrv) as producer:
        for i in range(n):
            producer.send(Message(topic, prefix + b"%d" % i))


def retry_errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.ERROR and "neither a ConsumeResult nor None" in r.getMessage()]


# ---------------------------------------------------------------------------- listener answers


@pytest.mark.parametrize("answer", [False, True])
def test_a_listener_answering_neither_a_result_nor_none_gets_the_message_again(
        quick_retries, caplog, answer):
    st = quick_retries
    st.create_topic("Answers", 1)
    caplog.set_level(logging.ERROR, "rocketq.client")
    listener = Seen(answer)
    consumer = PushConsumer(f"answers-{answer}", namesrv=st.namesrv, from_where="first")
    consumer.subscribe("Answers")
    consumer.register(listener)
    consumer.start()
    try:
        send_many(st.namesrv, "Answers", 1)
        assert wait_for(lambda: listener.count() >= 2, 15)
        time.sleep(0.5)  # SUCCESS the second time: no third delivery
        assert listener.seen == [(b"m0", 0), (b"m0", 1)]
    finally:
        consumer.shutdown()
    (error, *_) = retry_errors(caplog)
    assert f"returned {answer!r}" in error and "Seen" in error  # the value and the listener
    assert "ConsumeResult.SUCCESS or None" in error
    assert "ConsumeResult.RECONSUME_LATER or raise" in error


def test_an_orderly_listener_answering_false_gets_the_same_message_again_first(servers, caplog):
    servers.create_topic("OrderedAnswers", 1)
    caplog.set_level(logging.ERROR, "rocketq.client")
    listener = Seen(False)
    consumer = PushConsumer("orderly-answers", namesrv=servers.namesrv, orderly=True,
                            from_where="first", suspend_current_queue_time=0.1)
    consumer.subscribe("OrderedAnswers")
    consumer.register(listener)
    consumer.start()
    try:
        send_many(servers.namesrv, "OrderedAnswers", 2)
        assert wait_for(lambda: listener.count() >= 4, 15)
        time.sleep(0.3)
        # Suspended and retried in place: nothing after m0 before m0 succeeded.
        assert listener.seen == [(b"m0", 0), (b"m0", 1), (b"m1", 0), (b"m1", 1)]
    finally:
        consumer.shutdown()
    assert retry_errors(caplog)


@pytest.mark.parametrize("orderly", [False, True])
def test_a_coroutine_listener_answering_false_gets_the_message_again(cluster, caplog,
                                                                      orderly):
    caplog.set_level(logging.ERROR, "rocketq.client")
    seen: list[tuple[bytes, int]] = []

    async def listener(msgs):
        seen.extend((m.body, m.reconsume_times) for m in msgs)
        return False if msgs[0].reconsume_times == 0 else None

    async def main():
        await cluster.start_namesrv()
        await cluster.start_broker(messageDelayLevel=QUICK_RETRIES)
        async with AsyncProducer("pg", cluster.namesrv) as producer:
            await producer.send(Message("CoroAnswers", b"once"))
        consumer = AsyncPushConsumer("coro-answers", cluster.namesrv, from_where="first",
                                     orderly=orderly, suspend_current_queue_time=0.1)
        consumer.subscribe("CoroAnswers")
        consumer.register(listener)
        await consumer.start()
        try:
            await until(lambda: len(seen) >= 2, 15)
            await asyncio.sleep(0.5)
        finally:
            await consumer.shutdown()

    run_async(main())
    assert seen == [(b"once", 0), (b"once", 1)]
    assert "listener" in retry_errors(caplog)[0]


# ---------------------------------------------------------------------------- with / async with


def test_with_starts_a_push_consumer_subscribed_and_registered_inside(servers):
    servers.create_topic("Inside", 2)
    send_many(servers.namesrv, "Inside", 5)
    listener = Seen(ConsumeResult.SUCCESS)
    with PushConsumer("inside-g", namesrv=servers.namesrv, from_where="first") as consumer:
        consumer.subscribe("Inside")
        time.sleep(1.5)  # rounds of rebalancing, were there a listener
        assert consumer.assigned_queues() == []  # no listener yet: nothing taken or pulled
        consumer.register(listener)
        assert wait_for(lambda: listener.count() >= 5, 5)
        assert len([q for q in consumer.assigned_queues() if q.topic == "Inside"]) == 2
        assert consumer.start() is consumer  # harmless inside ``with``
    assert sorted(body for body, _ in listener.seen) == [b"m%d" % i for i in range(5)]


def test_with_starts_a_pull_consumer_that_polls_inside(servers):
    servers.create_topic("PolledInside", 2)
    send_many(servers.namesrv, "PolledInside", 5)
    with PullConsumer("polled-g", namesrv=servers.namesrv, from_where="first") as consumer:
        consumer.subscribe("PolledInside")
        got = []
        assert wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 5, 10)
        consumer.start()  # harmless inside ``with``
    assert sorted(m.body for m in got) == [b"m%d" % i for i in range(5)]


@pytest.mark.parametrize("kind", ["push", "pull"])
def test_a_consumer_leaving_with_commits_its_offsets(servers, kind):
    topic = f"Resumed{kind}"
    servers.create_topic(topic, 2)
    send_many(servers.namesrv, topic, 6, b"old")

    def consume(expected: int) -> list[bytes]:
        if kind == "push":
            listener = Seen(ConsumeResult.SUCCESS)
            with PushConsumer(f"resume-{kind}", namesrv=servers.namesrv,
                              from_where="first") as consumer:
                consumer.subscribe(topic)
                consumer.register(listener)
                assert wait_for(lambda: listener.count() >= expected, 10)
                time.sleep(0.3)  # anything more would show up
            return [body for body, _ in listener.seen]
        got: list = []
        with PullConsumer(f"resume-{kind}", namesrv=servers.namesrv,
                          from_where="first") as consumer:
            consumer.subscribe(topic)
            assert wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= expected, 10)
            got.extend(consumer.poll(0.3))
        return [m.body for m in got]

    assert sorted(consume(6)) == [b"old%d" % i for i in range(6)]
    send_many(servers.namesrv, topic, 3, b"new")
    # The group's next consumer starts after what the first one consumed.
    assert sorted(consume(3)) == [b"new0", b"new1", b"new2"]


def test_async_with_starts_push_and_pull_consumers(cluster):
    got_pushed: list[bytes] = []

    async def listener(msgs):
        got_pushed.extend(m.body for m in msgs)

    async def main():
        await cluster.start_namesrv()
        await cluster.start_broker()
        async with AsyncProducer("pg", cluster.namesrv) as producer:
            for i in range(4):
                await producer.send(Message("AsyncWith", b"m%d" % i))
        async with AsyncPushConsumer("aw-push", cluster.namesrv, from_where="first") as push:
            push.subscribe("AsyncWith")
            push.register(listener)
            await push.start()  # harmless inside ``async with``
            await until(lambda: len(got_pushed) >= 4, 10)
        assert not push.running
        polled = []
        async with AsyncPullConsumer("aw-pull", cluster.namesrv, from_where="first") as pull:
            pull.subscribe("AsyncWith")
            deadline = time.monotonic() + 10
            while len(polled) < 4 and time.monotonic() < deadline:
                polled.extend(await pull.poll(0.2))
        assert not pull.running
        return polled

    polled = run_async(main())
    assert sorted(got_pushed) == sorted(m.body for m in polled) == [b"m%d" % i for i in range(4)]


# ---------------------------------------------------------------------------- iteration


def test_async_for_yields_messages_until_the_consumer_is_shut_down(cluster):
    async def main():
        await cluster.start_namesrv()
        await cluster.start_broker()
        async with AsyncProducer("pg", cluster.namesrv) as producer:
            for i in range(6):
                await producer.send(Message("Iterated", b"m%d" % i))
        got: list[bytes] = []
        async with AsyncPullConsumer("iter-g", cluster.namesrv, from_where="first") as consumer:
            consumer.subscribe("Iterated")

            async def iterate() -> None:
                async for message in consumer:
                    got.append(message.body)

            task = asyncio.get_running_loop().create_task(iterate())
            await until(lambda: len(got) >= 6, 10)
            await consumer.shutdown()
            await asyncio.wait_for(task, 5)  # the loop ends with the consumer
        return got

    assert sorted(run_async(main())) == [b"m%d" % i for i in range(6)]


@contextlib.contextmanager
def shut_down_after(consumer, seconds: float):
    """Bound a ``for message in consumer`` loop: shut the consumer down after ``seconds``."""
    timer = threading.Timer(seconds, consumer.shutdown)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def test_for_over_a_pull_consumer_one_at_a_time_and_the_message_left_comes_again(servers):
    servers.create_topic("Looped", 1)
    send_many(servers.namesrv, "Looped", 5)
    got = []
    with PullConsumer("loop-g", namesrv=servers.namesrv, from_where="first") as consumer, \
            shut_down_after(consumer, 15):
        consumer.subscribe("Looped")
        for message in consumer:
            got.append(message.body)
            if len(got) == 3:
                break  # m2 counts as not consumed: the loop never asked for the next one
    assert got == [b"m0", b"m1", b"m2"]
    rest = []
    with PullConsumer("loop-g", namesrv=servers.namesrv, from_where="first") as consumer:
        consumer.subscribe("Looped")

        def stop_when_done() -> None:
            wait_for(lambda: len(rest) >= 3, 15)
            time.sleep(0.3)
            consumer.shutdown()

        stopper = threading.Thread(target=stop_when_done)
        stopper.start()
        for message in consumer:  # ends when the other thread shuts the consumer down
            rest.append(message.body)
        stopper.join(20)
    assert rest == [b"m2", b"m3", b"m4"]


# ---------------------------------------------------------------------------- new topics


def test_the_first_message_of_a_topic_its_first_send_creates_arrives_within_seconds(servers,
                                                                                     capsys):
    arrived: list[float] = []
    consumer = PushConsumer("fresh-g", namesrv=servers.namesrv)
    consumer.subscribe("FreshTopic")
    consumer.register(lambda msgs: arrived.append(time.monotonic()))
    consumer.start()
    try:
        # The consumer has looked for the topic's route a few times by now (before, each
        # look waited twice as long as the last: the next was 7 s away).
        time.sleep(8)
        with Producer("fresh-p", namesrv=servers.namesrv) as producer:
            sent = time.monotonic()
            producer.send(Message("FreshTopic", b"first"))
        assert wait_for(lambda: arrived, 25)
        latency = arrived[0] - sent
        with capsys.disabled():
            print(f"\nfirst message of a new topic consumed {latency:.2f} s after its send")
        assert latency < 5
    finally:
        consumer.shutdown()


def test_a_request_on_a_topic_its_first_send_creates_is_answered_the_first_time(servers):
    responder = Producer("fresh-responder", namesrv=servers.namesrv).start()

    def serve(msgs):
        for m in msgs:
            responder.send(create_reply(m, b"pong:" + m.body))

    consumer = PushConsumer("fresh-rpc", namesrv=servers.namesrv)
    consumer.subscribe("FreshRpc")
    consumer.register(serve)
    consumer.start()
    try:
        time.sleep(3.5)  # a while after the server started, as a client comes up later
        with Producer("fresh-requester", namesrv=servers.namesrv) as requester:
            reply = requester.request(Message("FreshRpc", b"ping"), timeout=3)
        assert reply.body == b"pong:ping"
    finally:
        consumer.shutdown()
        responder.shutdown()


# ---------------------------------------------------------------------------- starting positions


@pytest.mark.parametrize(("given", "meant"), [
    ("earliest", "CONSUME_FROM_FIRST_OFFSET"), ("Latest", "CONSUME_FROM_LAST_OFFSET"),
    ("latest", "CONSUME_FROM_LAST_OFFSET")])
@pytest.mark.parametrize("cls", [PushConsumer, PullConsumer])
def test_from_where_takes_the_spark_spellings_too(cls, given, meant):
    consumer = cls("positions", namesrv="127.0.0.1:1", from_where=given)
    assert consumer._async._heartbeat_data()["consumeFromWhere"] == meant


@pytest.mark.parametrize("cls", [PushConsumer, PullConsumer])
def test_an_unknown_starting_position_is_refused_naming_the_accepted_ones(cls):
    with pytest.raises(ValueError, match=r"from_where must be 'first' \(or 'earliest'\), "
                                         r"'last' \(or 'latest'\) or 'timestamp', not "
                                         r"'beginning'"):
        cls("positions", namesrv="127.0.0.1:1", from_where="beginning")
