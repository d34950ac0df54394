"""No flag outside real vLLM: every flag and choice meshdeck emits is in the list read from vLLM's source,
and the script that reads that list from a wheel understands vLLM's parser-building code."""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from launch_builders import make_node, make_profile
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.vllm_flags import bad_choices, canonical_flag, flags_in, unknown_flags
from meshdeck.launch.vllm_known_flags import VLLM_FLAG_ALIASES, VLLM_FLAG_CHOICES, VLLM_SERVE_FLAGS, VLLM_VERSION

REPO = Path(__file__).resolve().parents[3]
GENERATOR = REPO / "packaging" / "vllm_flags.py"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_flags_generator", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


def every_layout_class_plan() -> list[LaunchPlan]:
    """One plan per layout class and per setting that adds flags."""
    one = [make_node("gpu-a", "10.0.0.1")]
    two = [make_node("gpu-a", "10.0.0.1", ib=2), make_node("gpu-b", "10.0.0.2", ib=2)]
    four = [make_node(f"gpu-{c}", f"10.0.0.{i + 1}") for i, c in enumerate("abcd")]
    cases: list[tuple[dict[str, Any], list]] = [
        ({"layout": {"tensor_parallel": 8}}, one),
        ({"layout": {"tensor_parallel": 1, "data_parallel": 8, "expert_parallel": True}}, one),
        ({"layout": {"tensor_parallel": 4, "pipeline_parallel": 2}}, one),
        ({"hosts": ["gpu-a", "gpu-b"], "layout": {"tensor_parallel": 8, "pipeline_parallel": 2}}, two),
        (
            {
                "hosts": ["gpu-a", "gpu-b"],
                "layout": {"tensor_parallel": 2, "data_parallel": 8, "expert_parallel": True},
            },
            two,
        ),
        (
            {"hosts": ["gpu-a", "gpu-b"], "layout": {"tensor_parallel": 16}, "vllm": {"distributed_backend": "ray"}},
            two,
        ),
        (
            {
                "hosts": ["gpu-a", "gpu-b", "gpu-c", "gpu-d"],
                "layout": {"tensor_parallel": 16, "data_parallel": 2, "expert_parallel": True},
                "vllm": {"distributed_backend": "ray"},
            },
            four,
        ),
        (
            {
                "layout": {"tensor_parallel": 8},
                "vllm": {"kv_cache_dtype": "fp8_ds_mla", "max_num_seqs": 256, "speculative_mtp": True, "port": 9000},
            },
            one,
        ),
        ({"layout": {"tensor_parallel": 8}, "vllm": {"kv_cache_dtype": "bfloat16", "max_model_len": None}}, one),
    ]
    return [build_launch_plan(make_profile(**overrides), nodes, run_id="r1") for overrides, nodes in cases]


def test_every_flag_meshdeck_emits_for_every_layout_class_exists_in_vllm() -> None:
    emitted: set[str] = set()
    for plan in every_layout_class_plan():
        for command in plan.commands:
            if command.argv[1] != "serve":
                continue
            args = list(command.argv[3:])
            assert unknown_flags(args) == [], f"{plan.layout_class}: not in vLLM {VLLM_VERSION}: {command.argv}"
            assert bad_choices(args) == [], f"{plan.layout_class}: {bad_choices(args)}"
            emitted.update(flags_in(args))
    # the check is not vacuous: the multi-node, DP, Ray and V3.2 flags were all seen
    for flag in ("--nnodes", "--headless", "--data-parallel-start-rank", "--distributed-executor-backend",
                 "--data-parallel-backend", "--reasoning-parser", "--speculative-config", "--enable-expert-parallel"):  # fmt: skip
        assert flag in emitted


def test_every_flag_core_emits_exists_in_vllm() -> None:
    core_args = pytest.importorskip("meshdeck.core.vllm_args")
    layout = make_profile(layout={"tensor_parallel": 2, "pipeline_parallel": 2, "data_parallel": 2,
                                  "expert_parallel": True}, gpus_per_node=8).layout  # fmt: skip
    settings = core_args.ServeSettings(
        max_model_len=32768,
        gpu_memory_utilization=0.9,
        kv_cache_dtype="fp8_ds_mla",
        max_num_seqs=128,
        max_num_batched_tokens=8192,
        deepseek_v32_frontend=True,
        mtp_speculative_tokens=3,
    )
    args = core_args.vllm_serve_args(layout, settings)
    assert unknown_flags(args) == []
    assert bad_choices(args) == []
    assert "--max-num-batched-tokens" in flags_in(args)


def test_the_flag_list_holds_every_launch_flag_of_the_facts_sheet() -> None:
    # shared/data/VLLM-FACTS.md, "Launch flags (all exist in vLLM 0.33.0)" — read independently of our extractor
    facts = """--tensor-parallel-size -tp --pipeline-parallel-size -pp --data-parallel-size -dp
        --data-parallel-size-local --data-parallel-start-rank --data-parallel-address --data-parallel-rpc-port
        --data-parallel-backend --enable-expert-parallel --enable-eplb --eplb-config --all2all-backend
        --distributed-executor-backend --nnodes --node-rank --master-addr --master-port --headless
        --gpu-memory-utilization --kv-cache-memory-bytes --kv-cache-dtype --block-size --max-model-len
        --max-num-seqs --max-num-batched-tokens --api-server-count --port --host
        --tokenizer-mode --tool-call-parser --enable-auto-tool-choice --reasoning-parser --speculative-config"""
    for flag in facts.split():
        assert canonical_flag(flag) in VLLM_SERVE_FLAGS, flag
    assert set(VLLM_FLAG_CHOICES["--kv-cache-dtype"]) >= {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",
                                                          "fp8_inc", "fp8_ds_mla"}  # fmt: skip
    assert set(VLLM_FLAG_CHOICES["--distributed-executor-backend"]) == {"ray", "mp", "uni", "external_launcher"}
    assert "deepseek_v32" in VLLM_FLAG_CHOICES["--tokenizer-mode"]
    assert "deepseek_v32" in VLLM_FLAG_CHOICES["--tool-call-parser"]
    assert "deepseek_v3" in VLLM_FLAG_CHOICES["--reasoning-parser"]


def test_flags_are_read_the_way_vllms_parser_reads_them() -> None:
    assert canonical_flag("--max_model_len=4096") == "--max-model-len"  # FlexibleArgumentParser: _ == -
    assert canonical_flag("-tp") == "--tensor-parallel-size"
    assert canonical_flag("-1") is None and canonical_flag("8") is None
    assert VLLM_FLAG_ALIASES["-dpl"] == "--data-parallel-size-local"
    assert unknown_flags(["--tensor_parallel_size", "2", "--not-a-vllm-flag"]) == ["--not-a-vllm-flag"]
    assert bad_choices(["--kv-cache-dtype", "fp7"]) and not bad_choices(["--kv-cache-dtype=fp8"])


# A miniature vLLM source tree in the shapes the generator must understand (copied from how vLLM 0.33
# builds its parser: get_kwargs(Config)["field"], `**{**kwargs, ...}`, BooleanOptionalAction for bool
# fields, frontend dataclasses registered field by field, lazy parser registries, Literal aliases).
MINI_VLLM = {
    "vllm/engine/arg_utils.py": """
        import argparse
        from vllm.config.parallel import ParallelConfig

        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                parallel_kwargs = get_kwargs(ParallelConfig)
                group = parser.add_argument_group("ParallelConfig")
                group.add_argument("--tensor-parallel-size", "-tp", **parallel_kwargs["tensor_parallel_size"])
                group.add_argument("--data-parallel-size", "-dp", **parallel_kwargs["data_parallel_size"])
                group.add_argument("--enable-expert-parallel", "-ep", **parallel_kwargs["enable_expert_parallel"])
                group.add_argument("--cp-size", **{**parallel_kwargs["cp_size"], "default": None})
                group.add_argument("--numa", **parallel_kwargs["numa"])
                parser.add_argument("--disable-log-stats", action="store_true")
                parser.add_argument("--fail-x", action=argparse.BooleanOptionalAction)
                return parser

        class AsyncEngineArgs(EngineArgs):
            enable_log_requests: bool = False

            @staticmethod
            def add_cli_args(parser):
                parser = EngineArgs.add_cli_args(parser)
                parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction)
                return parser
        """,
    "vllm/config/parallel.py": """
        from typing import Literal
        DistributedExecutorBackend = Literal["ray", "mp"]
        DataParallelBackend = Literal["ray", "mp"]

        class ParallelConfig:
            tensor_parallel_size: int = 1
            data_parallel_size: int = 1
            enable_expert_parallel: bool = False
            cp_size: int | None = 1
            numa: bool | str | None = None
        """,
    "vllm/config/model.py": 'from typing import Literal\nTokenizerMode = Literal["auto", "deepseek_v32"]\n',
    "vllm/config/cache.py": 'from typing import Literal\nCacheDType = Literal["auto", "fp8_ds_mla"]\n',
    "vllm/entrypoints/common/cli_args.py": """
        class BaseFrontendArgs:
            enable_auto_tool_choice: bool = False
            tool_call_parser: str | None = None

            @classmethod
            def add_cli_args(cls, parser):
                frontend_kwargs = get_kwargs(cls)
                for key, value in frontend_kwargs.items():
                    parser.add_argument(f"--{key.replace('_', '-')}", **value)
                return parser

        class FrontendArgs(BaseFrontendArgs):
            port: int = 8000

        def make_arg_parser(parser):
            parser.add_argument("--headless", action="store_true")
            parser = FrontendArgs.add_cli_args(parser)
            parser = AsyncEngineArgs.add_cli_args(parser)
            return parser
        """,
    "vllm/entrypoints/launchers/run_batch.py": """
        class BatchFrontendArgs(BaseFrontendArgs):
            input_file: str = ""

            @classmethod
            def _customize_cli_kwargs(cls, frontend_kwargs):
                frontend_kwargs["input_file"]["flags"] = ["-i"]

        def make_arg_parser(parser):  # FrontendArgs, but `vllm run-batch`, not `vllm serve`
            parser.add_argument("--output-file")
            return BatchFrontendArgs.add_cli_args(parser)
        """,
    "vllm/entrypoints/cli/serve.py": "from vllm.entrypoints.common.cli_args import make_arg_parser\n",
    "vllm/tool_parsers/__init__.py": '_TOOL_PARSERS_TO_REGISTER = {"deepseek_v32": ("m", "C"), "hermes": ("h", "H")}\n',
    "vllm/reasoning/__init__.py": '_REASONING_PARSERS_TO_REGISTER = {"deepseek_v3": ("m", "C")}\n',
}


def build_mini_wheel(directory: Path) -> Path:
    wheel = directory / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in MINI_VLLM.items():
            archive.writestr(path, textwrap.dedent(text))
    return wheel


def test_the_generator_reads_vllms_parser_code(tmp_path: Path) -> None:
    generator = load_generator()
    source = generator.read_wheel(build_mini_wheel(tmp_path))
    flags, aliases = generator.serve_flags(source)
    assert flags == {
        "--tensor-parallel-size", "-tp", "--data-parallel-size", "-dp", "--enable-expert-parallel", "--no-enable-expert-parallel", "-ep",
        "--cp-size", "--numa", "--disable-log-stats", "--fail-x", "--no-fail-x", "--enable-log-requests",
        "--no-enable-log-requests", "--headless", "--enable-auto-tool-choice", "--no-enable-auto-tool-choice",
        "--tool-call-parser", "--port",
    }  # fmt: skip
    assert aliases == {
        "-tp": "--tensor-parallel-size",
        "-dp": "--data-parallel-size",
        "-ep": "--enable-expert-parallel",
    }
    choices = generator.flag_choices(source)
    assert choices["--tokenizer-mode"] == ("auto", "deepseek_v32")
    assert choices["--tool-call-parser"] == ("deepseek_v32", "hermes")
    assert choices["--reasoning-parser"] == ("deepseek_v3",)
    assert source.version == "9.9.9"


def test_the_generator_writes_a_module_that_imports_and_round_trips(tmp_path: Path) -> None:
    generator = load_generator()
    output = tmp_path / "known.py"
    assert generator.main(["--wheel", str(build_mini_wheel(tmp_path)), "--output", str(output)]) == 0
    namespace: dict[str, Any] = {}
    exec(compile(output.read_text(), str(output), "exec"), namespace)
    assert namespace["VLLM_VERSION"] == "9.9.9"
    assert "--headless" in namespace["VLLM_SERVE_FLAGS"]
    assert namespace["VLLM_FLAG_ALIASES"]["-tp"] == "--tensor-parallel-size"


def test_the_generator_refuses_a_source_tree_it_does_not_understand(tmp_path: Path) -> None:
    generator = load_generator()
    wheel = tmp_path / "vllm-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/engine/arg_utils.py", "def add_cli_args(parser):\n    return parser\n")
    with pytest.raises(generator.SourceLayoutError):
        generator.serve_flags(generator.read_wheel(wheel))


def test_the_checked_in_list_is_what_the_generator_makes_from_that_wheel(tmp_path: Path) -> None:
    """Needs the real wheel (`pip download vllm==<VLLM_VERSION> --no-deps`); point MESHDECK_VLLM_WHEEL at it."""
    wheel = os.environ.get("MESHDECK_VLLM_WHEEL")
    if not wheel:
        pytest.skip("set MESHDECK_VLLM_WHEEL to a vllm wheel to re-derive the checked-in flag list")
    generator = load_generator()
    output = tmp_path / "known.py"
    generator.main(["--wheel", wheel, "--output", str(output)])
    checked_in = REPO / "app" / "meshdeck" / "launch" / "vllm_known_flags.py"
    assert output.read_text() == checked_in.read_text()
