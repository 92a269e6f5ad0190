"""RocketMQ 5.x's gRPC protocol (``apache.rocketmq.v2.MessagingService``), served by a broker
beside its remoting port so that the official 5.x clients work against it unchanged.

- ``convert``: v2 messages to and from the broker's records (no I/O);
- ``service``: the MessagingService over the broker's parts (sends, POP, offsets,
  transactions, the ACL), assembled with ``routes`` (QueryRoute, QueryAssignment),
  ``telemetry`` (clients, their settings and streams, transaction checks) and ``receiving``
  (receive, ack, change of invisible time, dead-lettering), over ``common`` (the Status of
  answers, the readers of a request);
- ``server``: the gRPC port itself;
- ``proto``: the generated protobuf and gRPC modules.
"""

import os

# gRPC's C core writes its own log lines to stderr (a port it cannot bind, before our error
# says the same in one line); the broker's log says what matters. GRPC_VERBOSITY set by the
# user wins.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from .server import GrpcServer  # noqa: E402

__all__ = ["GrpcServer"]
