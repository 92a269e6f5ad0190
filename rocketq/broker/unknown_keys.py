"""What each key of a ``broker.conf`` that rocketq does not read is, for the report a broker
logs at start: an old spelling, a RocketMQ setting rocketq has no use for (``ROCKETMQ_KEYS``,
the catalogue of every key RocketMQ's broker reads), or a likely typo with the nearest known
key. RocketMQ skips such keys without a word; rocketq names them, so a misspelt key that
leaves its default in force is noticed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from ..store.config import RENAMED_KEYS
from .config import rocketq_keys


def unknown_key_warnings(unknown: Mapping[str, str], source: str = "broker.conf"
                         ) -> list[str]:
    """One line per key of ``BrokerConfig.unknown``, in the file's order, saying what the key
    is: an old spelling read under its new name, a RocketMQ setting rocketq has no use for,
    or a key nobody knows (a typo, most likely), with the nearest known key.

    RocketMQ itself skips keys it does not know without a word, so a misspelt key silently
    leaves its default in force (a 1 GiB CommitLog file on a small disk, say); the broker
    logs these lines at start so that such a file is noticed."""
    ours = rocketq_keys()
    lines = []
    for key in unknown:
        if key in RENAMED_KEYS:
            new = RENAMED_KEYS[key]
            lines.append(f"key {key} in {source} is the old spelling of {new} (RocketMQ 4.5.1 "
                         f"and older); read as {new}, unless {new} is given too: rename it")
        elif key in ROCKETMQ_KEYS:
            lines.append(f"key {key} in {source} is a RocketMQ setting not used by rocketq; "
                         "ignored")
        else:
            near = nearest_key(key, ours | ROCKETMQ_KEYS)
            if near is None:
                lines.append(f"unknown key {key} in {source}, ignored")
            else:
                unused = "" if near in ours else " (a RocketMQ setting not used by rocketq)"
                lines.append(f"unknown key {key} in {source}, ignored: did you mean "
                             f"{near}{unused}?")
    return lines


def nearest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key most like ``key``, compared without regard to case (``listenport``
    finds ``listenPort``), or None when none is close."""
    by_lower = {k.lower(): k for k in known}
    matches = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[matches[0]] if matches else None


#: Every key RocketMQ's broker reads from ``broker.conf``: the setters of the classes its
#: BrokerStartup fills from the file (BrokerConfig, BrokerIdentity, NettyServerConfig,
#: NettyClientConfig, MessageStoreConfig, AuthConfig) in RocketMQ 4.9.4 and 5.3.3. A key here
#: that rocketq does not read is reported as unused; any other unknown key as a likely typo.
ROCKETMQ_KEYS: frozenset[str] = frozenset("""
    accessMessageInMemoryHotRatio accessMessageInMemoryMaxRatio accountStatsEnable
    accountStatsPrintZeroValues ackMessageThreadPoolNums ackThreadPoolQueueCapacity
    aclCacheExpiredSecond aclCacheMaxNum aclCacheRefreshSecond aclEnable
    adminBrokerThreadPoolNums adminBrokerThreadPoolQueueCapacity allAckInSyncStateSet
    allowRecallWhenBrokerNotWriteable appendAckAsync appendCkAsync asyncLearner asyncSendEnable
    authConfigPath authenticationEnabled authenticationMetadataProvider authenticationProvider
    authenticationStrategy authenticationWhitelist authorizationEnabled
    authorizationMetadataProvider authorizationProvider authorizationStrategy
    authorizationWhitelist autoCreateSubscriptionGroup autoCreateTopicEnable
    autoDeleteUnusedStats autoMessageVersionOnTopicLen batchDispatchRequestThreadPoolNums
    bindAddress bitMapLengthConsumeQueueExt bottomMostCompressionTypeForConsumeQueueStore
    broadcastOffsetExpireMaxSecond broadcastOffsetExpireSecond brokerClusterName
    brokerConfigPath brokerElectionPriority brokerFastFailureEnable brokerHeartbeatInterval
    brokerIP1 brokerIP2 brokerId brokerName brokerNotActiveTimeoutMillis brokerPermission
    brokerRole brokerTopicEnable cgColdReadThreshold channelExpiredTimeout
    channelNotActiveInterval checkCRCOnRecover checkSyncStateSetPeriod cleanFileForciblyEnable
    cleanOfflineBrokerInterval cleanResourceInterval cleanRocksDBDirtyCQIntervalMin
    cleanSwapedMapInterval clearRetryTopicWhenDeleteTopic clientAsyncSemaphoreValue
    clientCallbackExecutorThreads clientChannelMaxIdleTimeSeconds clientCloseSocketIfTimeout
    clientManageThreadPoolNums clientManagerThreadPoolQueueCapacity clientOnewaySemaphoreValue
    clientPooledByteBufAllocatorEnable clientSocketRcvBufSize clientSocketSndBufSize
    clientWorkerThreads clusterName clusterTopicEnable coldCtrStrategyEnable
    coldDataFlowControlEnable coldDataScanEnable commercialBaseCount commercialBigCount
    commercialEnable commercialSizePerMsg commercialTimerCount commercialTransCount
    commitCommitLogLeastPages commitCommitLogThoroughInterval commitIntervalCommitLog
    commitLogForceSwapMapInterval commitLogSwapMapInterval commitLogSwapMapReserveFileNum
    compactionCqMappedFileSize compactionMappedFileSize compactionScheduleInternal
    compactionThreadNum compatibleWithOldNameSrv compressedRegister configBlackList
    configManagerVersion configName connectTimeoutMillis consumerFallbehindThreshold
    consumerManageThreadPoolNums consumerManagerThreadPoolQueueCapacity
    consumerOffsetUpdateVersionStep controllerAddr controllerHeartBeatTimeoutMills
    correctLogicMinOffsetForceInterval correctLogicMinOffsetSleepInterval dLegerGroup
    dLegerPeers dLegerSelfId dataReadAheadEnable debugLockEnable defaultMessageRequestMode
    defaultPopShareQueueNum defaultQueryMaxNum defaultTopicQueueNums
    delayOffsetUpdateVersionStep deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval
    deleteFileBatchMax deleteWhen destroyMapedFileIntervalForcibly disableCallbackExecutor
    disableConsumeIfConsumerReadSlowly disableNettyWorkerGroup disappearTimeAfterStart
    diskFallRecorded diskMaxUsedSpaceRatio diskSpaceCleanForciblyRatio
    diskSpaceWarningLevelRatio dispatchCqCacheNum dispatchCqThreads dispatchFromSenderThread
    duplicationEnable enableAsyncReput enableAutoInSyncReplicas enableBatchPush
    enableBroadcastOffsetStore enableBuildConsumeQueueConcurrently enableCalcFilterBitMap
    enableCleanExpiredOffset enableCompaction enableConsumeQueueExt enableControllerMode
    enableCreateSysGroup enableDLegerCommitLog enableDetailStat enableFastChannelEventProcess
    enableLmq enableLmqStats enableMixedMessageType enableMultiDispatch
    enableNetWorkFlowControl enableNotifyAfterPopOrderLockRelease
    enableNotifyBeforePopCalculateLag enablePopBatchAck enablePopBufferMerge enablePopLog
    enablePopMessageThreshold enablePropertyFilter enableReconnectForGoAway
    enableRegisterProducer enableRemoteEscape enableRetryTopicV2 enableRocksDBLog
    enableScheduleAsyncDeliver enableScheduleMessageStats enableShutdownGracefully
    enableSingleTopicRegister enableSkipLongAwaitingAck enableSlaveActingMaster
    enableSplitRegistration enabledAppendPropCRC endTransactionPoolQueueCapacity
    endTransactionThreadPoolNums estimateAccumulation expectConsumerNumUseFilter
    fastFailIfNoBufferInStorePool fetchControllerAddrByDnsLookup fetchNameSrvAddrByDnsLookup
    fetchNamesrvAddrByAddressServer fetchNamesrvAddrInterval fileReservedTime
    filterDataCleanTimeSpan filterServerNums filterSupportRetry flushCommitLogLeastPages
    flushCommitLogThoroughInterval flushCommitLogTimed flushConsumeQueueLeastPages
    flushConsumeQueueThoroughInterval flushConsumerOffsetHistoryInterval
    flushConsumerOffsetInterval flushDelayOffsetInterval flushDiskType flushIntervalCommitLog
    flushIntervalConsumeQueue flushLeastPagesWhenWarmMapedFile forceRegister forceVerifyPropCRC
    forwardTimeout globalColdReadThreshold haFlowControlEnable haHousekeepingInterval
    haListenPort haMasterAddress haMaxGapNotInSync haMaxTimeSlaveNotCatchup
    haSendHeartbeatInterval haSlaveFallbehindMax haTransferBatchSize heartbeatThreadPoolNums
    heartbeatThreadPoolQueueCapacity highSpeedMode inBrokerContainer inSyncReplicas
    initAuthenticationUser initPopOffsetByCheckMsgInMem innerClientAuthenticationCredentials
    isolateLogEnable listenPort litePullMessageEnable litePullMessageThreadPoolNums
    litePullThreadPoolQueueCapacity loadBalancePollNameServerInterval
    loadBalanceProcessorThreadPoolNums loadBalanceThreadPoolQueueCapacity lockInStrictMode
    logicQueueForceSwapMapInterval logicQueueSwapMapInterval logicQueueSwapMapReserveFileNum
    logicalDiskSpaceCleanForciblyThreshold longPollingEnable mappedFileSizeCommitLog
    mappedFileSizeConsumeQueue mappedFileSizeConsumeQueueExt mappedFileSizeTimerLog
    mappedFileSwapEnable mapperFileSizeBatchConsumeQueue maxAsyncPutMessageRequests
    maxBatchDeleteFilesNum maxChecksumRange maxConsumeQueueScan maxDelayTime
    maxErrorRateOfBloomFilter maxFilterMessageSize maxHaTransferByteInSecond maxHashSlotNum
    maxIndexNum maxLmqConsumeQueueNum maxMessageSize maxMsgsNumBatch maxOffsetMapSize
    maxPopPollingSize maxReconnectIntervalTimeSeconds maxRecoveryCommitlogFiles
    maxSlaveResendLength maxStatsIdleTimeInMinutes maxTopicLength
    maxTransferBytesOnMessageInDisk maxTransferBytesOnMessageInMemory
    maxTransferCountOnMessageInDisk maxTransferCountOnMessageInMemory memTableFlushIntervalMs
    messageDelayLevel messageIndexEnable messageIndexSafe messageStorePlugIn
    metricGrpcExporterIntervalInMills metricGrpcExporterTimeOutInMills
    metricLoggingExporterIntervalInMills metricsExporterType metricsGrpcExporterHeader
    metricsGrpcExporterTarget metricsInDelta metricsLabel metricsOtelCardinalityLimit
    metricsPromExporterHost metricsPromExporterPort migrateAuthFromV1Enabled minInSyncReplicas
    msgTraceTopicName namesrvAddr notifyConsumerIdsChangedEnable offsetCheckInSlave
    osPageCacheBusyTimeOutMills popCkMaxBufferSize popCkOffsetMaxQueueSize popCkStayBufferTime
    popCkStayBufferTimeOut popConsumerFSServiceInit popConsumerKVServiceEnable
    popConsumerKVServiceInit popConsumerKVServiceLog popFromRetryProbability
    popInflightMessageThreshold popLongPollingForceNotifyInterval popPollingMapSize
    popPollingSize popResponseReturnActualRetryTopic popReviveMaxAttemptTimes
    popReviveMaxReturnSizePerRead preferredLeaderId printChannelGroups printChannelGroupsMinNum
    processReplyMessageThreadPoolNums pullBatchMaxMessageCount pullMessageThreadPoolNums
    pullThreadPoolQueueCapacity putConsumeQueueDataByFileChannel putMessageFutureThreadPoolNums
    putMessageTimeout putMsgIndexHightWater putThreadPoolQueueCapacity
    queryMessageThreadPoolNums queryThreadPoolQueueCapacity readOnlyCommitLogStorePaths
    readUnCommitted realTimeNotifyConsumerChange realTimePersistRocksDBConfig
    recallMessageEnable recheckReputOffsetFromCq recoverConcurrently recoverThreadPoolNums
    redeleteHangedFileInterval regionId registerBrokerTimeoutMills registerNameServerPeriod
    rejectPullConsumerEnable rejectTransactionMessage replicasPerDiskPartition
    replyThreadPoolQueueCapacity retrieveMessageFromPopRetryTopicV1 reviveAckWaitMs
    reviveInterval reviveMaxSlow reviveQueueNum reviveScanTime rocketmqHome
    rocksdbCQDoubleWriteEnable rocksdbCompressionType rocksdbFlushWalFrequency
    rocksdbWalFileRollingThreshold sampleCountThreshold sampleSteps scanAvailableNameSrv
    scheduleAsyncDeliverMaxPendingLimit scheduleAsyncDeliverMaxResendNum2Blocked
    searchBcqByCacheEnable sendHeartbeatTimeoutMillis sendMessageThreadPoolNums
    sendThreadPoolQueueCapacity serverAsyncSemaphoreValue serverCallbackExecutorThreads
    serverChannelMaxIdleTimeSeconds serverLoadBalancerEnable serverNettyWorkerGroupEnable
    serverOnewaySemaphoreValue serverPooledByteBufAllocatorEnable serverSelectorThreads
    serverSocketBacklog serverSocketRcvBufSize serverSocketSndBufSize serverWorkerThreads
    shortPollingTimeMills shutdownWaitTimeSeconds skipPreOnline skipWhenCKRePutReachMaxTimes
    slaveReadEnable slaveTimeout socksProxyConfig spinLockCollisionRetreatOptimalDegree
    splitRegistrationSize startAcceptSendRequestTimeStamp statRocksDBCQIntervalSec
    statefulAuthenticationCacheExpiredSecond statefulAuthenticationCacheMaxNum
    statefulAuthorizationCacheExpiredSecond statefulAuthorizationCacheMaxNum
    storePathBrokerIdentity storePathCommitLog storePathDLedgerCommitLog storePathEpochFile
    storePathRootDir storeReplyMessageEnable storeType subscriptionExpiredTimeout
    syncBrokerMemberGroupPeriod syncBrokerMetadataPeriod syncControllerMetadataPeriod
    syncFlushTimeout syncFromLastFile syncMasterFlushOffsetWhenStartup
    timerColdDataCheckIntervalMs timerCongestNumEachSlot timerEnableCheckMetrics
    timerEnableRetryUntilSuccess timerFlushIntervalMs timerGetMessageThreadNum
    timerInterceptDelayLevel timerMaxDelaySec timerMetricSmallThreshold timerPrecisionMs
    timerProgressLogIntervalMs timerPutMessageThreadNum timerRollWindowSlot
    timerSkipUnknownError timerStopEnqueue timerWheelEnable topicQueueLockNum totalReplicas
    traceOn traceTopicEnable transactionCheckInterval transactionCheckMax
    transactionMetricFlushInterval transactionOpBatchInterval transactionOpMsgMaxSize
    transactionTimeOut transferMsgByHeap transientStorePoolEnable transientStorePoolSize
    travelCqFileNumWhenGetMessage updateNameServerAddrPeriod useABSLock useEpollNativeSelector
    usePIDColdCtrStrategy useReentrantLockWhenPutMessage useServerSideResetOffset
    useStaticSubscription useTLS userCacheExpiredSecond userCacheMaxNum userCacheRefreshSecond
    validateSystemTopicWhenUpdateTopic waitTimeMillsInAckQueue waitTimeMillsInAdminBrokerQueue
    waitTimeMillsInHeartbeatQueue waitTimeMillsInLitePullQueue waitTimeMillsInPullQueue
    waitTimeMillsInSendQueue waitTimeMillsInTransactionQueue wakeCommitWhenPutMessage
    wakeFlushWhenPutMessage warmMapedFileEnable writeBufferHighWaterMark
    writeBufferLowWaterMark
""".split())
