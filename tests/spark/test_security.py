"""The Spark data source against a NameServer and broker that check ACL signatures and
enforce TLS: the options accessKey, secretKey and tlsTrustCertPath reach every connection
the connector makes (planning, reads, the sink's sends and its commit)."""

from __future__ import annotations

import pytest

from rocketq import Message, Producer
from rocketq.client.admin import AsyncAdmin

from ..certs import make_pki

pytest.importorskip("pyspark")
pytestmark = pytest.mark.slow

ACL = """
globalWhiteRemoteAddresses:
accounts:
  - accessKey: rocketq-admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: spark-user
    secretKey: spark-secret-1
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Secure=PUB|SUB
      - SecureOut=PUB|SUB
    groupPerms:
      - rocketq-spark=SUB
      - rocketq-spark-writer=PUB|SUB
      - spark-stream=SUB
"""
USER = ("spark-user", "spark-secret-1")


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A NameServer and broker with ACL and TLS enforced, topics Secure (20 messages) and
    SecureOut."""
    import ssl

    from rocketq.remoting import TlsSettings

    from ..servers import ServerThread

    root = tmp_path_factory.mktemp("secure")
    pki = make_pki(root / "pki")
    acl = root / "plain_acl.yml"
    acl.write_text(ACL)
    st = ServerThread(root)
    try:
        st.start_namesrv(acl_file=str(acl), tls=TlsSettings(
            "enforcing", pki.server_cert, pki.server_key))
        st.start_broker(aclEnable="true", aclFile=str(acl), tlsMode="enforcing", **{
            "tls.server.certPath": pki.server_cert, "tls.server.keyPath": pki.server_key,
            "tls.client.trustCertPath": pki.ca})
        ctx = ssl.create_default_context(cafile=pki.ca)

        async def topics() -> None:
            async with AsyncAdmin(st.namesrv, credentials=("rocketq-admin", "admin-secret-1"),
                                  tls=ctx) as admin:
                for topic in ("Secure", "SecureOut"):
                    await admin.create_topic(topic, queues=2)

        st.call(topics())
        with Producer("rocketq-spark-writer", namesrv=st.namesrv, credentials=USER,
                      tls=ctx) as producer:
            for i in range(20):
                producer.send(Message("Secure", b"s%d" % i))
        yield st.namesrv, pki.ca, ctx
    finally:
        st.stop()


def options(namesrv: str, ca: str, topic: str) -> dict[str, str]:
    return {"namesrv": namesrv, "topic": topic, "accessKey": USER[0], "secretKey": USER[1],
            "tlsTrustCertPath": ca}


def test_batch_read_and_exactly_once_write_sign_and_encrypt(spark, secure):
    namesrv, ca, _ctx = secure
    rows = spark.read.format("rocketq").options(**options(namesrv, ca, "Secure")).load()
    bodies = sorted(bytes(r.body) for r in rows.select("body").collect())
    assert bodies == sorted(b"s%d" % i for i in range(20))
    (rows.selectExpr("body").write.format("rocketq")
     .options(**options(namesrv, ca, "SecureOut")).option("exactlyOnce", "true")
     .mode("append").save())
    back = spark.read.format("rocketq").options(**options(namesrv, ca, "SecureOut")).load()
    assert sorted(bytes(r.body) for r in back.select("body").collect()) == bodies


def test_a_stream_reads_with_the_same_options(spark, secure, tmp_path):
    namesrv, ca, _ctx = secure
    got: list[bytes] = []
    query = (spark.readStream.format("rocketq").options(**options(namesrv, ca, "Secure"))
             .option("startingOffsets", "earliest").option("consumerGroup", "spark-stream")
             .load().writeStream
             .foreachBatch(lambda df, _id: got.extend(bytes(r.body) for r in df.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert sorted(got) == sorted(b"s%d" % i for i in range(20))


def test_without_the_options_the_broker_is_not_reached(spark, secure):
    namesrv, ca, _ctx = secure
    plain = {"namesrv": namesrv, "topic": "Secure"}
    with pytest.raises(Exception):  # noqa: B017 - a TLS-only NameServer drops plain clients
        spark.read.format("rocketq").options(**plain).load().collect()
    unsigned = {**plain, "tlsTrustCertPath": ca}
    with pytest.raises(Exception, match="(?i)acl|access|signature|denied|permission"):
        spark.read.format("rocketq").options(**unsigned).load().collect()


def test_credentials_go_together(spark, secure):
    namesrv, ca, _ctx = secure
    with pytest.raises(Exception, match="accessKey and secretKey go together"):
        (spark.read.format("rocketq").options(namesrv=namesrv, topic="Secure",
                                              accessKey="spark-user").load().collect())
