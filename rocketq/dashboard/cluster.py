"""The Cluster page: every broker with its role, epoch, version, TPS, today's counts, disk use
and how far it is behind, a chart of the TPS over the last minutes, and a page per broker
with its runtime figures and configuration."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from . import inputs
from .charts import line_chart
from .web import render, state


async def cluster_page(request: Request) -> Response:
    """GET /cluster."""
    dash = state(request)
    brokers = sorted(await dash.admin.cluster(),
                     key=lambda b: (b.cluster, b.broker_name, b.broker_id))
    chart = line_chart(dash.sampler.tps_series(), title="Produce (put) and consume (get) TPS",
                       unit="messages per second")
    return render(request, "cluster.html", {
        "brokers": brokers, "chart": chart, "interval": dash.sampler.interval})


async def broker_page(request: Request) -> Response:
    """GET /brokers/{address}: a broker's runtime figures and configuration."""
    dash = state(request)
    address = request.path_params["address"]
    brokers = [b for b in await dash.admin.cluster() if b.address == address]
    if not brokers:
        raise inputs.BadInput(f"no broker of the cluster has the address {address!r}", 404)
    config = await dash.admin.broker_config(address)
    return render(request, "broker.html", {"broker": brokers[0],
                                           "config": sorted(dict(config).items())})
