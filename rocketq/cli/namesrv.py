"""``rocketq namesrv``: a NameServer, with its ACL and TLS, and optionally a controller node
in the same process (RocketMQ's enableControllerInNamesrv)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import _listening, _stop_on_signal
from .controller import _controller


def _namesrv_security(args: argparse.Namespace) -> dict[str, Any]:
    """A NameServer's ACL file and TLS settings from ``--acl-file`` and ``--tls-config``."""
    from ..broker.unheeded_security import refuse_unheeded
    from ..remoting import TlsSettings
    from ..store.config import read_properties

    tls = None
    if args.tls_config:
        values = dict(read_properties(args.tls_config))
        try:
            refuse_unheeded(values)
        except ValueError as exc:
            raise ValueError(f"{args.tls_config}: {exc}") from None
        tls = TlsSettings.from_config(values)
    return {"acl_file": args.acl_file, "tls": tls}


async def _run_namesrv(args: argparse.Namespace) -> None:
    from ..namesrv import NameServer
    from .metrics import _metrics_note, _serve_metrics, _stop_all

    stop = _stop_on_signal()
    ns = NameServer(args.host, args.port, **_namesrv_security(args))
    controller = None
    if args.enable_controller:  # RocketMQ's enableControllerInNamesrv
        # The controller first: its data directory's lock refuses a second node before
        # anything of this one listens.
        # It shares the NameServer's ACL file and TLS settings.
        controller = _controller(args.host, args.controller_port, args.controller_peers,
                                 args.controller_data_dir, args.etcd, args.acl_file,
                                 args.tls_config, args.controller_secret_file)
        with _listening("controller"):
            await controller.start()
    try:
        with _listening("NameServer"):
            await ns.start()
    except BaseException:
        await _stop_all(controller)
        raise
    try:
        metrics = await _serve_metrics(args.metrics_host or args.host, args.metrics_port,
                                       namesrv=ns, controller=controller)
    except BaseException:
        await _stop_all(controller, ns)
        raise
    print(f"NameServer listening on {ns.address}"
          + (f", controller on {controller.address}" if controller else "")
          + _metrics_note(metrics), flush=True)
    await stop.wait()
    await _stop_all(metrics, controller, ns)


def add_namesrv_parser(sub: argparse._SubParsersAction) -> None:
    """``rocketq namesrv``: a NameServer, and with ``--enable-controller`` a controller."""
    from .metrics import metrics_options

    p = sub.add_parser("namesrv", help="run a NameServer")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=9876, help="port to listen on")
    p.add_argument("--acl-file", metavar="PATH",
                   help="check requests against this plain_acl.yml (reloaded on change)")
    p.add_argument("--tls-config", metavar="FILE",
                   help="a properties file with tlsMode and RocketMQ's tls.server.* keys")
    p.add_argument("--enable-controller", action="store_true",
                   help="also run a controller node in this process "
                        "(RocketMQ's enableControllerInNamesrv)")
    p.add_argument("--controller-port", type=int, default=9878,
                   help="with --enable-controller: its request port (Raft uses the next)")
    p.add_argument("--controller-peers", help="with --enable-controller: every controller "
                                              "node's host:port, ','-separated")
    p.add_argument("--controller-data-dir", help="with --enable-controller: the Raft journal")
    p.add_argument("--etcd", metavar="URL", help="with --enable-controller: keep the state in "
                                                 "etcd instead of Raft")
    p.add_argument("--controller-secret-file", metavar="FILE",
                   help="with --enable-controller: a secret every controller node shares, "
                        "encrypting Raft between them (default with --acl-file: derived from "
                        "its first admin account)")
    metrics_options(p, "--host")
    p.set_defaults(func=_run_namesrv)
