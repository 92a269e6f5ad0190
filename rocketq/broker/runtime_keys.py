"""The broker.conf keys that UPDATE_BROKER_CONFIG may change while the broker runs. A table
of its own, below both ``config_updates`` (which checks a change against it) and
``unheeded_security`` (which refuses a security setting that would name one)."""

from __future__ import annotations

from ..protocol import JAVA_INT_MAX

#: The keys UPDATE_BROKER_CONFIG may change while the broker runs, with the range an integer's
#: value must be in (None for a boolean or a string checked on its own). Each is read where it
#: is used on every use, or taken up at once by the broker when it changes (brokerPermission,
#: autoCreateTopicEnable, maxMessageSize, syncFlushTimeout). Every other key is read once, at
#: start, and is refused. Times are in milliseconds unless said otherwise.
RUNTIME_KEYS: dict[str, tuple[int, int] | None] = {
    # BrokerConfig
    "brokerPermission": (0, 7),  # PermName.isValid: 0 <= perm < Perm.PRIORITY (8)
    # Read at each registration; the broker registers with the new list at once. RocketMQ
    # takes it up too (BrokerController re-reads namesrvAddr every 2 minutes). A NameServer
    # left out forgets the broker when its registration expires, as in RocketMQ.
    "namesrvAddr": None,
    "autoCreateTopicEnable": None,
    # Read on each heartbeat and pull that meets an unknown group (subscription_groups.py).
    "autoCreateSubscriptionGroup": None,
    "enablePropertyFilter": None,
    "longPollingEnable": None,
    "shortPollingTimeMills": (1, JAVA_INT_MAX),
    "flushConsumerOffsetInterval": (1, JAVA_INT_MAX),
    "transactionTimeOut": (0, JAVA_INT_MAX),
    "transactionCheckMax": (0, JAVA_INT_MAX),
    "transactionCheckInterval": (1, JAVA_INT_MAX),
    "registerNameServerPeriod": (1, JAVA_INT_MAX),
    "registerBrokerTimeoutMills": (1, JAVA_INT_MAX),
    "channelExpiredTimeout": (1, JAVA_INT_MAX),
    "timerMaxDelaySec": (1, JAVA_INT_MAX),
    # BrokerConfig and MessageStoreConfig
    "maxMessageSize": (1, JAVA_INT_MAX),
    # MessageStoreConfig
    "flushIntervalCommitLog": (1, JAVA_INT_MAX),
    "flushIntervalConsumeQueue": (1, JAVA_INT_MAX),
    "syncFlushTimeout": (1, JAVA_INT_MAX),
    "fileReservedTime": (1, JAVA_INT_MAX),  # hours
    "deleteWhen": None,  # hours of the day, 0..23, ';'-separated
    # RocketMQ's getter keeps diskMaxUsedSpaceRatio within 10..95; here a value outside it
    # is refused instead of silently meaning another.
    "diskMaxUsedSpaceRatio": (10, 95),
    "diskSpaceCleanForciblyRatio": (10, 95),
    "diskSpaceWarningLevelRatio": (10, 99),
    "cleanFileForciblyEnable": None,
    "deleteFileBatchMax": (1, JAVA_INT_MAX),
    "cleanResourceInterval": (1, JAVA_INT_MAX),
    "maxTransferBytesOnMessageInMemory": (1, JAVA_INT_MAX),
    "maxMsgsNumBatch": (1, JAVA_INT_MAX),
}
