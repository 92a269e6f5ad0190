"""docs/ARCHITECTURE.md stays true: the files it names exist, and the layers import only
downwards as its arrows say."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rocketq"

#: Top-level modules that belong to the package itself, importable from every layer:
#: ``errors`` holds ClientError, the root of the remoting layer's and the client's errors;
#: ``dirlock`` the data-directory lock that the store and the controller both take.
TOP_LEVEL = {"errors", "dirlock"}

#: What each layer may import of rocketq (besides itself and the top-level package).
ALLOWED = {
    "protocol": set(),
    "store": {"protocol"},
    "remoting": {"protocol"},
    "namesrv": {"protocol", "remoting", "acl"},
    "acl": {"protocol"},
    "client": {"protocol", "remoting", "acl"},
    "ha": {"protocol", "store", "remoting"},
    "broker": {"protocol", "remoting", "store", "ha", "acl"},
    "controller": {"protocol", "remoting"},
    # The 5.x gRPC endpoint sits beside the broker and calls its parts.
    "grpc": {"protocol", "remoting", "store", "broker", "acl"},
    # Prometheus exporters read the counters of every kind of server process.
    "metrics": {"protocol", "remoting", "store", "broker", "namesrv", "controller", "ha",
                "acl"},
    # The dashboard talks to a cluster through the admin client only.
    "dashboard": {"protocol", "remoting", "client", "acl"},
}


def imported_layers(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    layers = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 2 and node.module:
                layers.add(node.module.split(".")[0])
            elif node.level == 0 and node.module and node.module.startswith("rocketq."):
                layers.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rocketq."):
                    layers.add(alias.name.split(".")[1])
    return layers


def test_layers_import_only_downwards():
    wrong = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            extra = imported_layers(path) - allowed - {layer} - TOP_LEVEL
            if extra:
                wrong.append(f"{path.relative_to(ROOT)} imports {sorted(extra)}")
    assert not wrong, "\n".join(wrong)


def test_every_file_the_map_names_exists():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)", text))
    assert len(named) > 30
    missing = [name for name in sorted(named)
               if not (PACKAGE / name).exists() and not (ROOT / name).exists()]
    assert not missing, missing


def test_every_module_of_the_core_layers_is_on_the_map():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    unmapped = []
    for layer in ("store", "broker", "client", "ha"):
        for path in sorted((PACKAGE / layer).glob("*.py")):
            if path.name in ("__init__.py", "errors.py", "config.py", "files.py"):
                continue
            if path.name not in text:
                unmapped.append(f"{layer}/{path.name}")
    assert not unmapped, unmapped
