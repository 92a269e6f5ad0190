"""Replication as the broker takes part in it: its role (master or slave), registration with
the NameServers, controller mode, and the metadata a slave copies from its master. The
CommitLog's bytes themselves travel over the HA stream of rocketq/ha.

- ``registration.py``: registering the topic table with every NameServer, and a slave's
  finding of its master (RocketMQ's BrokerOuterAPI).
- ``replicas.py``: controller mode (RocketMQ 5's ReplicasManager): joining the group at the
  controller, the master's lease, the role the controller gives, the SyncStateSet.
- ``epochs.py``: the epoch file (RocketMQ's EpochFileCache) and the point where two logs stop
  agreeing, which a demoted master cuts its CommitLog back to.
- ``slave_sync.py``: a slave's periodic copy of its master's topics, offsets, delay offsets and
  subscription groups (RocketMQ's SlaveSynchronize).
- ``roles.py``: the master side (HA port, the master-only deliveries and POP), the slave side
  (following the master's log, the metadata copy), and in controller mode the switch between
  them, as the controller's roles arrive; ``Broker`` hands it its parts and calls
  ``start``/``stop``.

May import: protocol, store, remoting, ha, broker.config, broker.files, broker.store_writer,
broker.topics, broker.subscription_groups, broker.offsets, broker.schedule, broker.pull.
"""
