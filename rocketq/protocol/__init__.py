"""Sans-IO pieces of RocketMQ's remoting protocol: bytes in, objects out, no sockets."""
