"""rocketq: a message queue that does what Apache RocketMQ does, in Python."""

__version__ = "0.1.0"
