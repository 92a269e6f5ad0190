"""A controller node as the command line describes it (``rocketq controller``, and the one a
NameServer hosts with ``--enable-controller``): its consensus engine, and the same security
as the other ports.

- ``--acl-file``: every request is checked against this ``plain_acl.yml`` (reloaded when it
  changes); joining a group, heartbeats, elections and SyncStateSet changes need an admin
  account (``acl.CONTROLLER_ADMIN_CODES``), reads any signed account. The role notices the
  controller pushes to brokers are signed with the file's first admin account.
- ``--tls-config``: a properties file with ``tlsMode`` and RocketMQ's ``tls.server.*`` keys
  for the port; its ``tls.enable``/``tls.client.*`` keys (or ``tlsMode=enforcing``) make the
  notices to brokers TLS too.
- ``--secret-file``: a file whose content every controller node shares: Raft traffic between
  them (port + 1) is encrypted and authenticated with it (pysyncobj's ``password``). Without
  it, a controller with an ACL derives the secret from the file's first admin account, so
  nodes with the same ACL file agree on it. etcd keeps its own security.

It also holds the ``rocketq controller`` command: its parser and its run function.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from typing import Any

from .common import _listening, _stop_on_signal

log = logging.getLogger("rocketq")


@dataclass
class ControllerSecurity:
    """What a controller node gets from its security options."""

    #: Keyword arguments of ``Controller``: acl, tls, signer, ssl.
    options: dict[str, Any] = field(default_factory=dict)
    #: The Raft password (None: Raft traffic in the clear).
    raft_password: str | None = None
    #: Where the password comes from, for the log.
    raft_password_from: str = ""


def controller_security(acl_file: str | None, tls_config: str | None,
                        secret_file: str | None) -> ControllerSecurity:
    """A controller's ACL, TLS settings, signer and Raft password from its options (see the
    module docstring). Raises ValueError (AclConfigError, TlsConfigError) on bad files."""
    from ..acl import CONTROLLER_ADMIN_CODES, AccessControl, Credentials
    from ..broker.unheeded_security import refuse_unheeded
    from ..remoting.tls import TlsSettings, outgoing_context
    from ..store.config import read_properties

    out = ControllerSecurity()
    if tls_config:
        values = dict(read_properties(tls_config))
        try:
            refuse_unheeded(values)
        except ValueError as exc:
            raise ValueError(f"{tls_config}: {exc}") from None
        tls = TlsSettings.from_config(values)
        if tls.enabled:
            _ = tls.server_context  # a certificate that cannot be loaded fails here
        out.options["tls"] = tls
        out.options["ssl"] = outgoing_context(values, tls.mode)
    admin = None
    if acl_file:
        acl = AccessControl(acl_file, CONTROLLER_ADMIN_CODES)
        out.options["acl"] = acl
        account = acl.acl.first_admin()
        if account is not None:
            admin = Credentials(account.access_key, account.secret_key)
            out.options["signer"] = admin.sign
        else:
            log.warning("the controller's ACL file %s has no admin account: no broker can "
                        "join a group, and role notices go unsigned", acl_file)
    if secret_file:
        try:
            with open(secret_file, encoding="utf-8") as fh:
                secret = fh.read().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the controller secret file: {exc}") from None
        if not secret:
            raise ValueError(f"the controller secret file {secret_file} is empty")
        out.raft_password, out.raft_password_from = secret, f"the secret in {secret_file}"
    elif admin is not None:
        out.raft_password = f"{admin.access_key}:{admin.secret_key}"
        out.raft_password_from = f"the ACL's admin account {admin.access_key}"
    return out


def build_controller(host: str, port: int, peers: str | None, data_dir: str | None,
                     etcd: str | None, security: ControllerSecurity | None = None) -> Any:
    """A controller node on Raft among ``peers`` (this node alone by default) or on etcd,
    with ``security``'s ACL, TLS and Raft password."""
    from ..controller import Controller, EtcdEngine, RaftEngine

    security = security or ControllerSecurity()
    addr = f"{host}:{port}"
    members = [p.strip() for p in (peers or "").split(",") if p.strip()]
    if etcd:
        return Controller(EtcdEngine(addr, etcd), host, port, **security.options)
    if members and addr not in members:
        raise ValueError(f"the controller peers must list this node's own address {addr}")
    if security.raft_password:
        log.info("controller Raft traffic is encrypted with %s", security.raft_password_from)
    return Controller(RaftEngine(addr, members or [addr], data_dir,
                                 password=security.raft_password), host, port,
                      **security.options)


def _controller(host: str, port: int, peers: str | None, data_dir: str | None,
                etcd: str | None, acl_file: str | None = None, tls_config: str | None = None,
                secret_file: str | None = None) -> Any:
    """A controller node on Raft among ``peers`` (this node alone by default) or on etcd,
    with the ACL, TLS and Raft secret of its options (see the module docstring)."""
    return build_controller(host, port, peers, data_dir, etcd,
                            controller_security(acl_file, tls_config, secret_file))


async def _run_controller(args: argparse.Namespace) -> None:
    from .metrics import _metrics_note, _serve_metrics, _stop_all

    stop = _stop_on_signal()
    controller = _controller(args.host, args.port, args.peers, args.data_dir, args.etcd,
                             args.acl_file, args.tls_config, args.secret_file)
    with _listening("controller"):
        await controller.start()
    try:
        metrics = await _serve_metrics(args.metrics_host or args.host, args.metrics_port,
                                       controller=controller)
    except BaseException:
        await controller.stop()
        raise
    how = f"etcd {args.etcd}" if args.etcd else f"Raft peers: {args.peers or 'none'}"
    print(f"Controller listening on {controller.address} ({how}){_metrics_note(metrics)}",
          flush=True)
    await stop.wait()
    await _stop_all(metrics, controller)


def add_controller_parser(sub: argparse._SubParsersAction) -> None:
    """``rocketq controller``: a controller node alone, on Raft or etcd."""
    from .metrics import metrics_options

    p = sub.add_parser("controller", help="run a controller node (automatic failover)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=9878,
                   help="request port (default 9878); Raft uses the next one")
    p.add_argument("--peers", help="every controller node's host:port, ','-separated, this "
                                   "one included (default: this node alone)")
    p.add_argument("--data-dir", help="keep the Raft journal here (default: in memory)")
    p.add_argument("--etcd", metavar="URL",
                   help="keep the state in etcd (e.g. http://127.0.0.1:2379) instead of Raft "
                        "among the controllers")
    p.add_argument("--acl-file", metavar="PATH",
                   help="check requests against this plain_acl.yml (brokers sign theirs with "
                        "an admin account; reloaded on change)")
    p.add_argument("--tls-config", metavar="FILE",
                   help="a properties file with tlsMode and RocketMQ's tls.server.* keys")
    p.add_argument("--secret-file", metavar="FILE",
                   help="a secret every controller node shares, encrypting Raft between them "
                        "(default with --acl-file: derived from its first admin account)")
    metrics_options(p, "--host")
    p.set_defaults(func=_run_controller)
