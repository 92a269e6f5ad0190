"""Lets every Spark session find ``format("rocketq")`` without a ``register`` call: PySpark
looks for installed top-level modules named ``pyspark_*`` exposing ``DefaultSource``."""

from rocketq.spark import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
