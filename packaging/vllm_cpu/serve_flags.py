"""Print every option `vllm serve` accepts in the installed vLLM, as JSON, from vLLM's own parser.

Run it with the vLLM venv's interpreter (`.venv-vllm/bin/python packaging/vllm_cpu/serve_flags.py`). The
checked-in list (app/meshdeck/launch/vllm_known_flags.py) is read from a release's source without importing
it; this asks the installed release itself, so the real-vLLM tests can check that every flag meshdeck emits
is one the vLLM that runs accepts, and which tokenizer modes and reasoning / tool-call parsers it registers
(vllm/tokenizers/registry.py, vllm/reasoning/__init__.py, vllm/tool_parsers/__init__.py). The launcher beside this file is run first (not as __main__: it only
answers vLLM's version lookup for the vllm-cpu distribution).
"""

import contextlib
import importlib.metadata
import io
import json
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).with_name("vllm")), run_name="vllm_cpu_launcher")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    flags = sorted({option for action in parser._actions for option in action.option_strings})
    # `serve_flags.py ARGV.json`: also parse each argv (a JSON list of lists) with the real parser, as `vllm serve`
    # would read it: choices, JSON-valued configs (--kv-transfer-config, --eplb-config) and types are checked
    parsed = []
    for argv in json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else []:
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                parser.parse_args(argv)
            parsed.append("ok")
        except SystemExit:
            parsed.append(stderr.getvalue().strip().splitlines()[-1] if stderr.getvalue().strip() else "refused")
    # the names `--tokenizer-mode`, `--reasoning-parser` and `--tool-call-parser` may take: the parser reads them as
    # plain strings and the engine looks them up in these registries only when it starts
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers.registry import TokenizerRegistry
    from vllm.tool_parsers import ToolParserManager

    registered = {
        "tokenizer_modes": sorted(TokenizerRegistry.tokenizers),
        "reasoning_parsers": ReasoningParserManager.list_registered(),
        "tool_parsers": ToolParserManager.list_registered(),
    }
    version = importlib.metadata.version("vllm")
    print(json.dumps({"version": version, "flags": flags, "parsed": parsed, "registered": registered}))
