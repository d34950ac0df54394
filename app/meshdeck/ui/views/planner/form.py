"""The planner's inputs: the cluster (detected hosts, or typed in) and the serving settings.

Detected hosts come first: every connected host with GPUs is listed with what its agent reported,
and the ones ticked (in list order, the first is the head) form the cluster. The vLLM release whose
memory accounting the plan follows is chosen as `meshdeck plan --vllm-version` chooses it: "from the
hosts" (simulated agents model 0.11; real hosts do not report theirs, so the newest modelled), one of
the modelled ranges, or the newest; the plan's accounting note says which and why, in the CLI's words. The form only collects
choices; `PlannerInputs` is turned into a `PlanRequest` off the GUI thread (model cards and the GPU
catalog are files), where bad values become InputErrors naming the field, shown under the form.

The KV cache dtypes a DeepSeek-V4 model refuses on the chosen GPU (its attention backend's rule, core.v4_kv:
FlashMLA on Hopper / Blackwell stores fp8_ds_mla, so bfloat16 is refused) are greyed out, each saying why;
a refused choice the form already holds is kept, and planning then says the same under the form.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s, default_intra_node_link
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.kv_cache import KV_CACHE_DTYPES
from meshdeck.core.plan_request import GOALS, PlanRequest, parse_vllm_version
from meshdeck.core.serving import DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS, MAX_WORKLOAD_TOKENS, Workload
from meshdeck.core.v4_kv import KV_CACHE_DTYPES as V4_KV_CACHE_DTYPES
from meshdeck.core.v4_kv import resolve_kv_cache_dtype as resolve_v4_kv_cache_dtype
from meshdeck.core.v4_layout import v4_backend
from meshdeck.core.vllm_releases import NEWEST_MODELLED, VLLM_ACCOUNTINGS, Release, release_text
from meshdeck.core.weights import WEIGHTS_DTYPES
from meshdeck.services.catalog import bundled_model_names, detected_gpu, load_gpu_catalog, load_model
from meshdeck.services.cluster import DetectedCluster, cluster_from_inventories, inventory_facts
from meshdeck.services.inventory import Inventory, describe_gpus
from meshdeck.services.vllm_release import release_for_hosts

FROM_HOSTS = "hosts"  # the vLLM release item that follows the hosts (the others hold a release, "0.13")
NEWEST = "newest"  # the item that follows the newest modelled release, whichever it is
RELEASE_PICKER = "the planner's vLLM release"  # what the accounting note says picks another


@dataclass(frozen=True)
class PlannerInputs:
    """Everything the form holds; `to_request()` does the file reads and validation (worker thread)."""

    use_detected: bool
    hosts: tuple[str, ...]
    inventories: Mapping[str, Inventory]
    gpu_name: str
    nodes: int
    gpus_per_node: int
    model: str
    engine: str
    goal: str
    weights_dtype: str | None
    kv_cache_dtype: str
    max_model_len: int | None
    gpu_memory_utilization: float
    max_num_seqs: int | None
    mtp: bool
    input_tokens: int = DEFAULT_INPUT_TOKENS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    concurrency: int | None = None  # None: each layout at what it holds
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    disaggregated: bool = False
    speed: str = "kernels"  # services.planning: "kernels" (measured tables where they reach) or "roofline"
    vllm_release: Release | None = None  # None: from the hosts (the newest modelled for a typed-in cluster)

    def release(self) -> tuple[Release, str]:
        """The vLLM release the plan follows and why, as the accounting note says it."""
        if self.vllm_release is not None:
            return self.vllm_release, (
                "the newest modelled" if self.vllm_release == NEWEST_MODELLED else "as chosen in the planner"
            )
        if self.use_detected:
            return release_for_hosts(self.inventories, self.hosts)
        return NEWEST_MODELLED, "the newest modelled (a typed-in cluster has no hosts to ask)"

    @property
    def workload(self) -> Workload:
        stated = (self.input_tokens, self.output_tokens) != (DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS) or any(
            value is not None for value in (self.concurrency, self.ttft_ms, self.tpot_ms)
        )
        return Workload(
            self.input_tokens, self.output_tokens, self.concurrency, self.ttft_ms, self.tpot_ms, stated=stated
        )

    def to_request(self) -> tuple[PlanRequest, DetectedCluster | None]:
        detected = None
        catalog = load_gpu_catalog()
        release, why = self.release()
        if self.use_detected:
            detected = cluster_from_inventories(self.inventories, self.hosts, catalog)
            cluster = detected.cluster
        else:
            gpu = next(g for g in catalog if g.name == self.gpu_name)
            link = default_intra_node_link(gpu)
            cluster = ClusterSpec(
                nodes=self.nodes,
                gpus_per_node=self.gpus_per_node,
                gpu=gpu,
                intra_node_link=link,
                inter_node_bytes_per_s=default_inter_node_bytes_per_s(self.gpus_per_node, link),
            )
        request = PlanRequest(
            model=load_model(self.model),
            cluster=cluster,
            engine=self.engine,
            goal=self.goal,
            weights_dtype=self.weights_dtype,
            kv_cache_dtype=self.kv_cache_dtype,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs,
            mtp=self.mtp,
            vllm_version=release,
            vllm_version_why=why,
            vllm_version_picker=RELEASE_PICKER,
            workload=self.workload,
            disaggregated=self.disaggregated,
            hosts_without_rdma=detected.hosts_without_rdma if detected else (),
        )
        return request, detected


def v4_kv_dtype_refusal(kv_cache_dtype: str, gpu: GpuSpec | None) -> str | None:
    """Why DeepSeek-V4 cannot keep its KV cache as `kv_cache_dtype` on `gpu` (None: it can, or the GPU is not
    known yet and the name is one V4 takes), in the planner's own words."""
    try:
        if gpu is None:
            if kv_cache_dtype not in V4_KV_CACHE_DTYPES:
                raise InputError("KV cache dtype", f"DeepSeek-V4 takes {', '.join(V4_KV_CACHE_DTYPES)}")
        else:
            resolve_v4_kv_cache_dtype(v4_backend(gpu), kv_cache_dtype)
    except InputError as error:
        return error.problem
    return None


def bundled_v4_models() -> frozenset[str]:
    """The bundled models that are DeepSeek-V4 (reads their cards: off the GUI thread)."""
    return frozenset(name for name in bundled_model_names() if load_model(name).is_v4)


def _describe(inventory: Inventory) -> str:
    return describe_gpus(inventory) + (" (simulated)" if inventory.simulated else "")


class PlannerForm(QWidget):
    plan_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("plannerForm")
        self._inventories: dict[str, Inventory] = {}
        self._catalog: tuple[GpuSpec, ...] = ()
        self._v4_models: frozenset[str] = frozenset()

        cluster_box = QGroupBox("Cluster")
        self.detected = QRadioButton("Detected hosts")
        self.detected.setObjectName("useDetected")
        self.typed = QRadioButton("Typed in")
        self.typed.setObjectName("useTyped")
        source = QButtonGroup(self)
        source.addButton(self.detected)
        source.addButton(self.typed)
        self.host_list = QListWidget()
        self.host_list.setObjectName("plannerHosts")
        self.host_list.setAccessibleName("Hosts to plan for (the first ticked is the head)")
        self.host_list.setMaximumHeight(110)
        self.gpu = QComboBox()
        self.gpu.setObjectName("plannerGpu")
        self.nodes = QSpinBox()
        self.nodes.setRange(1, 4096)
        self.nodes.setValue(1)
        self.gpus_per_node = QSpinBox()
        self.gpus_per_node.setRange(1, 64)
        self.gpus_per_node.setValue(8)
        cluster_form = QFormLayout(cluster_box)
        cluster_form.addRow(self.detected)
        cluster_form.addRow(self.host_list)
        cluster_form.addRow(self.typed)
        cluster_form.addRow("GPU", self.gpu)
        cluster_form.addRow("Nodes", self.nodes)
        cluster_form.addRow("GPUs per node", self.gpus_per_node)
        self.detected.toggled.connect(self._source_changed)
        self.host_list.itemChanged.connect(lambda _item: self._hosts_ticked())

        serving_box = QGroupBox("Serving")
        self.model = QComboBox()
        self.model.setObjectName("plannerModel")
        self.model.setEditable(True)  # a bundled name, or a config.json / checkpoint path
        self.model.addItems(bundled_model_names())
        self.model.setToolTip("A bundled model, or the path of a config.json / checkpoint directory")
        self.engine = QComboBox()
        self.engine.addItems(["vllm", "torch"])
        self.goal = QComboBox()
        self.goal.setObjectName("plannerGoal")
        self.goal.addItems(GOALS)
        self.weights = QComboBox()
        self.weights.addItem("as shipped", None)
        for dtype in WEIGHTS_DTYPES:
            self.weights.addItem(dtype, dtype)
        self.kv_dtype = QComboBox()
        self.kv_dtype.setObjectName("plannerKvDtype")
        self.kv_dtype.addItems(KV_CACHE_DTYPES)
        self.max_model_len = QSpinBox()
        self.max_model_len.setObjectName("plannerMaxModelLen")
        self.max_model_len.setRange(0, 1_048_576)
        self.max_model_len.setSingleStep(4096)
        self.max_model_len.setSpecialValueText("model default")
        self.utilization = QDoubleSpinBox()
        self.utilization.setRange(0.05, 1.0)
        self.utilization.setSingleStep(0.01)
        self.utilization.setValue(0.9)
        self.max_num_seqs = QSpinBox()
        self.max_num_seqs.setRange(0, 65536)
        self.max_num_seqs.setSpecialValueText("vLLM default")
        self.mtp = QCheckBox("MTP speculative decoding")
        self.vllm_release = QComboBox()
        self.vllm_release.setObjectName("plannerVllmRelease")
        self.vllm_release.addItem("from the hosts", FROM_HOSTS)
        for accounting in VLLM_ACCOUNTINGS:
            self.vllm_release.addItem(accounting.label, release_text(accounting.last))
        self.vllm_release.addItem(f"newest modelled ({release_text(NEWEST_MODELLED)})", NEWEST)
        self.vllm_release.setToolTip(
            "Whose memory accounting the plan follows (`meshdeck plan --vllm-version`): the release the hosts "
            "imply, one of the modelled ranges of releases that size the KV cache alike, or the newest"
        )
        serving_form = QFormLayout(serving_box)
        serving_form.addRow("Model", self.model)
        serving_form.addRow("Engine", self.engine)
        serving_form.addRow("vLLM release", self.vllm_release)
        serving_form.addRow("Goal", self.goal)
        serving_form.addRow("Weights", self.weights)
        serving_form.addRow("KV cache dtype", self.kv_dtype)
        serving_form.addRow("max_model_len", self.max_model_len)
        serving_form.addRow("gpu_memory_utilization", self.utilization)
        serving_form.addRow("max_num_seqs", self.max_num_seqs)
        serving_form.addRow(self.mtp)

        workload_box = QGroupBox("Workload and speed")
        self.isl = QSpinBox()
        self.isl.setObjectName("plannerIsl")
        self.isl.setRange(1, MAX_WORKLOAD_TOKENS)
        self.isl.setValue(DEFAULT_INPUT_TOKENS)
        self.osl = QSpinBox()
        self.osl.setObjectName("plannerOsl")
        self.osl.setRange(1, MAX_WORKLOAD_TOKENS)
        self.osl.setValue(DEFAULT_OUTPUT_TOKENS)
        self.concurrency = QSpinBox()
        self.concurrency.setObjectName("plannerConcurrency")
        self.concurrency.setRange(0, 10_000_000)
        self.concurrency.setSpecialValueText("what each layout holds")
        self.concurrency.setToolTip("Requests in flight across the whole deployment (a DP8 layout holds C/8 per rank)")
        self.ttft_target = QDoubleSpinBox()
        self.ttft_target.setObjectName("plannerTtftTarget")
        self.ttft_target.setRange(0, 3_600_000)
        self.ttft_target.setDecimals(0)
        self.ttft_target.setSuffix(" ms")
        self.ttft_target.setSpecialValueText("no target")
        self.tpot_target = QDoubleSpinBox()
        self.tpot_target.setObjectName("plannerTpotTarget")
        self.tpot_target.setRange(0, 60_000)
        self.tpot_target.setDecimals(1)
        self.tpot_target.setSuffix(" ms")
        self.tpot_target.setSpecialValueText("no target")
        self.disaggregated = QCheckBox("Also plan prefill/decode pools")
        self.disaggregated.setObjectName("plannerDisaggregated")
        self.speed = QComboBox()
        self.speed.setObjectName("plannerSpeed")
        self.speed.addItem("measured kernels (aiconfigurator-core)", "kernels")
        self.speed.addItem("roofline estimate only", "roofline")
        self.speed.setToolTip(
            "Measured kernel tables where they reach this GPU and model (else the roofline, said in the results)"
        )
        workload_form = QFormLayout(workload_box)
        workload_form.addRow("Input tokens (ISL)", self.isl)
        workload_form.addRow("Output tokens (OSL)", self.osl)
        workload_form.addRow("Concurrency", self.concurrency)
        workload_form.addRow("TTFT target", self.ttft_target)
        workload_form.addRow("TPOT target", self.tpot_target)
        workload_form.addRow(self.disaggregated)
        workload_form.addRow("Speed", self.speed)

        self.plan_button = QPushButton("Plan")
        self.plan_button.setObjectName("planButton")
        self.plan_button.setDefault(True)
        self.plan_button.setToolTip("Rank every layout (Ctrl+Return)")
        self.plan_button.clicked.connect(self.plan_requested)
        self.error = QLabel()
        self.error.setObjectName("fieldError")
        self.error.setWordWrap(True)
        self.error.setVisible(False)

        layout = QVBoxLayout(self)
        layout.addWidget(cluster_box)
        layout.addWidget(serving_box)
        layout.addWidget(workload_box)
        layout.addWidget(self.plan_button)
        layout.addWidget(self.error)
        layout.addStretch(1)
        self.typed.setChecked(True)
        self._source_changed()
        self.model.currentTextChanged.connect(lambda _text: self._update_kv_dtypes())
        self.gpu.currentTextChanged.connect(lambda _text: self._update_kv_dtypes())

    # ------------------------------------------------------------------ inputs from outside

    def set_gpu_catalog(self, catalog: tuple[GpuSpec, ...], preferred: str = "H200-SXM-141GB") -> None:
        current = self.gpu.currentText() or preferred
        self._catalog = tuple(catalog)
        self.gpu.clear()
        self.gpu.addItems([g.name for g in catalog])
        index = self.gpu.findText(current)
        self.gpu.setCurrentIndex(max(index, 0))
        self._update_kv_dtypes()

    def set_v4_models(self, names: Iterable[str]) -> None:
        """The model names (bundled) that are DeepSeek-V4: their KV cache dtypes follow V4's rules."""
        self._v4_models = frozenset(names)
        self._update_kv_dtypes()

    def set_hosts(self, inventories: Mapping[str, Inventory]) -> None:
        """Connected hosts with their inventories; keeps the user's ticks, ticks new GPU hosts."""
        ticked = set(self.ticked_hosts()) if self.host_list.count() else None
        self._inventories = dict(inventories)
        self.host_list.clear()
        for host, inventory in inventories.items():
            item = QListWidgetItem(f"{host} — {_describe(inventory)}")
            item.setData(Qt.ItemDataRole.UserRole, host)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            has_gpus = bool(inventory.gpus)
            tick = (host in ticked) if ticked is not None else has_gpus
            item.setCheckState(Qt.CheckState.Checked if tick and has_gpus else Qt.CheckState.Unchecked)
            self.host_list.addItem(item)
        if inventories and not self.detected.isChecked() and ticked is None:
            self.detected.setChecked(True)  # pre-fill from what is connected
        self._source_changed()

    def ticked_hosts(self) -> list[str]:
        return [
            self.host_list.item(i).data(Qt.ItemDataRole.UserRole)
            for i in range(self.host_list.count())
            if self.host_list.item(i).checkState() == Qt.CheckState.Checked
        ]

    def _source_changed(self) -> None:
        detected = self.detected.isChecked()
        self.host_list.setEnabled(detected)
        for widget in (self.gpu, self.nodes, self.gpus_per_node):
            widget.setEnabled(not detected)
        self._name_hosts_release()
        self._update_kv_dtypes()

    def planned_gpu(self) -> GpuSpec | None:
        """The GPU the form plans for (the head host's, matched in the catalog), once the catalog is in."""
        if not self._catalog:
            return None
        if not self.detected.isChecked():
            return next((gpu for gpu in self._catalog if gpu.name == self.gpu.currentText()), None)
        hosts = self.ticked_hosts()
        if not hosts or hosts[0] not in self._inventories:
            return None
        facts = inventory_facts(self._inventories[hosts[0]])
        try:
            return detected_gpu(facts.gpu_name, facts.gpu_memory_bytes, self._catalog)
        except InputError:
            return None

    def _update_kv_dtypes(self) -> None:
        """Grey out the KV cache dtypes a DeepSeek-V4 model refuses on this GPU, each saying why."""
        v4 = self.model.currentText().strip() in self._v4_models
        gpu = self.planned_gpu() if v4 else None
        items = self.kv_dtype.model()
        assert isinstance(items, QStandardItemModel)  # a QComboBox's own model
        refused = []
        for row in range(self.kv_dtype.count()):
            item = items.item(row)
            refusal = v4_kv_dtype_refusal(item.text(), gpu) if v4 else None
            item.setEnabled(refusal is None)
            item.setToolTip(f"DeepSeek-V4: {refusal}" if refusal else "")
            refused += [item.text()] if refusal else []
        where = f" on {gpu.name} ({v4_backend(gpu).value} attention)" if gpu is not None else ""
        self.kv_dtype.setToolTip(
            f"vLLM's --kv-cache-dtype. DeepSeek-V4{where} refuses {', '.join(refused)} (hover one for why)"
            if v4 and refused
            else "vLLM's --kv-cache-dtype (fp8_ds_mla: V3.2 only; nvfp4_ds_mla: V3.2 on Blackwell only)"
        )

    def _hosts_ticked(self) -> None:
        self._name_hosts_release()
        self._update_kv_dtypes()  # the head host's GPU decides what V4 takes

    def _name_hosts_release(self) -> None:
        """ "from the hosts (0.11)": the release the ticked hosts imply (the newest modelled when typed in)."""
        release, _why = self._release_inputs(None).release()
        self.vllm_release.setItemText(0, f"from the hosts ({release_text(release)})")

    def _release_inputs(self, release: Release | None) -> PlannerInputs:
        """What decides the release: the source, the ticked hosts and their inventories (the rest left empty)."""
        return PlannerInputs(
            use_detected=self.detected.isChecked(),
            hosts=tuple(self.ticked_hosts()),
            inventories=dict(self._inventories),
            gpu_name="",
            nodes=1,
            gpus_per_node=1,
            model="",
            engine="vllm",
            goal="",
            weights_dtype=None,
            kv_cache_dtype="auto",
            max_model_len=None,
            gpu_memory_utilization=0.9,
            max_num_seqs=None,
            mtp=False,
            vllm_release=release,
        )

    def chosen_release(self) -> Release | None:
        """The vLLM release chosen in the form; None: from the hosts."""
        data = self.vllm_release.currentData()
        if data == NEWEST:
            return NEWEST_MODELLED
        return None if data == FROM_HOSTS or not isinstance(data, str) else parse_vllm_version(data)

    def inputs(self) -> PlannerInputs:
        return PlannerInputs(
            use_detected=self.detected.isChecked(),
            hosts=tuple(self.ticked_hosts()),
            inventories=dict(self._inventories),
            gpu_name=self.gpu.currentText(),
            nodes=self.nodes.value(),
            gpus_per_node=self.gpus_per_node.value(),
            model=self.model.currentText().strip(),
            engine=self.engine.currentText(),
            goal=self.goal.currentText(),
            weights_dtype=self.weights.currentData(),
            kv_cache_dtype=self.kv_dtype.currentText(),
            max_model_len=self.max_model_len.value() or None,
            gpu_memory_utilization=round(self.utilization.value(), 3),
            max_num_seqs=self.max_num_seqs.value() or None,
            mtp=self.mtp.isChecked(),
            input_tokens=self.isl.value(),
            output_tokens=self.osl.value(),
            concurrency=self.concurrency.value() or None,
            ttft_ms=self.ttft_target.value() or None,
            tpot_ms=self.tpot_target.value() or None,
            disaggregated=self.disaggregated.isChecked(),
            speed=self.speed.currentData(),
            vllm_release=self.chosen_release(),
        )

    def show_error(self, text: str | None) -> None:
        self.error.setText(text or "")
        self.error.setVisible(bool(text))

    # ------------------------------------------------------------------ settings

    def save_settings(self, settings: QSettings) -> None:
        settings.setValue("planner/model", self.model.currentText())
        settings.setValue("planner/goal", self.goal.currentText())
        settings.setValue("planner/kv_dtype", self.kv_dtype.currentText())
        settings.setValue("planner/max_model_len", self.max_model_len.value())
        settings.setValue("planner/utilization", self.utilization.value())
        settings.setValue("planner/gpu", self.gpu.currentText())
        settings.setValue("planner/nodes", self.nodes.value())
        settings.setValue("planner/isl", self.isl.value())
        settings.setValue("planner/osl", self.osl.value())
        settings.setValue("planner/vllm_release", self.vllm_release.currentData())

    def restore_settings(self, settings: QSettings) -> None:
        for combo, key in ((self.model, "model"), (self.goal, "goal"), (self.kv_dtype, "kv_dtype")):
            value = settings.value(f"planner/{key}")
            if isinstance(value, str) and value:
                index = combo.findText(value)
                if index >= 0:
                    combo.setCurrentIndex(index)
                elif combo.isEditable():
                    combo.setEditText(value)
        _restore_number(self.max_model_len, settings.value("planner/max_model_len"))
        _restore_number(self.utilization, settings.value("planner/utilization"))
        _restore_number(self.nodes, settings.value("planner/nodes"))
        _restore_number(self.isl, settings.value("planner/isl"))
        _restore_number(self.osl, settings.value("planner/osl"))
        release = settings.value("planner/vllm_release")
        index = self.vllm_release.findData(release) if isinstance(release, str) else -1
        if index >= 0:  # a release this version no longer models is left at "from the hosts"
            self.vllm_release.setCurrentIndex(index)


def _restore_number(box: QSpinBox | QDoubleSpinBox, value: object) -> None:
    """Set `box` to a number kept in the settings, within its range. None, zero or anything but a number
    leaves the box as it is: the settings file is the user's (hand-edited, or from another version)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return
    try:
        number = float(value)
    except ValueError:
        return
    if not math.isfinite(number) or not number:
        return
    number = min(max(number, box.minimum()), box.maximum())
    if isinstance(box, QSpinBox):
        box.setValue(int(number))
    else:
        box.setValue(number)
