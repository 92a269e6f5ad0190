"""Transactional messages (RocketMQ's TransactionalMessageService, EndTransactionProcessor and
TransactionalMessageCheckService) and rocketq's exactly-once sinks built on them.

- ``half_messages``: ``Transactions``, half messages stored invisible, committed or rolled
  back by END_TRANSACTION with an op record, and checked with their producers when left open.
- ``sink``: ``SinkCommits``, the exactly-once sinks' SINK_PREPARE and SINK_COMMIT: a batch's
  halves stored as runs, its decision written to the ledger topic, then committed together.
- ``sink_state``: ``SinkState``, what the sinks know caught up from the store: the ledger of
  decisions and the index of their open halves.
- ``sink_index``: what the sinks' index keeps of a txn's open half messages.

Nothing is re-exported: the send path imports ``half_messages``, so the package stays free of
imports of its own; ``sink`` answers its puts with ``broker.put_outcomes``, below both.

May import: protocol, store, remoting, broker.clients, broker.config, broker.files,
broker.put_outcomes, broker.schedule, broker.stats, broker.topics.
"""
