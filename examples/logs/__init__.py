"""Log collection and stream processing, the uses RocketMQ's brief names first: services
write log lines to a topic (with rocketq's client, and one with the C++ RocketMQ client), a
Structured Streaming job counts errors per service over event-time windows and writes alerts
to another topic exactly once, and a consumer prints them. ``python -m examples.logs`` runs
it all; see examples/logs/__main__.py."""
