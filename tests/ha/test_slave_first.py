"""A slave that starts before its master: the NameServer's first answer names no master, and the
slave asks again within seconds rather than at its next 30 s registration."""

from __future__ import annotations

import time

from rocketq import Message, Producer, SendStatus
from rocketq.broker.topics import TopicConfig

from ..conftest import wait_for


def test_a_slave_started_before_its_sync_master_replicates_within_seconds(st):
    # The default heartbeat (5 s) is also the slave's HA retry interval: learning its master
    # must make it connect at once, not at its next retry.
    slave = st.start_broker("slave", brokerName="broker-a", brokerId=1, brokerRole="SLAVE")
    assert slave.registration.masterless and slave.registration.master_addr == ""
    time.sleep(0.3)
    started = time.monotonic()
    master = st.start_broker("broker-a", brokerRole="SYNC_MASTER", syncFlushTimeout=1000)
    # On the master alone: registering the slave too would tell it its master at once.
    master.topics.update(TopicConfig("Early", 1, 1))
    st.call(master.register_all())
    statuses = []
    with Producer("pg", namesrv=st.namesrv) as producer:
        while time.monotonic() - started < 5:
            statuses.append(producer.send(Message("Early", b"m%d" % len(statuses))).status)
            if statuses[-1] is SendStatus.SEND_OK:
                break
            time.sleep(0.05)
        took = time.monotonic() - started
    assert statuses[-1] is SendStatus.SEND_OK, statuses
    assert set(statuses[:-1]) <= {SendStatus.SLAVE_NOT_AVAILABLE}
    assert took < 3.5, f"first SEND_OK {took:.2f} s after the master started"
    assert slave.registration.master_addr == master.address
    assert slave.registration.master_ha_addr == master.ha_server.address
    assert not slave.registration.masterless
    end = master.store.commitlog.max_offset
    assert wait_for(lambda: slave.store.commitlog.max_offset == end, 5)


def test_a_slave_whose_master_is_gone_asks_again_within_seconds(st):
    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    slave = st.start_broker("slave", brokerName="broker-a", brokerId=1, brokerRole="SLAVE",
                            haSendHeartbeatInterval=200)
    assert slave.registration.master_addr == master.address
    assert wait_for(lambda: slave.ha_client.connected_to, 5)
    gone = master.ha_server.address
    st.stop_broker(master)  # unregisters: the NameServer names no master from now on
    assert wait_for(lambda: slave.registration.masterless, 5)
    # The last master is kept (it may come back where it was) while the slave asks again.
    assert slave.registration.master_addr == master.address
    again = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    assert again.ha_server.address != gone
    assert wait_for(lambda: slave.registration.master_ha_addr == again.ha_server.address, 4)
    assert wait_for(lambda: slave.ha_client.connected_to == again.ha_server.address, 3)
