"""How long Python's `re` may take to match a checkpoint's exclusion regex, bounded before any matching runs.

A quantized checkpoint's config.json names the modules it leaves unquantized with regexes (Quark `exclude`
entries `re:<regex>`, GPTQ `dynamic` keys); vLLM applies them with `re.match` (its GPTQ code imports the
`regex` package under that name, which matches these patterns as `re` does) and so does the planner, on
module names it builds itself (`model.layers.<i>.self_attn.q_b_proj`, under 64 characters). The file may
come from anyone, and `re` is a backtracking matcher: `(.*.*)*x$` takes 27 s on a 16-character name and
ten times longer per two more characters, inside one C call that holds the GIL (the console's GUI thread
gets no tick, Ctrl+C is not seen).

Why a static bound and not a time limit: `re` has no timeout; the `regex` package has one, but it is a
third-party import into `core` (stdlib only) and a different engine from the `re` whose semantics the
planner reproduces; matching in a killable subprocess is I/O, which `core` does not do, and makes the
answer depend on the machine's load. A bound read from the pattern is deterministic — the same config
plans or is refused the same way on every machine, in the CLI, the console and the tests — and refuses
before the first match.

The bound, computed on the tree `re` itself parses and compiles (`re._parser`):
- `paths(node)`: the ways a node can match from one start, each a backtracking choice; `work(node)`: the
  steps to try them all. A sequence x·rest costs work(x) + paths(x)·work(rest); alternatives add; a
  lookaround or an atomic group costs its body and leaves one way.
- A repeat of one character class (`.*`, `\\d+`, `[a-z_]{1,8}`) can stop at most (longest run of that class
  in a module name + 1) places: digits run as long as a layer index, a class without "." as long as a
  dot-free segment, anything else as long as the name. A greedy one followed by a literal character `c`
  tries what follows only where the name holds a `c` (re skips the other places).
- A repeat of a part that matches in one way only (`(?:\\.\\d)*`) turns deterministically, at most
  name-length / part-width times. A repeat without upper bound of a part that can match in more than one
  way (a nested repeat or an alternation: `(.*.*)*`, `(a|ab)+`) or can match nothing (`(?:\\b)*`) is the
  exponential case: refused outright, whatever the names. A bounded one (`(a|b){1,3}`) costs paths^count.
- A construct this module does not know is refused (it fails closed).
Weights make a step about a nanosecond of `re` or less (a class item 1, an alternative tried 16, a turn of a
group repeat 128, a stop of a lazy repeat 4: on this project's 2-core machine, 30 adversarial patterns ran at
0.8 ns per step at worst). module_match.py refuses a pattern over MAX_PATTERN_WORK (one call holds the GIL for
milliseconds at most) and a list whose work over all the model's module names exceeds MAX_MATCH_WORK (seconds
of planning). Real patterns cost little: Kimi-K2.5-MXFP4's `language_model\\.model\\.layers\\.\\d+\\.self_attn\\..*`
~3 · 10^2 steps, GPTQModel's `.*\\.18\\..*gate.*` ~3 · 10^3.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# re's own parser and opcodes: the tree analysed is the one re compiles and runs
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

MAX_PATTERN_CHARS = 256  # a real exclusion regex is under 100 characters
BRANCH_WORK = 16  # an alternative tried: re saves and restores its marks
REPEAT_TURN_WORK = 128  # one turn of a repeat over more than one class item (REPEAT / MAX_UNTIL): ~100 ns
LAZY_STOP_WORK = 4  # a lazy repeat re-enters what follows at every stop
_SATURATED = 1 << 64  # costs are capped here, far above every limit
_SINGLE_CHARACTER = frozenset({sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN, sre.CATEGORY})
_ONE_STEP = _SINGLE_CHARACTER | {sre.AT}  # one way through, one step
_REPEATS = frozenset({sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT})
_CASE_FLAGS = re.IGNORECASE | re.LOCALE
_INLINE_CASE_FLAG = re.compile(r"\(\?[a-zA-Z-]*[iL]")  # (?i), (?ai:…), (?-i:…): read as "maybe ignore case"


class CostlyPattern(ValueError):
    """Not a regex Python compiles, or one whose matching time cannot be bounded."""


@dataclass(frozen=True)
class NameShape:
    """What bounds a repeat on the module names a pattern is matched against.

    Built from the names with every digit written 0 ("templates"): the layer index is the only number in a
    module name, so the templates are a handful for any number of layers and every digit may be any digit."""

    longest: int  # characters of the longest name
    longest_segment: int  # the longest run without a "."
    longest_digits: int  # the longest run of digits (a layer index)
    alphabet: frozenset[str]  # every character the names may use; empty: unknown (anything)
    templates: tuple[str, ...] = ()
    _counts: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, names: Iterable[str]) -> NameShape:
        templates = tuple(sorted({re.sub(r"[0-9]", "0", name) for name in names}))
        text = "\n".join(templates)
        alphabet = set(text) - {"\n"}
        if "0" in alphabet:
            alphabet |= set("0123456789")
        return cls(
            longest=max(map(len, templates), default=0),
            longest_segment=max(map(len, re.split(r"[.\n]", text)), default=0),
            longest_digits=max(map(len, re.findall(r"0+", text)), default=0),
            alphabet=frozenset(alphabet),
            templates=templates,
        )

    def most_in_one_name(self, char: str) -> int:
        """How many times `char` occurs in one name at most (a digit: as many as the name's digits)."""
        if not self.templates:
            return self.longest
        key = "0" if char.isdigit() and char.isascii() else char
        if key not in self._counts:
            self._counts[key] = max(template.count(key) for template in self.templates)
        return self._counts[key]


# What parse_pattern assumes before the names are known: it refuses what no names could make cheap.
ANY_NAMES = NameShape(longest=MAX_PATTERN_CHARS, longest_segment=256, longest_digits=256, alphabet=frozenset())


@dataclass(frozen=True)
class ParsedPattern:
    """A regex compiled by `re`, with the tree its cost is read from."""

    text: str
    compiled: re.Pattern[str]
    tree: Any  # re._parser.SubPattern
    ignore_case: bool


def parse_pattern(text: str, max_chars: int | None = MAX_PATTERN_CHARS) -> ParsedPattern:
    """Compile `text` with `re` and check its cost can be bounded; else CostlyPattern saying why."""
    if max_chars is not None and len(text) > max_chars:
        raise CostlyPattern(f"is {len(text)} characters long; the limit is {max_chars}")
    try:
        compiled = re.compile(text)
        tree = _parser.parse(text)
    except re.error as exc:
        raise CostlyPattern(f"is not a regular expression: {exc}") from None
    except (OverflowError, RecursionError, ValueError) as exc:
        raise CostlyPattern(f"is not a regular expression Python can compile: {exc}") from None
    ignore_case = bool(tree.state.flags & _CASE_FLAGS) or _INLINE_CASE_FLAG.search(text) is not None
    parsed = ParsedPattern(text, compiled, tree, ignore_case)
    pattern_work(parsed, ANY_NAMES)
    return parsed


def pattern_work(parsed: ParsedPattern, names: NameShape) -> int:
    """An upper bound on the steps of one `parsed.compiled.match(name)` for names of this shape."""
    try:
        return _Bound(names, parsed.ignore_case).sequence(parsed.tree)[1]
    except RecursionError:
        raise CostlyPattern("nests groups too deeply to be bounded") from None


def _capped(value: int) -> int:
    return min(value, _SATURATED)


class _Bound:
    def __init__(self, names: NameShape, ignore_case: bool) -> None:
        self.names = names
        self.ignore_case = ignore_case  # a class may then match letters it does not list: bounded as anything
        self._runs: dict[str, int] = {}

    def sequence(self, items: Any) -> tuple[int, int]:
        """(paths, work) of items matched one after the other."""
        items = list(items)
        paths, work = 1, 0
        for index in range(len(items) - 1, -1, -1):
            op, av = items[index]
            if op in _ONE_STEP:
                work += 1
                continue
            following = items[index + 1] if index + 1 < len(items) else None
            item_paths, item_work = self.item(op, av, following)
            work = _capped(item_work + item_paths * work)
            paths = _capped(item_paths * paths)
        return paths, work

    def item(self, op: Any, av: Any, following: Any) -> tuple[int, int]:
        if op in _ONE_STEP:
            return 1, 1
        if op is sre.SUBPATTERN:
            return self.sequence(av[3])
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            return 1, self.sequence(av[1])[1]
        if op is sre.ATOMIC_GROUP:
            return 1, self.sequence(av)[1]
        if op is sre.BRANCH:
            costs = [self.sequence(branch) for branch in av[1]]
            work = sum(w for _, w in costs) + BRANCH_WORK * len(costs)
            return _capped(sum(p for p, _ in costs)), _capped(work)
        if op is sre.GROUPREF:
            return 1, self.names.longest + 1
        if op is sre.GROUPREF_EXISTS:
            yes = self.sequence(av[1])
            no = self.sequence(av[2]) if av[2] is not None else (1, 1)
            return _capped(yes[0] + no[0]), _capped(yes[1] + no[1] + BRANCH_WORK)
        if op in _REPEATS:
            return self.repeat(op, av, following)
        raise CostlyPattern(f"uses {op}, a construct meshdeck cannot bound; write the pattern without it")

    def repeat(self, op: Any, av: Any, following: Any) -> tuple[int, int]:
        low, high, body = av
        possessive = op is sre.POSSESSIVE_REPEAT
        if len(body) == 1 and body[0][0] in _SINGLE_CHARACTER:
            top = min(high, self.run(*body[0]))
            stops = max(top - low + 1, 1)
            if op is sre.MIN_REPEAT:
                return stops, top + LAZY_STOP_WORK * stops
            tried = stops
            if following is not None and following[0] is sre.LITERAL and not self.ignore_case:
                tried = max(min(stops, self.names.most_in_one_name(chr(following[1]))), 1)
            return (1 if possessive else tried), top + stops + 1
        body_paths, body_work = self.sequence(body)
        width = body.getwidth()[0]
        unbounded = high >= sre.MAXREPEAT
        if unbounded and body_paths > 1:
            raise CostlyPattern(
                "repeats without bound a part that can match in more than one way (a repeat or an alternation "
                "inside `*`, `+` or `{n,}`, as in `(.*.*)*`): Python's re can take exponential time on it; "
                "write it without the nested repeat"
            )
        if unbounded and width == 0:
            raise CostlyPattern("repeats without bound a part that can match nothing; write it without that repeat")
        turns = min(high, self.names.longest // width) if width else high
        turn_work = body_work + REPEAT_TURN_WORK
        if body_paths == 1:
            stops = max(turns - low + 1, 1)
            return (1 if possessive else stops), _capped(turns * turn_work + stops)
        if turns * body_paths.bit_length() > 64:
            return _SATURATED, _SATURATED
        ways = (turns + 1) * body_paths**turns
        return (1 if possessive else _capped(ways)), _capped(ways * turn_work)

    def run(self, op: Any, av: Any) -> int:
        """The longest run of name characters one class item matches: how far a repeat of it can reach."""
        names = self.names
        if self.ignore_case or not names.alphabet:
            return names.longest
        key = f"{op}:{av}"
        if key not in self._runs:
            matched = {char for char in names.alphabet if _matches(op, av, char)}
            if "." in matched:
                self._runs[key] = names.longest
            elif any(not char.isdigit() for char in matched):
                self._runs[key] = names.longest_segment
            else:
                self._runs[key] = names.longest_digits if matched else 0
        return self._runs[key]


def _matches(op: Any, av: Any, char: str) -> bool:
    """Whether one class item matches `char` (an ASCII character of a module name); True when unsure."""
    code = ord(char)
    if op is sre.LITERAL:
        return bool(av == code)
    if op is sre.NOT_LITERAL:
        return bool(av != code)
    if op is sre.CATEGORY:
        return _in_category(av, char) is not False
    if op is sre.IN:
        negated = any(member_op is sre.NEGATE for member_op, _ in av)
        found = [_in_set(member_op, member_av, char) for member_op, member_av in av if member_op is not sre.NEGATE]
        if None in found:
            return True
        return any(found) != negated
    return True  # ANY, and anything not a class


def _in_set(op: Any, av: Any, char: str) -> bool | None:
    """Whether one member of a `[...]` set matches `char`; None for a member this module does not know."""
    if op is sre.LITERAL:
        return bool(av == ord(char))
    if op is sre.RANGE:
        return bool(av[0] <= ord(char) <= av[1])
    if op is sre.CATEGORY:
        return _in_category(av, char)
    return None


_CATEGORIES: dict[str, Callable[[str], bool]] = {
    "CATEGORY_DIGIT": str.isdigit,
    "CATEGORY_SPACE": str.isspace,
    "CATEGORY_WORD": lambda char: char.isalnum() or char == "_",
    "CATEGORY_LINEBREAK": lambda char: char == "\n",
}


def _in_category(category: Any, char: str) -> bool | None:
    """Whether `char` is in a category (\\d, \\W, …); None for a category this module does not know."""
    name = str(category)
    negated = name.startswith("CATEGORY_NOT_")
    test = _CATEGORIES.get(name.replace("CATEGORY_NOT_", "CATEGORY_"))
    if test is None:
        return None
    return bool(test(char)) != negated
