"""What importing a part of rocketq loads, and what ``rocketq`` and ``rocketq.aio`` export.

The top-level package imports the client only when one of its names is used, so the broker,
the store and the protocol modules load without the client (and the store without remoting).
Each check runs in a fresh interpreter, since this one has imported everything already.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import rocketq
import rocketq.aio
import rocketq.client

CLIENT_CLASSES = {"Admin", "Producer", "PullConsumer", "PushConsumer", "SimpleConsumer",
                  "TransactionProducer"}


def loaded_after(statement: str) -> list[str]:
    """The rocketq modules a fresh interpreter holds after running ``statement``."""
    code = (f"import sys\n{statement}\n"
            "print('\\n'.join(m for m in sys.modules if m.startswith('rocketq')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return out.split()


def test_protocol_and_store_load_no_client_broker_or_remoting():
    loaded = loaded_after("import rocketq.protocol.message, rocketq.store")
    assert "rocketq.store" in loaded
    assert not [m for m in loaded
                if m.startswith(("rocketq.client", "rocketq.broker", "rocketq.remoting"))]


def test_broker_loads_no_client():
    loaded = loaded_after("import rocketq.broker")
    assert "rocketq.broker" in loaded
    assert not [m for m in loaded if m.startswith("rocketq.client")]


def test_bare_package_loads_nothing_else():
    """Nothing but the module that holds the version, which every layer may import."""
    assert sorted(loaded_after("import rocketq; rocketq.__version__")) == [
        "rocketq", "rocketq._version"]


def test_names_load_on_first_use():
    loaded = loaded_after("from rocketq import Producer, Message")
    assert "rocketq.client.sync" in loaded


def test_every_exported_name_resolves():
    for module in (rocketq, rocketq.aio):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"
    assert set(rocketq.__all__) <= set(dir(rocketq))


def test_unknown_name_is_an_attribute_error():
    try:
        rocketq.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("rocketq.NoSuchName resolved")


def test_rocketq_exports_the_whole_client_api():
    assert set(rocketq.client.__all__) <= set(rocketq.__all__)


def test_aio_exports_the_same_names():
    assert set(rocketq.__all__) == set(rocketq.aio.__all__)


def test_aio_shares_everything_but_the_client_classes():
    for name in rocketq.__all__:
        sync, asyn = getattr(rocketq, name), getattr(rocketq.aio, name)
        if name in CLIENT_CLASSES:
            assert inspect.isclass(sync) and inspect.isclass(asyn) and sync is not asyn
            assert sync.__module__ in ("rocketq.client.sync", "rocketq.client.sync_push",
                                       "rocketq.client.sync_pull", "rocketq.client.sync_simple",
                                       "rocketq.client.sync_admin")
        else:
            assert sync is asyn, name
