"""Messages delivered later: by delay level (``delay``, RocketMQ's ScheduleMessageService,
also the delay of retries sent back) and at an arbitrary time (``timer``, RocketMQ 5's timer
wheel). Both keep a message in a system topic with its real destination in its properties
and put it back to that topic when due; the send path routes messages here.

May import: protocol, store, broker.files.
"""
