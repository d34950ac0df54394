"""The console planner offers the AMD Instinct GPUs of the catalog and plans them on Infinity Fabric."""

from __future__ import annotations

from meshdeck.core.cluster import LinkClass
from meshdeck.services.catalog import load_gpu_catalog
from meshdeck.ui.views.planner.form import PlannerForm


def test_the_typed_in_gpu_list_offers_mi300x_and_plans_it_on_infinity_fabric(qtbot) -> None:
    form = PlannerForm()
    qtbot.addWidget(form)
    form.set_gpu_catalog(load_gpu_catalog())
    offered = [form.gpu.itemText(i) for i in range(form.gpu.count())]
    assert {"MI300X", "MI325X", "MI355X"} <= set(offered)
    form.typed.setChecked(True)
    form.gpu.setCurrentText("MI300X")
    request, detected = form.inputs().to_request()
    assert detected is None
    cluster = request.cluster
    assert (cluster.gpu.name, cluster.intra_node_link) == ("MI300X", "xgmi")
    assert cluster.intra_link(0, 1) is LinkClass.INFINITY_FABRIC
