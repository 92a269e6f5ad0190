"""Admin requests of a broker (RocketMQ's AdminBrokerProcessor and QueryMessageProcessor): what
mqadmin, the dashboard and the admin client ask of it, as opposed to what producers and
consumers send and pull.

- ``requests.py``: topics, the broker's config, runtime info and statistics, the connections of
  producer and consumer groups.
- ``groups.py``: subscription groups created, changed, listed and deleted.
- ``acl.py``: the ACL requests over ``plain_acl.yml``.
- ``consumer_calls.py``: requests carried out with a group's members (reset offsets by time,
  consumer running info, consume a message directly).
- ``message_queries.py``: messages looked up by offset message id and by key.

The tables these requests change (broker/topics.py, broker/subscription_groups.py,
broker/clients.py) are not here: every send, pull and POP reads them, so they sit beside
send/ and pull.py, and no other room has to import admin.

May import: protocol, store, remoting, acl, broker.config, broker.config_updates,
broker.properties, broker.topics, broker.subscription_groups, broker.clients, broker.offsets,
broker.stats.
"""
