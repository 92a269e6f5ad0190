"""The independent JavaScript client ``ali-ons`` (npm, announces itself as Java 4.x) against
``rocketq standalone``: send, then push-consume what it sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from rocketq.cli import main

from .clients import Standalone, ali_ons


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("node") or not shutil.which("npm"),
                    reason="Node.js and npm are needed")
def test_ali_ons_sends_and_consumes(tmp_path):
    workdir = tmp_path / "ons"
    ali_ons(workdir, "ons_smoke.js")
    server = Standalone(tmp_path / "data")
    try:
        # ali-ons asks for the topic's own route only (no TBW102 fallback): create it.
        assert main(["admin", "--namesrv", server.namesrv, "topic", "create", "OnsTopic",
                     "--queues", "4"]) == 0
        proc = subprocess.run(["node", "ons_smoke.js", server.namesrv], cwd=workdir,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "HOME": str(tmp_path)})
    finally:
        assert server.stop() == 0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    sent = [line.split() for line in proc.stdout.splitlines() if line.startswith("SENT")]
    assert len(sent) == 5 and all(s[1] == "SEND_OK" for s in sent)
    got = next(line for line in proc.stdout.splitlines() if line.startswith("GOT"))
    assert json.loads(got[4:]) == [f"ons {i}" for i in range(5)]
