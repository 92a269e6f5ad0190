# ruff: noqa: E501
"""Send frames the C++ RocketMQ client (PyPI ``rocketmq`` 0.4.4, protocol version 63) sent to a
broker, kept exactly as sent (tcpdump on loopback): sync send with keys, tags and a user
property; a zlib-compressed 5000-byte body; oneway; a batch of messages (``batch=1``); a
transactional half message and its END_TRANSACTION; a delayed send (DELAY 2). The C++ client
ends every property string with the \x02 separator.
"""

from __future__ import annotations

from .java498_frames import Frame

FRAMES: tuple[Frame, ...] = (
    Frame('frames.jsonl 1', 0, b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"FZCc0eQGnXSAshhDivpgIu5Sdu4=","batch":"0","bornTimestamp":"1795358562618","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PG_TEST","properties":"KEYS\\u0001KEY1 KEY2\\u0002TAGS\\u0001TagA\\u0002UNIQ_KEY\\u00010100007F000066360000BAFBAA740100\\u0002WAIT\\u0001true\\u0002userprop\\u0001v1\\u0002","queueId":0,"reconsumeTimes":"0","sysFlag":0,"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP","opaque":1,"remark":"","version":63}\n',
          b'hello world'),
    Frame('frames.jsonl 2', 0, b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"LJceqirpJqzoPEhI/otHSaVnRHw=","batch":"0","bornTimestamp":"1795358562619","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PG_TEST","properties":"TAGS\\u0001TagB\\u0002UNIQ_KEY\\u00010100007F000066360000BBFBAA740200\\u0002WAIT\\u0001true\\u0002","queueId":1,"reconsumeTimes":"0","sysFlag":1,"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP","opaque":2,"remark":"","version":63}\n',
          b'x^\xed\xc11\x01\x00\x00\x00\xc2\xa0\xda\x8bo\n?\xa0\x00\x00\x00\x00\x80\xb7\x01\x14\x16(H'),
    Frame('frames.jsonl 3', 0, b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"6f5sj6uAv6IQrJssIbh+ZUa89KQ=","batch":"0","bornTimestamp":"1795358562620","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PG_TEST","properties":"TAGS\\u0001TagA\\u0002UNIQ_KEY\\u00010100007F000066360000BCFBAA740300\\u0002WAIT\\u0001true\\u0002","queueId":2,"reconsumeTimes":"0","sysFlag":0,"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP","opaque":3,"remark":"","version":63}\n',
          b'oneway'),
    Frame('frames.jsonl 4', 0, b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"7Eii6OH3FgC9/QLZODtOwONd5JU=","batch":"1","bornTimestamp":"1795358562621","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PG_TEST","properties":"WAIT\\u0001true\\u0002","queueId":3,"reconsumeTimes":"0","sysFlag":0,"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP","opaque":4,"remark":"","version":63}\n',
          b'\x00\x00\x00L\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02b1\x004UNIQ_KEY\x010100007F000066360000BDFBAA740400\x02WAIT\x01true\x02\x00\x00\x00L\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02b2\x004UNIQ_KEY\x010100007F000066360000BDFBAA740500\x02WAIT\x01true\x02'),
    Frame('frames2.jsonl 1', 0, b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"j8JvjRs31dzMVxOHk+JubslydYY=","batch":"0","bornTimestamp":"1795358780513","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PG_TX","properties":"PGROUP\\u0001PG_TX\\u0002TAGS\\u0001T\\u0002TRAN_MSG\\u0001true\\u0002UNIQ_KEY\\u00010100007F0000063B0000E14EAE740100\\u0002WAIT\\u0001true\\u0002","queueId":0,"reconsumeTimes":"0","sysFlag":4,"topic":"TopicTx","unitMode":"0"},"flag":0,"language":"CPP","opaque":1,"remark":"","version":63}\n',
          b'tx-commit'),
    Frame('frames2.jsonl 2', 0, b'{"code":37,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"KA2IE8wrLVCowhb+4oq3SctIsm4=","commitLogOffset":"0","commitOrRollback":"8","fromTransactionCheck":"0","msgId":"0100007F0000063B0000E14EAE740100","producerGroup":"PG_TX","tranStateTableOffset":"0","transactionId":""},"flag":0,"language":"CPP","opaque":2,"remark":"","version":63}\n',
          b''),
    Frame('frames3.jsonl 1', 0, b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"gpi9GugL88uDUUyczwafyc41YSk=","batch":"0","bornTimestamp":"1795358812694","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PG3","properties":"DELAY\\u00012\\u0002KEYS\\u0001K9\\u0002TAGS\\u0001X\\u0002UNIQ_KEY\\u00010100007F0000CFDD000096CCAE740100\\u0002WAIT\\u0001true\\u0002","queueId":0,"reconsumeTimes":"0","sysFlag":0,"topic":"TopicFail","unitMode":"0"},"flag":0,"language":"CPP","opaque":1,"remark":"","version":63}\n',
          b'will-fail'),
)
