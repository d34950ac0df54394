"""A checkpoint's exclusion lists matched against module names as vLLM matches them: compiled once, bounded.

checkpoint_quant.py asks, for every quantizable module of the model (~11 per layer), whether the checkpoint
leaves it unquantized. The lists come from a config.json anyone may have written, so each is compiled once
into a `NameMatcher` that answers in time bounded before matching starts:
- names compared whole, as substrings, prefixes or suffixes (AWQ `modules_to_not_convert`, GPTQ
  `modules_in_block_to_quantize`, ModelOpt entries and their `X*` / `*X` / `*X*` globs, Quark's plain
  entries) are set lookups of the name's slices: the cost depends on the name's length, not the list's;
- the other fnmatch globs are translated once (case-sensitive, as vLLM on Linux matches them) into one
  regex of alternatives (fnmatch's own cache holds 32,768 patterns: past that every call recompiled);
- regexes (Quark `re:` entries, GPTQ `dynamic` keys) are compiled once and bounded by regex_cost.py.
Limits, each refused naming the field (and the entry) it concerns:
- MAX_LIST_ENTRIES entries per list: 15x the longest real list known (amd/Kimi-K2.5-MXFP4's exclude, 530);
- MAX_ENTRY_CHARS per entry (module names are under 100 characters);
- MAX_PATTERN_WORK steps for one regex on one name (one call holds the GIL for milliseconds at most);
- MAX_MATCH_WORK steps for a whole list over every module name of the model: a few seconds of planning on
  the slowest machine it runs on, so the console stays responsive and a cancelled plan ends soon after.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from meshdeck.core.errors import InputError
from meshdeck.core.regex_cost import CostlyPattern, NameShape, ParsedPattern, parse_pattern, pattern_work

MAX_LIST_ENTRIES = 8192
MAX_ENTRY_CHARS = 1024
MAX_PATTERN_WORK = 1 << 22  # ~4 ms of re
MAX_MATCH_WORK = 1 << 32  # ~4 s of re
CALL_WORK = 512  # one regex call from Python, however quickly it fails
LOOKUP_WORK = 64  # one slice of a name looked up in a set
_WILDCARDS = frozenset("*?[")


class NameMatcher(Protocol):
    """`matcher(name)`: whether vLLM leaves the module unquantized; `work(names)`: steps per name, at most."""

    def __call__(self, name: str) -> bool: ...

    def work(self, names: NameShape) -> int: ...


def entry_list(value: Any, field_name: str) -> list[str]:
    """A list of module names or patterns from a config (None: empty), bounded in length and entry size."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(field_name, f"must be a list of module names, got {_kind(value)}")
    if len(value) > MAX_LIST_ENTRIES:
        raise InputError(field_name, f"has {len(value)} entries; the limit is {MAX_LIST_ENTRIES}")
    for index, entry in enumerate(value):
        if len(entry) > MAX_ENTRY_CHARS:
            raise InputError(
                f"{field_name}[{index}]", f"is {len(entry)} characters long; a module name is under {MAX_ENTRY_CHARS}"
            )
    return list(value)


def _kind(value: Any) -> str:
    return "a list holding something other than strings" if isinstance(value, list) else type(value).__name__


@dataclass(frozen=True)
class Literals:
    """Names matched by set lookups: equal to an entry, or holding one as substring, prefix or suffix."""

    exact: frozenset[str] = frozenset()
    substrings: frozenset[str] = frozenset()
    prefixes: frozenset[str] = frozenset()
    suffixes: frozenset[str] = frozenset()
    _lengths: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for kind in ("substrings", "prefixes", "suffixes"):
            self._lengths[kind] = tuple(sorted({len(entry) for entry in getattr(self, kind)}))

    def __call__(self, name: str) -> bool:
        if name in self.exact:
            return True
        size = len(name)
        lengths = self._lengths
        if any(name[:n] in self.prefixes for n in lengths["prefixes"] if n <= size):
            return True
        if any(name[size - n :] in self.suffixes for n in lengths["suffixes"] if n <= size):
            return True
        substrings = self.substrings
        return any(
            name[i : i + n] in substrings for n in lengths["substrings"] if n <= size for i in range(size - n + 1)
        )

    def work(self, names: NameShape) -> int:
        size = names.longest
        lookups = 1 + len(self._lengths["prefixes"]) + len(self._lengths["suffixes"])
        lookups += sum(size - n + 1 for n in self._lengths["substrings"] if n <= size)
        return lookups * LOOKUP_WORK


def substrings(entries: Iterable[str]) -> Literals:
    """AWQ modules_to_not_convert, GPTQ modules_in_block_to_quantize: any entry inside the module prefix."""
    return Literals(substrings=frozenset(entries))


@dataclass(frozen=True)
class Rule:
    """One regex rule: `skips` says what a module it re.match-es gets (GPTQ's first matching rule decides)."""

    field: str
    pattern: ParsedPattern
    skips: bool


@dataclass(frozen=True)
class Rules:
    """Regexes tried in order with re.match; the first that matches decides (Quark: any match skips)."""

    rules: tuple[Rule, ...]

    def __call__(self, name: str) -> bool:
        for rule in self.rules:
            if rule.pattern.compiled.match(name):
                return rule.skips
        return False

    def work(self, names: NameShape) -> int:
        total = 0
        for rule in self.rules:
            try:
                steps = pattern_work(rule.pattern, names)
            except CostlyPattern as exc:
                raise InputError(rule.field, f"{_shown(rule.pattern.text)} {exc}") from None
            if steps > MAX_PATTERN_WORK:
                raise InputError(
                    rule.field,
                    f"{_shown(rule.pattern.text)} may take up to {steps:.2g} steps on one module name of this model "
                    f"(limit {MAX_PATTERN_WORK:.2g}): Python's re backtracks over each `.*`; write it with fewer",
                )
            total += steps + CALL_WORK
        return total


def compile_rule(text: str, field_name: str, skips: bool = True) -> Rule:
    try:
        return Rule(field_name, parse_pattern(text), skips)
    except CostlyPattern as exc:
        raise InputError(field_name, f"{_shown(text)} {exc}") from None


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else f"{text[:80]!r}…"


@dataclass(frozen=True)
class AnyOf:
    """Skipped when any part says so."""

    parts: tuple[NameMatcher, ...]

    def __call__(self, name: str) -> bool:
        return any(part(name) for part in self.parts)

    def work(self, names: NameShape) -> int:
        return sum(part.work(names) for part in self.parts)


@dataclass(frozen=True)
class Globs:
    """fnmatch globs with wildcards in the middle, as one regex of alternatives (fnmatchcase semantics)."""

    pattern: ParsedPattern | None

    def __call__(self, name: str) -> bool:
        return self.pattern is not None and self.pattern.compiled.match(name) is not None

    def work(self, names: NameShape) -> int:
        return 0 if self.pattern is None else pattern_work(self.pattern, names) + CALL_WORK


def _globs(entries: Sequence[str], field_name: str) -> Globs:
    if not entries:
        return Globs(None)
    text = "|".join(fnmatch.translate(entry) for entry in entries)
    try:
        return Globs(parse_pattern(text, max_chars=None))
    except CostlyPattern as exc:
        raise InputError(field_name, f"holds a glob Python cannot match in bounded time: {exc}") from None


def modelopt_matcher(patterns: Sequence[str], field_name: str) -> NameMatcher:
    """ModelOpt's exclude_modules / ignore after vLLM's `path*` -> `path`, `path.*` rewrite: each entry equal to
    the module prefix, inside it, or matching it as an fnmatch glob."""
    expanded: list[str] = []
    for p in patterns:
        if len(p) >= 2 and p[-1] == "*" and p[-2] != ".":
            expanded += [p[:-1], p[:-1] + ".*"]
        else:
            expanded.append(p)
    # `p in name`, which `p == name` implies (and fnmatch of a p without wildcards is equality); an entry with a
    # wildcard is never inside a module name, which holds none of `*?[`
    inside = {p for p in expanded if not _WILDCARDS & set(p)}
    prefixes, suffixes, general = set(), set(), []
    for p in expanded:
        if not _WILDCARDS & set(p):
            continue
        stem = p.strip("*")
        if _WILDCARDS & set(stem):
            general.append(p)
        elif p == stem + "*":
            prefixes.add(stem)
        elif p == "*" + stem:
            suffixes.add(stem)
        elif p.startswith("*") and p.endswith("*"):
            inside.add(stem)  # `*X*` (any number of stars each side): X inside the name
        else:
            general.append(p)
    literals = Literals(substrings=frozenset(inside), prefixes=frozenset(prefixes), suffixes=frozenset(suffixes))
    return AnyOf((literals, _globs(general, field_name)))


def quark_matcher(patterns: Sequence[str], field_name: str) -> NameMatcher:
    """Quark's `exclude`: an entry equal to the module prefix or, written `re:<regex>`, re.match-ing it
    (quark/utils.py _is_equal_or_regex_match). A pattern that cannot be bounded is refused naming its index."""
    exact = frozenset(p for p in patterns if not p.startswith("re:"))
    rules = tuple(
        compile_rule(p[3:], f"{field_name}[{index}]") for index, p in enumerate(patterns) if p.startswith("re:")
    )
    return AnyOf((Literals(exact=exact), Rules(rules)))


def gptq_matcher(dynamic: Mapping[Any, Any], quantized_only: Sequence[str], field_name: str) -> NameMatcher:
    """GPTQ (vLLM gptq_utils.get_dynamic_override): the first `dynamic` key whose regex re.match-es the module
    decides — `-:<regex>` leaves it unquantized, `+:<regex>` (or a bare regex) overrides its quantization;
    a non-empty modules_in_block_to_quantize lists (as substrings) the only modules quantized."""
    if len(dynamic) > MAX_LIST_ENTRIES:
        raise InputError(f"{field_name}.dynamic", f"has {len(dynamic)} keys; the limit is {MAX_LIST_ENTRIES}")
    rules = []
    for key in dynamic:
        where = f"{field_name}.dynamic[{_shown(str(key))}]"
        if not isinstance(key, str) or len(key) > MAX_ENTRY_CHARS:
            raise InputError(where, f"must be a regex under {MAX_ENTRY_CHARS} characters")
        negative = key.startswith("-:")
        rules.append(compile_rule(key[2:] if negative or key.startswith("+:") else key, where, skips=negative))
    return _Gptq(Rules(tuple(rules)), substrings(quantized_only) if quantized_only else None)


@dataclass(frozen=True)
class _Gptq:
    dynamic: Rules
    quantized_only: Literals | None

    def __call__(self, name: str) -> bool:
        if self.dynamic(name):
            return True
        return self.quantized_only is not None and not self.quantized_only(name)

    def work(self, names: NameShape) -> int:
        return self.dynamic.work(names) + (self.quantized_only.work(names) if self.quantized_only else 0)
