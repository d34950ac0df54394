"""Regenerate `app/meshdeck/launch/vllm_known_flags.py`: every `vllm serve` flag of a real vLLM release.

meshdeck must never hand vLLM a flag it does not accept. vLLM builds its parser from dataclass fields
at import time, and importing vLLM needs CUDA wheels we do not have, so this script reads vLLM's source
straight out of the wheel with `ast` instead:

- `vllm/engine/arg_utils.py`: every `add_argument(...)` in `add_cli_args`; a flag whose kwargs come from
  `get_kwargs(SomeConfig)["field"]` with a `bool` field gets argparse's `--no-<flag>` twin
  (`BooleanOptionalAction`), exactly as vLLM's `_compute_kwargs` decides;
- the module with `make_arg_parser` (`vllm serve`'s parser): its explicit flags (`--headless`, ...) and the
  flags of the frontend dataclasses it registers field by field (`FrontendArgs`, its bases);
- value choices meshdeck emits: `--tokenizer-mode`, `--kv-cache-dtype`, `--distributed-executor-backend`,
  `--data-parallel-backend` (from `Literal` aliases) and `--tool-call-parser` / `--reasoning-parser`
  (from the lazy parser registries).

    python packaging/vllm_flags.py                    # pip download the newest vllm --no-deps, regenerate
    python packaging/vllm_flags.py --version 0.33.0   # a given release
    python packaging/vllm_flags.py --wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl

Only the standard library (and pip, for the download) is used. The output is written atomically.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "app" / "meshdeck" / "launch" / "vllm_known_flags.py"

# flag -> the name of the `Literal[...]` alias in vLLM's source that lists its values
LITERAL_CHOICES = {
    "--tokenizer-mode": "TokenizerMode",
    "--kv-cache-dtype": "CacheDType",
    "--distributed-executor-backend": "DistributedExecutorBackend",
    "--data-parallel-backend": "DataParallelBackend",
}
# flag -> the name of the module-level dict whose keys are the registered parser names
REGISTRY_CHOICES = {
    "--tool-call-parser": "_TOOL_PARSERS_TO_REGISTER",
    "--reasoning-parser": "_REASONING_PARSERS_TO_REGISTER",
}


class SourceLayoutError(RuntimeError):
    """vLLM's source no longer has the shape this script reads; update the script, never guess."""


@dataclass
class ClassInfo:
    bases: list[str]
    fields: dict[str, ast.expr] = field(default_factory=dict)
    extra_flags: dict[str, list[str]] = field(default_factory=dict)
    # True: its add_cli_args registers every field (`get_kwargs(cls)`); False: it lists flags by hand;
    # None: it has no add_cli_args of its own.
    generic_cli: bool | None = None


@dataclass
class VllmSource:
    version: str
    wheel_name: str
    wheel_sha256: str
    files: dict[str, str]  # path inside the wheel -> text


def read_wheel(wheel: Path) -> VllmSource:
    match = re.match(r"vllm-([^-]+)-", wheel.name)
    if not match:
        raise SourceLayoutError(f"{wheel.name}: not a vllm wheel file name")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    files: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                files[name] = archive.read(name).decode("utf-8")
    if "vllm/engine/arg_utils.py" not in files:
        raise SourceLayoutError(f"{wheel.name}: no vllm/engine/arg_utils.py")
    return VllmSource(match.group(1), wheel.name, digest, files)


def download_wheel(version: str | None, dest: Path) -> Path:
    requirement = f"vllm=={version}" if version else "vllm"
    argv = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    subprocess.run(argv, check=True)
    wheels = sorted(dest.glob("vllm-*.whl"))
    if not wheels:
        raise SourceLayoutError(f"pip download {requirement} produced no wheel in {dest}")
    return wheels[-1]


def _names_in(annotation: ast.expr) -> set[str]:
    return {node.id for node in ast.walk(annotation) if isinstance(node, ast.Name)} | {
        node.attr for node in ast.walk(annotation) if isinstance(node, ast.Attribute)
    }


def _is_boolean_optional(annotation: ast.expr) -> bool:
    """vLLM's `_compute_kwargs`: `bool | str | None` takes a value; any other type with bool is --x/--no-x."""
    names = _names_in(annotation)
    return "bool" in names and "str" not in names


def collect_classes(files: dict[str, str], first: str) -> dict[str, ClassInfo]:
    """Class name -> fields. On a name clash the serve parser's module wins, then vllm/config, then the rest."""
    classes: dict[str, ClassInfo] = {}
    order = [first, *sorted(p for p in files if p.startswith("vllm/config/")), "vllm/engine/arg_utils.py"]
    order += sorted(p for p in files if p.startswith("vllm/entrypoints/") and p not in order)
    for path in order:
        text = files[path]
        for node in ast.walk(ast.parse(text, path)):
            if not isinstance(node, ast.ClassDef):
                continue
            info = ClassInfo(bases=[ast.unparse(base).split(".")[-1] for base in node.bases])
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    info.fields[statement.target.id] = statement.annotation
                if isinstance(statement, ast.FunctionDef) and statement.name == "add_cli_args":
                    info.generic_cli = "get_kwargs(cls)" in ast.unparse(statement)
            for sub in ast.walk(node):
                # frontend_kwargs["input_file"]["flags"] = ["-i"]
                if (
                    isinstance(sub, ast.Assign)
                    and len(sub.targets) == 1
                    and isinstance(sub.targets[0], ast.Subscript)
                    and isinstance(sub.targets[0].slice, ast.Constant)
                    and sub.targets[0].slice.value == "flags"
                    and isinstance(sub.targets[0].value, ast.Subscript)
                    and isinstance(sub.targets[0].value.slice, ast.Constant)
                    and isinstance(sub.value, ast.List)
                ):
                    info.extra_flags[sub.targets[0].value.slice.value] = [
                        e.value for e in sub.value.elts if isinstance(e, ast.Constant)
                    ]
            classes.setdefault(node.name, info)
    return classes


def registers_every_field(classes: dict[str, ClassInfo], name: str) -> bool:
    """Whether `name.add_cli_args` is the generic one that turns every dataclass field into a flag."""
    info = classes.get(name)
    if info is None:
        return False
    if info.generic_cli is not None:
        return info.generic_cli
    return any(registers_every_field(classes, base) for base in info.bases)


def class_fields(classes: dict[str, ClassInfo], name: str) -> dict[str, ast.expr]:
    """Fields of a dataclass including its bases (base first, as dataclasses order them)."""
    info = classes.get(name)
    if info is None:
        return {}
    merged: dict[str, ast.expr] = {}
    for base in info.bases:
        merged.update(class_fields(classes, base))
    merged.update(info.fields)
    return merged


def _kwargs_source(call: ast.Call) -> tuple[str, str] | None:
    """(kwargs variable, field) for `**x_kwargs["field"]` or `**{**x_kwargs["field"], ...}`."""
    for keyword in call.keywords:
        if keyword.arg is not None:
            continue
        value = keyword.value
        candidates = [value]
        if isinstance(value, ast.Dict):
            candidates = [v for k, v in zip(value.keys, value.values, strict=True) if k is None]
        for candidate in candidates:
            if (
                isinstance(candidate, ast.Subscript)
                and isinstance(candidate.value, ast.Name)
                and isinstance(candidate.slice, ast.Constant)
            ):
                return candidate.value.id, str(candidate.slice.value)
    return None


def _explicit_boolean_optional(call: ast.Call) -> bool:
    return any(
        keyword.arg == "action" and ast.unparse(keyword.value).endswith("BooleanOptionalAction")
        for keyword in call.keywords
    )


def flags_from_function(func: ast.FunctionDef, classes: dict[str, ClassInfo], aliases: dict[str, str]) -> Iterator[str]:
    """Every option string of every `add_argument` call in one function body; short aliases go to `aliases`."""
    kwargs_class: dict[str, str] = {}
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).endswith("get_kwargs")
            and node.value.args
        ):
            kwargs_class[node.targets[0].id] = ast.unparse(node.value.args[0]).split(".")[-1]
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument":
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
        yield from options
        longs = [o for o in options if o.startswith("--")]
        for option in options:
            if longs and not option.startswith("--"):
                aliases[option] = longs[0]
        boolean = _explicit_boolean_optional(node)
        source = _kwargs_source(node)
        if source and source[0] in kwargs_class:
            annotation = class_fields(classes, kwargs_class[source[0]]).get(source[1])
            if annotation is None:
                raise SourceLayoutError(f"{kwargs_class[source[0]]}.{source[1]}: field not found")
            boolean = boolean or _is_boolean_optional(annotation)
        if boolean:
            yield from (f"--no-{o[2:]}" for o in options if o.startswith("--"))


def _functions(tree: ast.AST, name: str) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            yield node


def dataclass_flags(classes: dict[str, ClassInfo], name: str, aliases: dict[str, str]) -> Iterator[str]:
    """Flags a frontend dataclass registers in `add_cli_args`: `--field-name` (and `--no-` for bools)."""
    extra: dict[str, list[str]] = {}
    for cls in [name, *classes[name].bases]:
        if cls in classes:
            extra.update(classes[cls].extra_flags)
    for field_name, annotation in class_fields(classes, name).items():
        flag = "--" + field_name.replace("_", "-")
        yield flag
        for short in extra.get(field_name, []):
            aliases[short] = flag
            yield short
        if _is_boolean_optional(annotation):
            yield f"--no-{flag[2:]}"


def serve_parser_module(source: VllmSource) -> str:
    """The module `vllm/entrypoints/cli/serve.py` imports `make_arg_parser` from (`vllm serve`'s parser)."""
    serve = source.files.get("vllm/entrypoints/cli/serve.py")
    if serve is None:
        raise SourceLayoutError("vllm/entrypoints/cli/serve.py not found")
    for node in ast.walk(ast.parse(serve)):
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == "make_arg_parser" for a in node.names):
            path = node.module.replace(".", "/") + ".py"
            if path in source.files:
                return path
    raise SourceLayoutError("vllm/entrypoints/cli/serve.py does not import make_arg_parser from a module in the wheel")


def serve_flags(source: VllmSource) -> tuple[set[str], dict[str, str]]:
    """All `vllm serve` option strings, and short alias -> long flag."""
    aliases: dict[str, str] = {}
    parser_module = serve_parser_module(source)
    classes = collect_classes(source.files, first=parser_module)
    flags: set[str] = set()
    arg_utils = ast.parse(source.files["vllm/engine/arg_utils.py"])
    found = False
    for func in _functions(arg_utils, "add_cli_args"):
        flags.update(flags_from_function(func, classes, aliases))
        found = True
    if not found:
        raise SourceLayoutError("vllm/engine/arg_utils.py: no add_cli_args")
    for func in _functions(ast.parse(source.files[parser_module]), "make_arg_parser"):
        flags.update(flags_from_function(func, classes, aliases))
        for node in ast.walk(func):
            # parser = FrontendArgs.add_cli_args(parser)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_cli_args"
                and isinstance(node.func.value, ast.Name)
                and registers_every_field(classes, node.func.value.id)
            ):
                flags.update(dataclass_flags(classes, node.func.value.id, aliases))
    required = {"--tensor-parallel-size", "--headless", "--port", "--data-parallel-size"}
    if missing := required - flags:
        raise SourceLayoutError(f"flags every vLLM has were not found: {sorted(missing)}")
    return flags, aliases


def _literal_alias(files: dict[str, str], alias: str) -> tuple[str, ...]:
    for path, text in files.items():
        if alias not in text:
            continue
        for node in ast.parse(text, path).body:
            target = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            value = getattr(node, "value", None)
            if (
                isinstance(target, ast.Name)
                and target.id == alias
                and isinstance(value, ast.Subscript)
                and ast.unparse(value.value).endswith("Literal")
            ):
                elements = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
                return tuple(str(e.value) for e in elements if isinstance(e, ast.Constant))
    raise SourceLayoutError(f"Literal alias {alias} not found")


def _registry_keys(files: dict[str, str], name: str) -> tuple[str, ...]:
    for path, text in files.items():
        if name not in text:
            continue
        for node in ast.parse(text, path).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name
                and isinstance(node.value, ast.Dict)
            ):
                return tuple(str(k.value) for k in node.value.keys if isinstance(k, ast.Constant))
    raise SourceLayoutError(f"registry {name} not found")


def flag_choices(source: VllmSource) -> dict[str, tuple[str, ...]]:
    choices = {flag: _literal_alias(source.files, alias) for flag, alias in LITERAL_CHOICES.items()}
    choices.update({flag: _registry_keys(source.files, name) for flag, name in REGISTRY_CHOICES.items()})
    return choices


def _lines(items: Iterable[str], indent: str) -> str:
    return "".join(f'{indent}"{item}",\n' for item in items)


def render(source: VllmSource, flags: set[str], aliases: dict[str, str], choices: dict[str, tuple[str, ...]]) -> str:
    out = [
        f'"""Every flag `vllm serve` accepts in vLLM {source.version}, and the values of the ones meshdeck sets.\n',
        "\n",
        "Generated by packaging/vllm_flags.py from vLLM's own source; do not edit. Rerun it when vLLM moves:\n",
        "`python packaging/vllm_flags.py [--version X.Y.Z]`.\n",
        f"Wheel: {source.wheel_name} (sha256 {source.wheel_sha256}).\n",
        '"""\n',
        "\n",
        "from __future__ import annotations\n",
        "\n",
        f'VLLM_VERSION = "{source.version}"\n',
        f'VLLM_WHEEL_SHA256 = "{source.wheel_sha256}"\n',
        "\n",
        "VLLM_SERVE_FLAGS: frozenset[str] = frozenset(\n",
        "    {\n",
        _lines(sorted(flags), "        "),
        "    }\n",
        ")\n",
        "\n",
        "VLLM_FLAG_ALIASES: dict[str, str] = {\n",
        "".join(f'    "{short}": "{aliases[short]}",\n' for short in sorted(aliases)),
        "}\n",
        "\n",
        "VLLM_FLAG_CHOICES: dict[str, tuple[str, ...]] = {\n",
    ]
    for flag in sorted(choices):
        out.append(f'    "{flag}": (\n{_lines(choices[flag], "        ")}    ),\n')
    out.append("}\n")
    return "".join(out)


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source_group = parser.add_mutually_exclusive_group()
    source_group.add_argument("--wheel", type=Path, help="a vllm wheel already downloaded")
    source_group.add_argument("--version", help="vLLM release to download (default: the newest)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
        wheel = args.wheel or download_wheel(args.version, Path(tmp))
        source = read_wheel(wheel)
        flags, aliases = serve_flags(source)
        choices = flag_choices(source)
    write_atomically(args.output, render(source, flags, aliases, choices))
    print(f"{args.output}: {len(flags)} flags of vLLM {source.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
