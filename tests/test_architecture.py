"""docs/ARCHITECTURE.md stays true: the files it names exist, and the layers import only
downwards as its arrows say."""

from __future__ import annotations

import ast
import pathlib
import re

from .test_import_cycles import all_modules, imports_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rocketq"

#: Top-level modules that belong to the package itself, importable from every layer:
#: ``errors`` holds ClientError, the root of the remoting layer's and the client's errors;
#: ``dirlock`` the data-directory lock that the store and the controller both take; ``asgi``
#: the HTTP server the dashboard and the metrics port share; ``_version`` the version string
#: that clients, the broker and the command line report.
TOP_LEVEL = {"errors", "dirlock", "asgi", "_version"}

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
    """The top-level parts of rocketq that ``path`` imports, its relative imports resolved
    from where it sits (``..instance`` in ``client/admin/`` is ``client.instance``)."""
    tree = ast.parse(path.read_text())
    package = list(path.relative_to(PACKAGE).parent.parts)
    layers = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                if node.level - 1 > len(package):
                    continue
                target = package[:len(package) - (node.level - 1)]
                target += node.module.split(".") if node.module else []
                if target:
                    layers.add(target[0])
            elif node.module and node.module.startswith("rocketq."):
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


#: The last paragraph of a broker room's docstring: what of rocketq the room may import.
MAY_IMPORT = re.compile(r"May import: ([a-z_]+(?:\.[a-z_]+)*(?:, [a-z_]+(?:\.[a-z_]+)*)*)\.")


def rooms() -> list[pathlib.Path]:
    """The sub-packages of ``rocketq/broker/`` (each a room for one of RocketMQ's concepts),
    nested ones included."""
    return sorted(init.parent for init in (PACKAGE / "broker").rglob("__init__.py")
                  if init.parent != PACKAGE / "broker")


def may_import(room: pathlib.Path) -> list[str] | None:
    """The names the last paragraph of ``room``'s docstring lists (``May import: protocol,
    store, broker.topics.``, dotted from ``rocketq``; it may wrap), or None without one."""
    doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text())) or ""
    last = " ".join(doc.strip().split("\n\n")[-1].split())
    match = MAY_IMPORT.fullmatch(last)
    return match.group(1).split(", ") if match else None


def test_each_broker_room_imports_only_what_its_docstring_says():
    """Every module of a broker sub-package imports of rocketq only its own room, the
    top-level modules every layer may use, and what the room's ``May import:`` line names
    (a name allows what is under it: ``store`` allows ``store.config``). A room without the
    line, or naming what does not exist, fails; two rooms that may import each other fail,
    since then neither is below the other."""
    modules = all_modules()
    known = {name.removeprefix("rocketq.") for name in modules}
    wrong, allowed_by_room = [], {}
    for room in rooms():
        name = ".".join(room.relative_to(PACKAGE).parts)
        allowed = may_import(room)
        if allowed is None:
            wrong.append(f"{name}: its docstring's last paragraph is not 'May import: a, b.'")
            continue
        wrong += [f"{name}: 'May import' names {a}, which is no module or package of rocketq"
                  for a in allowed if a not in known]
        allowed_by_room[name] = allowed
        permitted = [*allowed, name, *TOP_LEVEL]
        for path in sorted(room.rglob("*.py")):
            module = f"rocketq.{'.'.join(path.relative_to(PACKAGE).with_suffix('').parts)}"
            module = module.removesuffix(".__init__")
            for target in sorted(imports_of(module, path, modules)):
                target = target.removeprefix("rocketq.")
                if target == "rocketq" or not any(
                        target == a or target.startswith(a + ".") for a in permitted):
                    wrong.append(f"{path.relative_to(ROOT)} imports {target}, which {name}'s "
                                 "'May import' does not list")
    for name, allowed in allowed_by_room.items():
        for other, theirs in allowed_by_room.items():
            if name < other and any(a == other or a.startswith(other + ".") for a in allowed) \
                    and any(a == name or a.startswith(name + ".") for a in theirs):
                wrong.append(f"{name} and {other} may import each other: one must be below")
    assert not wrong, "\n".join(wrong)


def test_the_room_check_reads_may_import_lines(tmp_path):
    room = tmp_path / "pop"
    room.mkdir()
    (room / "__init__.py").write_text(
        '"""POP.\n\nMay import: protocol, store,\nbroker.topics.\n"""\n')
    assert may_import(room) == ["protocol", "store", "broker.topics"]
    (room / "__init__.py").write_text('"""POP, with no line."""\n')
    assert may_import(room) is None


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


#: The longest a hand-written module may be: past it, a module holds more than one concept.
MAX_MODULE_LINES = 600
#: Generated code, exempt (grpcio-tools writes it from the .proto files).
GENERATED = (PACKAGE / "grpc" / "proto",)


def test_no_hand_written_module_is_over_600_lines():
    long = []
    for root in (PACKAGE, ROOT / "pyspark_rocketq", ROOT / "benchmarks", ROOT / "examples"):
        for path in sorted(root.rglob("*.py")):
            if any(path.is_relative_to(generated) for generated in GENERATED):
                continue
            lines = len(path.read_text().splitlines())
            if lines > MAX_MODULE_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not long, "split these along the seams of their concepts:\n" + "\n".join(long)
