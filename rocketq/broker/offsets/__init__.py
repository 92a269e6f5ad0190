"""Consumer offsets (RocketMQ's ConsumerOffsetManager and the offset requests of its
ConsumerManageProcessor): where each clustering consumer group stands in each queue.

- ``table.py``: the offset table, ``ConsumerOffsets``, checkpointed as
  ``config/consumerOffset.json``.
- ``log.py``: the replicated offset log, ``OffsetLog``: every committed change is also a record
  of ``rmq_sys_CONSUMER_OFFSET_LOG`` in the CommitLog, so offsets replicate with the messages
  and a start replays the records after the checkpoint.
- ``log_records.py``: the offset log's record, ``OffsetRecord``, its binary body and
  ``compact``.
- ``requests.py``: QUERY/UPDATE_CONSUMER_OFFSET, GET_ALL_CONSUMER_OFFSET and the queue offset
  look-ups (max, min, by time, earliest store time).

May import: protocol, store, remoting, broker.files, broker.store_writer.
"""
