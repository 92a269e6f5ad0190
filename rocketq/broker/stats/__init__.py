"""The broker's statistics: the counters the send and pull paths bump, the
GET_BROKER_RUNTIME_INFO table built from them (``stats``), and their windows over the last
minute, hour and day that mqadmin's ``statsAll`` reads (``stats_items``, below ``stats``).

May import: protocol, store.
"""

from .stats import SIZE_BUCKETS, Sample, Stats, earliest_message_time, human_bytes, runtime_info

__all__ = ["SIZE_BUCKETS", "Sample", "Stats", "earliest_message_time", "human_bytes",
           "runtime_info"]
