"""Fuzz the config loader: any YAML mapping is a ClusterConfig or a ConfigError naming a key."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mooncake_core.config.loader import ConfigError, load_config, parse_config
from mooncake_core.config.models import ClusterConfig

FUZZ = settings(derandomize=True, max_examples=300, deadline=None)

# Real section and field names, so the fuzzer reaches the validators, not only "unknown key".
SECTIONS = sorted(ClusterConfig.model_fields)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(["64MiB", "1GiB", "-1", "tcp", "auto", "0.5", ""]),
)
value = st.recursive(
    scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _section_fields(name: str) -> list[str]:
    ann = ClusterConfig.model_fields[name].annotation
    fields = getattr(ann, "model_fields", None)
    return sorted(fields) if fields else ["x"]


section_body = st.sampled_from(SECTIONS).flatmap(
    lambda s: st.tuples(
        st.just(s),
        st.one_of(
            value,
            st.dictionaries(st.sampled_from([*_section_fields(s), "bogus"]), value, max_size=4),
        ),
    )
)
mapping = st.lists(section_body, max_size=4).map(dict) | st.dictionaries(
    st.text(max_size=8), value, max_size=3
)


def _check(exc: ConfigError) -> None:
    assert exc.problems, "a ConfigError must list at least one problem"
    for p in exc.problems:
        key, sep, _ = p.partition(": ")
        assert sep and key, f"problem does not name a key: {p!r}"


@FUZZ
@given(mapping)
def test_fuzz_config_mapping_valid_or_config_error(doc: dict) -> None:
    try:
        cfg = parse_config(doc, source="fuzz.yaml")
    except ConfigError as e:
        assert e.source == "fuzz.yaml"
        _check(e)
    else:
        assert isinstance(cfg, ClusterConfig)


@settings(
    derandomize=True,
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    text=st.one_of(
        st.text(max_size=80), mapping.map(lambda d: yaml.safe_dump(d, allow_unicode=True))
    )
)
def test_fuzz_config_file_text_valid_or_config_error(tmp_path: Path, text: str) -> None:
    p = tmp_path / "mooncake.yaml"
    p.write_text(text, encoding="utf-8")
    try:
        load_config(p)
    except ConfigError as e:
        assert e.source == str(p)
        _check(e)
