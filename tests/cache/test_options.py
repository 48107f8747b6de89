"""The cache's option table and CacheConfig: defaults from seed 002, aliases, errors naming the flag."""

from __future__ import annotations

import os

import pytest
from strata.server.cache.options import OPTIONS, CacheConfig, CacheConfigError, default_cold_dir


def test_seed_defaults():
    c = CacheConfig.from_values({}, {})
    assert c.conversation_cache_park == "ram"
    assert c.conversation_cache_min_free_mib == 2560
    assert c.conversation_cache_park_min_free_mib == 512
    assert c.conversation_cache_when_full == "evict"
    assert c.restore_ladder is True
    assert c.conversation_cache_cold_dir == default_cold_dir()
    assert c.conversation_cache_cold_dir.endswith(os.path.join("strata", "conversations"))
    on = {lc.name: lc.on for lc in c.levels}
    assert on == {"ram": True, "warm": False, "cold": False}  # disk levels need a budget: off by default


def test_level_needs_folder_and_budget(tmp_path):
    c = CacheConfig.from_values({"conversation-cache-warm-mib": 100}, {})
    assert not c.levels[1].on  # budget without folder
    c = CacheConfig.from_values({"conversation-cache-warm-dir": str(tmp_path)}, {})
    assert not c.levels[1].on  # folder without budget
    c = CacheConfig.from_values({"conversation-cache-warm-dir": str(tmp_path), "conversation-cache-warm-mib": 1}, {})
    assert c.levels[1].on and c.levels[1].budget_bytes == 1 << 20


@pytest.mark.parametrize("alias,canonical,value", [
    ("conversation-cache-spill-dir", "conversation_cache_cold_dir", "/x/y"),
    ("conversation-cache-disk-mib", "conversation_cache_cold_mib", 20480),
])
def test_aliases_set_the_same_field(alias, canonical, value):
    c = CacheConfig.from_values({alias: value}, {})
    assert getattr(c, canonical) == value
    same = CacheConfig.from_values({alias: value, canonical: value}, {})
    assert getattr(same, canonical) == value


def test_alias_conflict_names_both_flags():
    with pytest.raises(CacheConfigError) as e:
        CacheConfig.from_values({"conversation-cache-cold-mib": 100, "conversation-cache-disk-mib": 200}, {})
    assert "--conversation-cache-cold-mib" in str(e.value) and "--conversation-cache-disk-mib" in str(e.value)
    with pytest.raises(CacheConfigError, match="--conversation-cache-spill-dir"):
        CacheConfig.from_values({"conversation_cache_cold_dir": "/a", "conversation_cache_spill_dir": "/b"}, {})


@pytest.mark.parametrize("name,value,needle", [
    ("conversation-cache-park", "ssd", "--conversation-cache-park"),
    ("conversation-cache-min-free-mib", -1, "--conversation-cache-min-free-mib"),
    ("conversation-cache-park-min-free-mib", "lots", "--conversation-cache-park-min-free-mib"),
    ("conversation-cache-when-full", "drop", "--conversation-cache-when-full"),
    ("conversation-cache-cold-max-age-s", -5, "--conversation-cache-cold-max-age-s"),
    ("conversation-cache-mib", 1.5, "--conversation-cache-mib"),
])
def test_bad_values_name_the_flag(name, value, needle):
    with pytest.raises(CacheConfigError, match=needle):
        CacheConfig.from_values({name: value}, {})


@pytest.mark.parametrize("raw,expected", [("0", False), ("off", False), ("1", True), ("on", True), ("", True)])
def test_restore_ladder_variable(raw, expected):
    assert CacheConfig.from_values({}, {"STRATA_RESTORE_LADDER": raw}).restore_ladder is expected


def test_restore_ladder_bad_value_names_the_variable():
    with pytest.raises(CacheConfigError, match="STRATA_RESTORE_LADDER"):
        CacheConfig.from_values({}, {"STRATA_RESTORE_LADDER": "maybe"})


def test_option_table_shape():
    names = {o.name for o in OPTIONS}
    for required in ("conversation-cache-mib", "conversation-cache-warm-dir", "conversation-cache-warm-mib",
                     "conversation-cache-cold-dir", "conversation-cache-cold-mib", "conversation-cache-park",
                     "conversation-cache-min-free-mib", "conversation-cache-park-min-free-mib",
                     "conversation-cache-when-full"):
        assert required in names
    for o in OPTIONS:
        assert o.help and o.flags[0] == "--" + o.name
        assert isinstance(o.default, o.type)


def test_derived_folders(tmp_path):
    c = CacheConfig.from_values({"conversation-cache-cold-dir": str(tmp_path / "cold")}, {})
    assert c.segment_dir == str(tmp_path / "segments")


def test_every_flag_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for o in OPTIONS:
        for flag in o.flags:
            assert f"`{flag}`" in doc, flag
    assert "STRATA_RESTORE_LADDER" in doc


def test_two_stores_on_one_folder_are_refused_when_the_options_are_read(tmp_path):
    same = str(tmp_path / "c")
    with pytest.raises(CacheConfigError, match="--conversation-cache-cold-dir and --conversation-cache-segment-dir "
                                               "name the same folder"):
        CacheConfig.from_values({"conversation_cache_cold_dir": same, "conversation_cache_cold_mib": 8,
                                 "conversation_cache_segment_dir": same, "conversation_cache_segment_mib": 8}, {})
    # a store that is off may name any folder
    CacheConfig.from_values({"conversation_cache_cold_dir": same, "conversation_cache_cold_mib": 8,
                             "conversation_cache_segment_dir": same}, {})
