"""The drivers of the official 5.x clients leave no temporary HOME behind, whether the run
succeeds, is refused, or times out; a refused run's error still quotes the client's log."""

from __future__ import annotations

import pathlib
import sys
import tempfile

import pytest

from .grpc_clients import DriverError, _home, _run, client_env

DRIVER = """
import json, os, sys, time
os.makedirs(os.path.expanduser("~/logs"), exist_ok=True)
with open(os.path.expanduser("~/logs/client.log"), "w") as log:
    log.write("connection refused by the server\\n")
if sys.argv[1] == "slow":
    time.sleep(30)
print(json.dumps({"ok": sys.argv[1] == "ok", "error": "refused"}))
"""


@pytest.mark.parametrize("outcome", ["ok", "refused", "unchecked", "slow"])
def test_no_temporary_home_is_left(tmp_path, outcome):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    home, keep = _home(None)
    argv = [sys.executable, str(script), "unchecked" if outcome == "unchecked" else outcome]
    run = lambda: _run(argv, client_env(home), home, keep, "logs/client.log",  # noqa: E731
                       timeout=3 if outcome == "slow" else 30, check=outcome != "unchecked")
    if outcome in ("refused", "slow"):
        with pytest.raises(DriverError) as exc:
            run()
        assert "connection refused by the server" in str(exc.value)  # the log, quoted
    else:
        assert run()["ok"] is (outcome == "ok")
    assert home.parent == pathlib.Path(tempfile.gettempdir()) and not home.exists()
