"""The Cluster page: every broker with its role, epoch, version, TPS, today's counts, disk use,
whether it refuses sends and why, and how far it is behind, a chart of the TPS over the last
minutes, and a page per broker with its runtime figures and configuration. Brokers the
NameServer no longer lists, and today's counts of brokers gone, come from what the dashboard
saw (:mod:`.brokers`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from . import inputs
from .charts import line_chart
from .web import render, state


async def cluster_page(request: Request) -> Response:
    """GET /cluster."""
    dash = state(request)
    book = dash.sampler.brokers
    # The NameServer's list, with the brokers seen before that it no longer lists.
    brokers = sorted(book.update(await dash.admin.cluster()),
                     key=lambda b: (b.cluster, b.broker_name, b.broker_id, b.address))
    produced, consumed = book.today()
    chart = line_chart(dash.sampler.tps_series(), title="Produce (put) and consume (get) TPS",
                       unit="messages per second")
    return render(request, "cluster.html", {
        "brokers": brokers, "chart": chart, "interval": dash.sampler.interval,
        "produced_today": produced, "consumed_today": consumed})


async def broker_page(request: Request) -> Response:
    """GET /brokers/{address}: a broker's runtime figures and configuration."""
    dash = state(request)
    address = request.path_params["address"]
    brokers = [b for b in dash.sampler.brokers.update(await dash.admin.cluster())
               if b.address == address]
    if not brokers:
        raise inputs.BadInput(f"no broker of the cluster has the address {address!r}", 404)
    # A broker that does not answer has no configuration to show; its page says why.
    config = {} if brokers[0].error else await dash.admin.broker_config(address)
    return render(request, "broker.html", {"broker": brokers[0],
                                           "config": sorted(dict(config).items())})
