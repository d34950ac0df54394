"""TTFT and TPOT from NVIDIA's aiconfigurator-core: per-operator latencies measured on real GPUs.

aiconfigurator-core (PyPI, Apache-2.0) holds, per GPU system and engine release, measured latency tables of
every operator a DeepSeek forward pass runs — FP8 block GEMMs, MLA and V3.2's sparse attention, the MoE
grouped GEMMs, custom all-reduce, DeepEP dispatch/combine — and composes them into a prefill, a decode step
and vLLM's continuous batching with chunked prefill (`run_agg`). This adapter asks it one `SpeedQuery` at a
time (core/serving.py) and answers in milliseconds; meshdeck keeps its own memory model and caps every
batch with its own KV capacity before asking.

What it uses of the library and how:
- the engine shape maps to its ModelConfig: TP, PP, attention DP, and the MoE as vLLM builds it — with
  expert parallel whole experts over TP × DP ranks (moe_ep), without it every expert split over them (moe_tp);
- an aggregated engine runs `run_agg` at the batch per DP rank with `max_num_batched_tokens` as the prefill
  chunk; a prefill worker `run_static(static_ctx)`; a decode worker `run_static(static_gen)`;
- MTP: the draft layers' cost with `nextn`, the accepted tokens per step (core/throughput.py's acceptance)
  as `decode_tokens_per_iteration`, as the library's own speculative projection does;
- a prefill or decode pool whose expert parallel spans nodes launches with DeepEP (high-throughput for
  prefill, low-latency for decode): it is priced with the library's DeepEP tables where they exist, and
  where they were measured on fewer nodes than asked the answer says so (`estimated_parts`).
The library loads its tables lazily (~1.5 s for the first question of a GPU); answers are cached per
process. It is not thread-safe: one lock serialises every call. Where it cannot answer (a shape outside its
tables, an error of its own) this model answers None and the planner's roofline stands in, labelled.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from meshdeck.core.model_card import ModelCard
from meshdeck.core.plan_request import PlanRequest, resolve
from meshdeck.core.serving import SOURCE_KERNELS, SpeedQuery, SpeedSource, StepTimes
from meshdeck.core.throughput import expected_accepted_tokens
from meshdeck.core.vllm_releases import release_text
from meshdeck.speed.tables import SpeedTables, speed_tables

log = logging.getLogger(__name__)

_LIBRARY_LOGGERS = ("aiconfigurator_core",)
NOT_INSTALLED = "aiconfigurator-core is not installed (it has wheels for Linux x86_64/aarch64 and macOS arm64 only)"
_LOCK = threading.Lock()  # the library's caches and engine handles are not safe across threads
_CACHE_LIMIT = 50_000
_ANSWERS: OrderedDict[tuple[Any, ...], StepTimes | None] = OrderedDict()
# Ops whose latency the library computes from a formula rather than a table even on a measured system:
# too small to matter (norms, embeddings, activations) — not worth a mention next to a number.
_NEGLIGIBLE_OPS = ("embedding", "add_norm", "act_gate", "norm")


def package_version() -> str | None:
    try:
        return metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        return None


class _LibraryNotes(logging.Handler):
    """Keeps what the library warns while it loads tables (its low-fidelity fallbacks): deduplicated, bounded.

    The library logs per query; nothing of it reaches meshdeck's output except what `caveats` makes of it.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: dict[str, None] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.messages) < 256:
            self.messages[record.getMessage()[:500]] = None


_NOTES = _LibraryNotes()


def _quiet_library() -> None:
    """Route the library's log lines to `_NOTES` only (it warns per query, on stderr by default)."""
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
        if _NOTES not in logger.handlers:
            logger.addHandler(_NOTES)


@dataclass(frozen=True)
class _Library:
    """The handful of library entry points this adapter calls (imported once, lazily)."""

    config: Any
    common: Any
    get_model: Any
    get_database: Any
    get_backend: Any
    get_version_slots: Any
    get_model_info: Any


def _library() -> _Library | str:
    try:
        from aiconfigurator_core.sdk import common, config
        from aiconfigurator_core.sdk.backends.factory import get_backend
        from aiconfigurator_core.sdk.models import _get_model_info, get_model
        from aiconfigurator_core.sdk.perf_database import get_database, get_version_slots
    except Exception as exc:  # no wheel for this platform, or a broken install: the roofline stands in
        return f"aiconfigurator-core cannot be imported ({type(exc).__name__}: {str(exc)[:200]})"
    _quiet_library()
    return _Library(config, common, get_model, get_database, get_backend, get_version_slots, _get_model_info)


def import_library() -> str | None:
    """Import the library now (pandas, its Rust engine: ~1 s) — None, or why it cannot be used here."""
    if package_version() is None:
        return NOT_INSTALLED
    library = _library()
    return library if isinstance(library, str) else None


def _low_fidelity_summary(messages: Any) -> tuple[str, ...]:
    """The library's load-time fallbacks, one line each table: which rows stand in for missing ones."""
    tables = sorted(
        {
            message.split(" for ", 1)[1].split(" from ", 1)[0]
            for message in messages
            if "low-fidelity fallback rows" in message and " for " in message and " from " in message
        }
    )
    if not tables:
        return ()
    return (
        f"{', '.join(tables)}: vLLM rows the tables lack are TRT-LLM's measurements on the same GPU "
        "(the library's low-fidelity fallback)",
    )


class KernelSpeed:
    """The measured-kernel `SpeedModel` of one plan: one GPU system, one model, one weight and KV format."""

    def __init__(
        self,
        library: _Library,
        *,
        engine: str,
        system: str,
        table_release: str,
        model_id: str,
        gemm_mode: str | None,
        moe_mode: str | None,
        kv_mode: str,
        source: SpeedSource,
    ) -> None:
        self._library = library
        self.engine = engine
        self.system = system
        self.table_release = table_release
        self.model_id = model_id
        self.gemm_mode, self.moe_mode, self.kv_mode = gemm_mode, moe_mode, kv_mode
        self._source = source
        self._database: Any = None
        self._source_for_notes = (-1, source)  # (how many library notes it was built from, the source)

    @property
    def source(self) -> SpeedSource:
        """The source, with the library's load-time fallbacks seen so far (tables load on first use)."""
        seen, source = self._source_for_notes
        if seen != len(_NOTES.messages):
            caveats = _low_fidelity_summary(list(_NOTES.messages))
            source = replace(self._source, caveats=caveats) if caveats else self._source
            self._source_for_notes = (len(_NOTES.messages), source)
        return source

    def _model_config(self, query: SpeedQuery) -> Any:
        lib, shape = self._library, query.shape
        common = lib.common
        width = shape.tensor_parallel * shape.data_parallel
        expert_parallel = shape.expert_parallel and width > 1
        deep_ep = None
        if query.role != "aggregated" and shape.expert_parallel_crosses_nodes:
            deep_ep = {"context": "deepep_ht"} if query.role == "prefill" else {"generation": "deepep_ll"}
        return lib.config.ModelConfig(
            tp_size=shape.tensor_parallel,
            pp_size=shape.pipeline_parallel,
            attention_dp_size=shape.data_parallel,
            moe_tp_size=1 if expert_parallel else width,
            moe_ep_size=width if expert_parallel else 1,
            gemm_quant_mode=common.GEMMQuantMode[self.gemm_mode] if self.gemm_mode else None,
            moe_quant_mode=common.MoEQuantMode[self.moe_mode] if self.moe_mode else None,
            kvcache_quant_mode=common.KVCacheQuantMode[self.kv_mode],
            fmha_quant_mode=common.FMHAQuantMode.bfloat16,  # vLLM's and SGLang's MLA tables: BF16 attention
            nextn=query.speculative_tokens,
            num_gpus_per_node=shape.gpus_per_node,
            system=self.system,
            moe_comm_backend=deep_ep,
        )

    def _ask(self, query: SpeedQuery) -> StepTimes:
        lib = self._library
        if self._database is None:
            self._database = lib.get_database(self.system, self.engine, self.table_release)
        model = lib.get_model(self.model_id, self._model_config(query), self.engine)
        backend = lib.get_backend(self.engine)  # a fresh one: its result cache does not key on the model's shape
        accepted = expected_accepted_tokens(query.speculative_tokens)
        runtime = lib.config.RuntimeConfig(
            batch_size=query.batch_per_rank, isl=query.input_tokens, osl=query.output_tokens
        )
        if query.role == "aggregated":
            summary = backend.run_agg(
                model,
                self._database,
                runtime,
                ctx_tokens=query.chunk_tokens,
                **({"decode_tokens_per_iteration": accepted} if query.speculative_tokens else {}),
            )
            row = summary.get_result_dict()
            ttft, tpot = float(row["ttft"]), float(row["tpot"])
        else:
            mode = "static_ctx" if query.role == "prefill" else "static_gen"
            summary = backend.run_static(model, self._database, runtime, mode, 32, 1.0)
            row = summary.get_result_dict()  # the row as a dict (its DataFrame costs ~10 ms to build)
            ttft = float(row["ttft"]) if query.role == "prefill" else 0.0
            tpot = float(row["tpot"]) / accepted if query.role == "decode" else 0.0
        return StepTimes(ttft, tpot, _estimated_parts(summary))

    def times(self, query: SpeedQuery) -> StepTimes | None:
        key = (
            self.engine,
            self.system,
            self.table_release,
            self.model_id,
            self.gemm_mode,
            self.moe_mode,
            self.kv_mode,
            query.shape,
            query.role,
            query.batch_per_rank,
            query.input_tokens,
            query.output_tokens,
            query.chunk_tokens if query.role == "aggregated" else 0,
            query.speculative_tokens,
        )
        with _LOCK:
            if key in _ANSWERS:
                _ANSWERS.move_to_end(key)
                return _ANSWERS[key]
            try:
                answer: StepTimes | None = self._ask(query)
            except Exception as exc:  # the library's own limits (a shape without data, a config it refuses)
                log.info("aiconfigurator-core had no answer for %s %s: %s", query.shape.label(), query.role, exc)
                answer = None
            if answer is not None and not (answer.ttft_ms >= 0 and answer.tpot_ms >= 0):
                answer = None  # NaN or negative: not a measurement
            _ANSWERS[key] = answer
            if len(_ANSWERS) > _CACHE_LIMIT:
                _ANSWERS.popitem(last=False)
            return answer


def _estimated_parts(summary: Any) -> tuple[str, ...]:
    """What in an answer is not a measurement at the asked scale: DeepEP at fewer nodes, formula-priced ops."""
    parts = []
    for fallback in summary.get_moe_comm_fallbacks() or ():
        parts.append(
            f"DeepEP {fallback.comm_backend} ({fallback.inference_phase}) measured at EP{fallback.measurement_ep_size} "
            f"on {fallback.measurement_node_num} node(s), used for EP{fallback.requested_ep_size} on "
            f"{fallback.requested_node_num}"
        )
    sources = summary.get_per_ops_source() or {}
    unmeasured = sorted(
        {
            op.replace("context_", "").replace("generation_", "")
            for ops in sources.values()
            if isinstance(ops, dict)
            for op, source in ops.items()
            if source in ("empirical", "sol") and not any(small in op for small in _NEGLIGIBLE_OPS)
        }
    )
    if unmeasured:
        parts.append(f"priced by the library's formula, not a table: {', '.join(unmeasured)}")
    return tuple(parts)


def _model_id(card: ModelCard, tables: SpeedTables, library: _Library) -> str | None:
    """The library's model config for this card: a bundled one of the same shape, else the card's own directory."""
    candidates = [tables.bundled_models.get(card.name), tables.architectures.get(card.architecture)]
    for model_id in filter(None, candidates):
        try:
            info = library.get_model_info(model_id)
        except Exception:
            continue
        if (
            info.get("architecture") == card.architecture
            and info.get("hidden_size") == card.hidden_size
            and info.get("layers") == card.num_hidden_layers
            and info.get("num_experts") == card.n_routed_experts
            and info.get("moe_inter_size") == card.moe_intermediate_size
            and info.get("n") == card.num_attention_heads
        ):
            return str(model_id)
    directory = Path(card.source).parent if card.source.endswith("config.json") else Path(card.source)
    if card.architecture in tables.architectures and directory.is_dir() and (directory / "config.json").is_file():
        return os.fspath(directory)  # a local directory: the library reads its config.json, never the network
    return None


def _v4_moe_mode(card: ModelCard, tables: SpeedTables, weights_override: str | None) -> str | None:
    """The library's MoE quant mode for a DeepSeek-V4 card's routed experts: its checkpoint's `expert_dtype` (FP4 by
    default: the library's own inference for DeepSeek's config, sdk/models/helpers.py _infer_quant_modes_from_raw_config),
    or the operator's --weights-dtype."""
    if weights_override is not None or card.v4 is None:
        return weights_override
    return tables.v4_experts.get(card.v4.expert_dtype)


def v4_table_gaps(
    card: ModelCard, tables: SpeedTables, database: Any, common: Any, *, moe_mode: str | None, kv_mode: str, label: str
) -> list[str]:
    """What the library's tables lack to price this DeepSeek-V4 plan (empty: they cover it). `label` names the
    tables ("h200_sxm vLLM 0.24.0"). The MoE rows are looked up with its own probe (PerfDatabase.
    legacy_moe_compute_coverage: the EP sizes with expert-kernel rows of that shape and mode); the V4 attention
    modules hold an FP8 KV cache only (sparse_attention/vllm/0.24.0/dsv4_*.parquet, kv_cache_dtype)."""
    if card.v4 is None:
        return []
    tables_of = f"aiconfigurator-core's {label} tables have no"
    expert = card.v4.expert_dtype
    gaps = []
    if moe_mode is None:
        gaps.append(f"meshdeck knows no aiconfigurator-core MoE mode for {expert} experts")
    else:

        def rows(mode: str) -> bool:
            return bool(
                database.legacy_moe_compute_coverage(
                    card.hidden_size,
                    card.moe_intermediate_size,
                    card.num_experts_per_tok,
                    card.n_routed_experts,
                    common.MoEQuantMode[mode],
                )
            )

        if not rows(moe_mode):
            held = [mode for mode in sorted(set(tables.v4_experts.values()) - {moe_mode}) if rows(mode)]
            shape = (
                f"{card.hidden_size}×{card.moe_intermediate_size}, {card.n_routed_experts} experts, "
                f"top-{card.num_experts_per_tok}"
            )
            also = f"; it holds {', '.join(held)} rows of that shape" if held else ""
            gaps.append(f"{tables_of} {moe_mode} MoE rows for {card.name}'s {expert} experts ({shape}{also})")
    if kv_mode not in tables.v4_kv_cache:
        held_kv = ", ".join(tables.v4_kv_cache) or "none"
        gaps.append(f"{tables_of} DeepSeek-V4 attention rows for a {kv_mode} KV cache (they hold {held_kv})")
    return gaps


ENGINES = ("vllm", "sglang", "trtllm")


def kernel_speed_for(request: PlanRequest, engine: str = "vllm") -> KernelSpeed | str:
    """The measured-kernel speed model for this request, or why the roofline must stand in (one line).

    `engine` picks whose tables: meshdeck launches vLLM and plans with vLLM's; the calibration table also asks
    SGLang's and TRT-LLM's to hold the serving arithmetic against measurements of those engines.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}; allowed: {', '.join(ENGINES)}")
    if request.engine != "vllm" or request.mode != "serve":
        return "the kernel tables model vLLM serving; this plan is not one"
    tables = speed_tables()
    gpu = request.cluster.gpu
    system = tables.systems.get(gpu.name)
    if system is None:
        return f"aiconfigurator-core has no kernel tables for {gpu.name} (it has {', '.join(sorted(tables.systems))})"
    settings = resolve(request)
    weights = tables.weights.get(settings.weights_dtype)
    if weights is None:
        return f"no kernel tables for {settings.weights_dtype} weights"
    kv_mode = tables.kv_cache.get(settings.kv.kv_cache_dtype)
    if kv_mode is None:
        return f"no kernel tables for a {settings.kv.kv_cache_dtype} KV cache"
    version = package_version()
    if version is None:
        return NOT_INSTALLED
    library = _library()
    if isinstance(library, str):
        return library
    checkpoint_format = request.weights_dtype is None or request.weights_dtype == request.model.checkpoint_dtype
    try:
        with _LOCK:
            slots = library.get_version_slots(system, engine) or {}
            table_release = slots.get("current")
            if not table_release:
                return f"aiconfigurator-core {version} has no {engine} tables for {system}"
            model_id = _model_id(request.model, tables, library)
            if model_id is None:
                return f"aiconfigurator-core has no model config of {request.model.name}'s shape ({request.model.architecture})"
            database = library.get_database(system, engine, table_release)
            if database is None:
                return f"aiconfigurator-core {version} could not load its {system} {engine} {table_release} tables"
            if request.model.is_v4:
                override = None if checkpoint_format else weights[1]
                v4_moe = _v4_moe_mode(request.model, tables, override)
                label = f"{system} {engine} {table_release}"
                gaps = v4_table_gaps(
                    request.model, tables, database, library.common, moe_mode=v4_moe, kv_mode=kv_mode, label=label
                )
                if gaps:
                    return "; ".join(gaps)
    except Exception as exc:
        return f"aiconfigurator-core {version} failed loading its tables: {type(exc).__name__}: {str(exc)[:200]}"
    launch = release_text(request.vllm_version)
    table_minor = ".".join(table_release.split(".")[:2])
    nearest = (
        f"{engine} {table_release} tables, not vLLM's (a calibration against that engine's measurements)"
        if engine != "vllm"
        else f"tables measured on vLLM {table_release}, this launch's release"
        if table_minor == launch
        else (
            f"vLLM {table_release} tables (the release aiconfigurator-core {version} measured on {system}) stand in "
            f"for this launch's vLLM {launch}: its kernels, CUDA graphs and scheduler are {table_release}'s, "
            "so the gap to the launch's own release is not measured"
        )
    )
    engine_name = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TRT-LLM"}[engine]
    source = SpeedSource(
        SOURCE_KERNELS, f"aiconfigurator-core {version}, {system} {engine_name} {table_release} tables", nearest=nearest
    )
    gemm_mode = None if checkpoint_format and not model_id.startswith("deepseek-ai/") else weights[0]
    moe_mode = None if checkpoint_format and not model_id.startswith("deepseek-ai/") else weights[1]
    if request.model.is_v4:
        # V4's routed experts are not the FP8 of its linears: ask for the mode of their own dtype (FP4 as shipped)
        moe_mode = _v4_moe_mode(request.model, tables, None if checkpoint_format else weights[1])
    speed = KernelSpeed(
        library,
        engine=engine,
        system=system,
        table_release=table_release,
        model_id=model_id,
        gemm_mode=gemm_mode,
        moe_mode=moe_mode,
        kv_mode=kv_mode,
        source=source,
    )
    speed._database = database
    return speed
