"""The README's Python examples run as written (the quick start against a real broker)."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_examples():
    assert len(python_blocks()) >= 2


def test_quick_start_runs_against_a_real_broker(servers, capsys):
    block = next(b for b in python_blocks() if "PushConsumer" in b)
    assert 'NAMESRV = "127.0.0.1:9876"' in block
    code = block.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "SEND_OK Orders@broker-a:" in out
    assert "Orders paid ['order-17'] b'{\"id\": 17}'" in out


def test_store_example_runs(capsys):
    block = next(b for b in python_blocks() if "MessageStore" in b)
    exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "PUT_OK 0" in out
    assert "0 paid b'{\"id\": 17}'" in out
    assert "['order-17']" in out


def test_message_types_example_runs(servers, capsys):
    block = next(b for b in python_blocks() if "TransactionProducer" in b)
    code = block.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "[b'created', b'paid', b'shipped']" in out
    assert "COMMIT" in out


def test_auto_batch_example_runs(servers, capsys):
    block = next(b for b in python_blocks() if "auto_batch=True" in b)
    code = "\n".join(line[2:] for line in block.splitlines())  # indented in a list item
    code = code.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == "1000 sent, SEND_OK\n"


def test_security_example_runs_against_an_acl_and_tls_broker(tmp_path, capsys):
    """The README's plain_acl.yml and client example, on a NameServer and broker that check
    signatures and enforce TLS."""
    from rocketq.remoting import TlsSettings

    from .certs import make_pki
    from .servers import ServerThread

    text = README.read_text(encoding="utf-8")
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    pki = make_pki(tmp_path / "pki")
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv(acl_file=str(acl), tls=TlsSettings(
            "enforcing", pki.server_cert, pki.server_key))
        st.start_broker(aclEnable="true", aclFile=str(acl), tlsMode="enforcing", **{
            "tls.server.certPath": pki.server_cert, "tls.server.keyPath": pki.server_key,
            "tls.client.trustCertPath": pki.ca})
        block = next(b for b in python_blocks() if "credentials=" in b)
        code = block.replace('"127.0.0.1:9876"', repr(st.namesrv)).replace(
            '"ca.crt"', repr(pki.ca))
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    finally:
        st.stop()
    assert capsys.readouterr().out == "SEND_OK\n"
