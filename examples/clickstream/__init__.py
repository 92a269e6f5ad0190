"""A clickstream pipeline on rocketq and Spark Structured Streaming.

``generator`` publishes click events, ``pipeline`` aggregates them per page in event-time
windows and publishes the results, ``printer`` prints them; ``python -m examples.clickstream``
runs all three against a standalone broker it starts.
"""
