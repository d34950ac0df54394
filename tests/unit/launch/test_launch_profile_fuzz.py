"""The profile loader under fuzzing: whatever text or mapping arrives, the answer is a Profile or an
InputError that names the file (and field) in one printable line, never another exception; valid
profiles round-trip exactly through dump_profile / load_profile, and through the secret handling
(keyring references in, values back, masks that hold no secret)."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.core.secret_env import MASK
from meshdeck.launch.profile import (
    ENV_NAME_PATTERN,
    HOST_PATTERN,
    NAME_PATTERN,
    Profile,
    dump_profile,
    launcher_flag_reason,
    load_profile,
    profile_from_mapping,
    profile_to_mapping,
    reserved_env_reason,
)
from meshdeck.launch.profile_secrets import masked_profile_text, reference_for, replace_env_values, with_env

SOURCE = "fuzz.yaml"
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ_SLOW = settings(FUZZ, max_examples=200)  # each example parses the text several times

# text a profile may hold: no control characters (C0, DEL, C1) and no lone surrogates
clean_text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40)


def _program(min_size: int = 1) -> st.SearchStrategy[str]:
    return st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=min_size, max_size=30).filter(
        lambda s: not s.startswith("-")
    )


env_names = st.from_regex(ENV_NAME_PATTERN, fullmatch=True).filter(lambda k: reserved_env_reason(k) is None)


@st.composite
def valid_profiles(draw: st.DrawFn) -> Profile:
    hosts = draw(st.lists(st.from_regex(HOST_PATTERN, fullmatch=True), min_size=1, max_size=4, unique=True))
    gpus_per_node = draw(st.integers(1, 8))
    world = len(hosts) * gpus_per_node
    tensor = draw(st.sampled_from([d for d in range(1, world + 1) if world % d == 0]))
    rest = world // tensor
    pipeline = draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
    vllm: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "max_model_len": st.integers(16, 1_048_576) | st.none(),
                "gpu_memory_utilization": st.floats(0.01, 1.0),
                "kv_cache_dtype": st.sampled_from(["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"]),
                "max_num_seqs": st.integers(1, 65536) | st.none(),
                "port": st.integers(1, 65535),
                "distributed_backend": st.sampled_from(["mp", "ray"]),
                "speculative_mtp": st.booleans(),
                "extra_args": st.lists(clean_text.filter(lambda a: launcher_flag_reason(a) is None), max_size=4),
                "executable": _program(),
            },
        )
    )
    torch: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "script": _program(),
                "args": st.lists(clean_text, max_size=4),
                "master_port": st.integers(1, 65535),
                "python": _program(),
            },
        )
    )
    data = {
        "name": draw(st.from_regex(NAME_PATTERN, fullmatch=True)),
        "model": draw(_program()),
        "engine": draw(st.sampled_from(["vllm", "torch"])),
        "hosts": hosts,
        "gpus_per_node": gpus_per_node,
        "layout": {
            "tensor_parallel": tensor,
            "pipeline_parallel": pipeline,
            "data_parallel": rest // pipeline,
            "expert_parallel": draw(st.booleans()),
        },
        "vllm": vllm,
        "torch": torch,
        "env": draw(st.dictionaries(env_names, clean_text, max_size=5)),
    }
    return profile_from_mapping(data)


def _answers(load: Any, *args: Any) -> Profile | InputError:
    """What the loader gives: a Profile, or an InputError naming the source in one printable line."""
    try:
        return load(*args)
    except InputError as exc:
        assert exc.field.startswith(SOURCE), exc.field
        assert str(exc).isprintable(), repr(str(exc))
        return exc


# -- arbitrary input ---------------------------------------------------------------------------------

YAML_TOKENS = [
    "name: ", "model: ", "hosts: ", "gpus_per_node: ", "layout: ", "vllm: ", "torch: ", "env: ", "engine: ",
    "tensor_parallel: ", "extra_args: ", "HF_TOKEN: ", "MESHDECK_X: ", "\n", "\n  ", "  ", "- ", "{", "}", "[", "]",
    ", ", ": ", "? ", "&a ", "*a", "<<: ", "!!python/object:os.system ", "!!binary ", "'", '"', "# c", "|", ">-",
    "---\n", "...\n", "%YAML 1.1\n", "\t", "1e400", "0x1F", "~", "null", "true", "8", "-1", ".inf", "\\x1b", "\x1b",
    "\r", "\x00", "\u2028", "\ufeff", "\ud800", "\x9b", "é", "gpu-a", "deepseek-ai/DeepSeek-V3.2", "=", "keyring:meshdeck-profile-env/a/B",
]  # fmt: skip
yaml_like = st.lists(st.sampled_from(YAML_TOKENS) | st.text(max_size=4), max_size=40).map("".join)


any_characters = st.characters() | st.characters(codec=None, categories=["Cs"])  # lone surrogates too


@FUZZ
@given(text=st.text(any_characters, max_size=400) | yaml_like)
def test_any_text_gives_a_profile_or_an_error_naming_the_file(text: str) -> None:
    _answers(load_profile, text, SOURCE)


@FUZZ
@given(data=st.binary(max_size=400))
def test_any_bytes_give_a_profile_or_an_error_naming_the_file(data: bytes) -> None:
    _answers(load_profile, data, SOURCE)


@FUZZ
@given(profile=valid_profiles(), edits=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(YAML_TOKENS)),
                                                min_size=1, max_size=4))  # fmt: skip
def test_a_valid_profile_with_edits_gives_a_profile_or_an_error_naming_the_file(
    profile: Profile, edits: list[tuple[int, str]]
) -> None:
    text = dump_profile(profile)
    for position, token in edits:
        cut = position % (len(text) + 1)
        text = text[:cut] + token + text[cut + (position % 3) :]  # insert, or replace one or two characters
    _answers(load_profile, text, SOURCE)


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8),
                                                                                             inner, max_size=3),
                        max_leaves=10)  # fmt: skip


@FUZZ
@given(profile=valid_profiles(), path=st.lists(st.sampled_from(
    ["name", "model", "engine", "hosts", "gpus_per_node", "layout", "vllm", "torch", "env", "tensor_parallel",
     "extra_args", "executable", "script", "args", "python", "port", "HF_TOKEN", "MESHDECK_WORKLOAD_BUNDLE", "x"]),
    min_size=1, max_size=3), value=anything)  # fmt: skip
def test_a_mapping_near_the_schema_gives_a_profile_or_an_error_naming_the_field(
    profile: Profile, path: list[str], value: Any
) -> None:
    data: Any = profile_to_mapping(profile)
    target = data
    for key in path[:-1]:  # walk down as far as the mapping goes, then set the value there
        if not isinstance(target.get(key), dict):
            break
        target = target[key]
    target[path[-1]] = value
    answer = _answers(profile_from_mapping, data, SOURCE)
    if isinstance(answer, InputError) and answer.field != SOURCE:
        assert answer.field.startswith(f"{SOURCE}: "), answer.field  # a field is named


# -- valid profiles round-trip ----------------------------------------------------------------------


@FUZZ
@given(profile=valid_profiles())
def test_a_valid_profile_round_trips_exactly(profile: Profile) -> None:
    assert load_profile(dump_profile(profile)) == profile
    assert profile_from_mapping(profile_to_mapping(profile)) == profile
    assert dump_profile(load_profile(dump_profile(profile))) == dump_profile(profile)


secret_values = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=30) | st.text(
    string.ascii_letters, min_size=12, max_size=20
)


@FUZZ_SLOW
@given(profile=valid_profiles(), secret=secret_values, flow=st.booleans())
def test_a_secret_swapped_for_its_reference_and_back_gives_the_profile_again(
    profile: Profile, secret: str, flow: bool
) -> None:
    with_secret = with_env(profile, {"HF_TOKEN": secret})
    text = dump_profile(with_secret)
    if flow:  # the same profile, its env written inline: `env: {A: b, HF_TOKEN: ...}`
        text = text.replace("env:\n", "env: ").replace("\n  ", ", ") if "env:\n" in text else text
    if load_profile(text) != with_secret:
        return  # the inline rewrite above changed what it says; nothing to check on this one
    reference = reference_for(profile.name, "HF_TOKEN")
    stored = replace_env_values(text, {"HF_TOKEN": reference})
    if stored is None:  # the text could not be kept: the canonical form is used, and must carry it
        stored = dump_profile(with_env(with_secret, {"HF_TOKEN": reference}))
    assert load_profile(stored) == with_env(with_secret, {"HF_TOKEN": reference})
    back = replace_env_values(stored, {"HF_TOKEN": secret})
    assert back is not None and load_profile(back) == with_secret
    masked = masked_profile_text(text)
    assert load_profile(masked) == with_env(with_secret, {"HF_TOKEN": MASK})
    if len(secret) >= 12 and secret.isalpha() and secret not in dump_profile(profile):
        assert secret not in masked


@FUZZ
@given(text=st.text(max_size=300) | yaml_like, secret=st.text(string.ascii_letters, min_size=12, max_size=20))
def test_masking_any_text_never_raises_and_hides_secret_values(text: str, secret: str) -> None:
    shown = masked_profile_text(f"env:\n  HF_TOKEN: {secret}\n{text}")
    assert isinstance(shown, str)
    if secret not in text:
        assert secret not in shown
