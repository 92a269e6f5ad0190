"""The generated protobuf and gRPC modules of ``apache.rocketmq.v2`` (RocketMQ 5.x's
MessagingService), from the ``.proto`` files of apache/rocketmq-apis under ``apache/`` here
(Apache-2.0, see LICENSE and NOTICE in this folder). ``make grpc-proto`` makes them again.

They register the package ``apache.rocketmq.v2`` in protobuf's default pool, as the official
5.x Python client's own copy does: the two cannot be imported into one process."""
