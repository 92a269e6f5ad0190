"""The store checkpoint: how far each part of the store is known to be on disk.

RocketMQ's ``checkpoint`` file is one 4 KiB page whose first three longs are the store
timestamps of the last flushed CommitLog, ConsumeQueue and IndexFile records. rocketq keeps
those and adds, in the same page, the offsets recovery actually needs::

    0  physicMsgTimestamp   8  logicsMsgTimestamp   16 indexMsgTimestamp
    24 flushed CommitLog offset (everything before it is durable)
    32 dispatched offset whose ConsumeQueue and index writes are durable
    40 CommitLog end at a clean shutdown (-1 while running)
    48 confirm offset: controller mode's confirmOffset as the broker last knew it (RocketMQ
       5's confirmPhyOffset); 0 in a page written before the field existed

It is written in place and fsynced after the parts it describes were flushed.
"""

from __future__ import annotations

import os
import struct

_LAYOUT = struct.Struct(">qqqqqqq")
#: The page as written before the confirm offset was added: still read.
_OLD_LAYOUT = struct.Struct(">qqqqqq")
PAGE = 4096


class Checkpoint:
    """Read and write the checkpoint page."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.flushed_offset = 0
        self.dispatched_offset = 0
        self.clean_end_offset = -1
        #: How far the log is confirmed (controller mode): a controller-mode store recovers
        #: its ConsumeQueues no further than this (see ``recovery.confirmed_bound``).
        self.confirm_offset = 0
        exists = os.path.exists(path)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if exists:
            data = os.pread(self.fd, _LAYOUT.size, 0)
            if len(data) >= _OLD_LAYOUT.size:
                (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                 self.flushed_offset, self.dispatched_offset,
                 self.clean_end_offset) = _OLD_LAYOUT.unpack_from(data)
            if len(data) == _LAYOUT.size:
                self.confirm_offset = _LAYOUT.unpack(data)[6]
        self.existed = exists

    def flush(self) -> None:
        page = _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                            self.index_msg_timestamp, self.flushed_offset,
                            self.dispatched_offset, self.clean_end_offset,
                            self.confirm_offset)
        os.pwrite(self.fd, page.ljust(PAGE, b"\0"), 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
