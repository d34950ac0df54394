"""Profile files as YAML, read safely: the one parser every profile goes through (file, stdin, database).

A profile is untrusted, so the loader (a PyYAML SafeLoader) refuses what a profile never needs and an
attack does: anchors and aliases (YAML bombs), merge keys (`<<`, the same thing without an alias),
nesting deeper than MAX_PROFILE_DEPTH (the composer recurses per level, so this is checked before
Python's recursion limit is reached), a key given twice in one mapping (YAML keeps the last one
silently, so what a reviewer reads is not what runs), a number over MAX_INT_CHARS characters (Python
cannot even convert one of 4,300 digits) and text over MAX_PROFILE_BYTES. Every refusal
is an InputError naming the file and the line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable

MAX_PROFILE_BYTES = 256 * 1024
MAX_INT_CHARS = 100  # the longest number a profile may hold, as written
MAX_PROFILE_DEPTH = 16  # a real profile nests 3 deep (vllm -> extra_args -> item); anything far deeper is hostile
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.YAMLError):
    """Valid YAML that a profile must not use; `mark` is where, `note` adds to the line number."""

    def __init__(self, problem: str, mark: Any, note: str = "") -> None:
        super().__init__(problem)
        self.problem, self.mark, self.note = problem, mark, note

    def describe(self) -> str:
        where = f" at line {self.mark.line + 1}, column {self.mark.column + 1}" if self.mark else ""
        return f"{self.problem}{where}{self.note}"


class ProfileLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases, merge keys, deep nesting and keys given twice."""

    _depth = 0

    if TYPE_CHECKING:  # types-PyYAML leaves the pure-Python parser's methods untyped

        def peek_event(self) -> yaml.Event: ...

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_PROFILE_DEPTH:
            mark = self.peek_event().start_mark
            raise _Refused(f"nested deeper than {MAX_PROFILE_DEPTH} levels", mark, "; a profile needs at most 3")
        self._depth += 1
        try:
            return self._compose_checked(parent, index)
        finally:
            self._depth -= 1

    def _compose_checked(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused("aliases (*name) are not allowed in a profile", event.start_mark)
        if getattr(event, "anchor", None):
            raise _Refused("anchors (&name) are not allowed in a profile", event.start_mark)
        return super().compose_node(parent, index)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        """An int no longer than MAX_INT_CHARS: Python refuses to convert one of over 4,300 digits (a
        traceback from inside PyYAML), and no profile value comes near even this bound."""
        if len(node.value) > MAX_INT_CHARS:
            raise _Refused(
                f"a number {len(node.value)} characters long", node.start_mark, "; put it in quotes if it is text"
            )
        value: int = self.construct_yaml_int(node)
        return value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                raise _Refused("merge keys (<<) are not allowed in a profile", key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first.setdefault(key, key_node.start_mark)
            except TypeError:
                continue  # an unhashable key: the base class refuses it with its own message
            if seen is not key_node.start_mark:
                shown = printable(str(key))
                raise _Refused(f"duplicate key '{shown}'", key_node.start_mark, f" (first at line {seen.line + 1})")
        return super().construct_mapping(node, deep=deep)


ProfileLoader.add_constructor("tag:yaml.org,2002:int", ProfileLoader.construct_bounded_int)


def profile_text(text: str | bytes, source: str) -> str:
    """The text of a profile file: at most MAX_PROFILE_BYTES of UTF-8."""
    if isinstance(text, bytes):
        if len(text) > MAX_PROFILE_BYTES:
            raise InputError(source, f"is larger than the {MAX_PROFILE_BYTES}-byte limit for a profile")
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(source, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PROFILE_BYTES:
        raise InputError(source, f"is larger than the {MAX_PROFILE_BYTES}-byte limit for a profile")
    return text


def _refusal(exc: yaml.YAMLError, source: str) -> InputError:
    if isinstance(exc, _Refused):
        return InputError(source, exc.describe())
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return InputError(source, f"not valid YAML{where}: {printable(problem)}")


def load_yaml(text: str | bytes, source: str) -> tuple[yaml.Node | None, Any]:
    """A profile file's node tree (where every value is written) and its data, not yet validated as a
    profile. Raises InputError naming the file (and line)."""
    decoded = profile_text(text, source)
    try:
        loader = ProfileLoader(decoded)  # its reader refuses characters YAML does not allow, here already
    except yaml.YAMLError as exc:
        raise _refusal(exc, source) from None
    try:
        node = loader.get_single_node()
        return node, None if node is None else loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _refusal(exc, source) from None
    finally:
        loader.dispose()


def parse_yaml(text: str | bytes, source: str) -> Any:
    """The data in a profile file (not validated as a profile yet). Raises InputError naming the file."""
    return load_yaml(text, source)[1]
