"""The README's Spark example runs as written, against a real broker."""

from __future__ import annotations

import pytest

from rocketq import Message, Producer

from ..test_readme import python_blocks

pytestmark = pytest.mark.slow


def test_readme_spark_example_runs(spark, servers, capsys):
    block = next(b for b in python_blocks() if "PaidOrders" in b)
    assert 'NAMESRV = "127.0.0.1:9876"' in block
    servers.create_topic("Orders", 2)
    servers.create_topic("PaidOrders", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(12):
            producer.send(Message("Orders", b"order %d" % i, tags="paid" if i % 3 else "new"))
    code = block.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert "8 paid orders" in capsys.readouterr().out
    bodies = sorted(r.body for r in spark.read.format("rocketq")
                    .option("namesrv", servers.namesrv).option("topic", "PaidOrders").load()
                    .select("body").collect())
    assert bodies == sorted(b"ORDER %d" % i for i in range(12) if i % 3)
