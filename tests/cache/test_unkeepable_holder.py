"""What the scheduler asks before it overwrites a superseded copy without a park (parking.kept_elsewhere): whether
the cache can keep a history of a size (`takes_whole`: a disk level's whole budget, else RAM's) and whether it
keeps a longer history of the copy already (`keeps_longer`). Simulated engine: 16 KiB of KV a token, so a
40-token history is 640 KiB and one of 80 tokens 1.25 MiB."""

from __future__ import annotations

from tests.cache.conftest import history, park_history

MIB = 1 << 20


def test_takes_whole_counts_the_disk_levels_when_there_are_any(make_cache):
    cache = make_cache(conversation_cache_mib=4, conversation_cache_cold_mib=1)
    assert cache.takes_whole(MIB) and not cache.takes_whole(MIB + 1)      # RAM's 4 MiB do not outlive a stop


def test_takes_whole_counts_ram_without_a_disk_level(make_cache):
    cache = make_cache(conversation_cache_mib=1)
    assert cache.takes_whole(MIB) and not cache.takes_whole(MIB + 1)


def test_keeps_longer_wants_a_longer_history_the_cache_can_keep(make_cache):
    cache = make_cache(conversation_cache_mib=4, conversation_cache_cold_mib=1)
    short, long = history(1, 40), history(1, 80)
    assert long[:40] == short
    assert not cache.keeps_longer(short)
    park_history(cache, long)                     # in RAM, 1.25 MiB: larger than the cold level's whole budget
    assert not cache.keeps_longer(short)          # lost at the stop: the copy is not covered by it
    park_history(cache, history(1, 60))           # 960 KiB: the cold level takes it
    assert cache.keeps_longer(short) and cache.keeps_longer(history(1, 60))
    assert not cache.keeps_longer(history(2, 40))


def test_a_longer_history_no_disk_level_takes_leaves_the_shorter_one_in_ram(make_cache, folders):
    """A longer history parked into RAM discarded the shorter ones there at once (it supersedes them); one larger
    than every disk level's whole budget never reaches disk, so at the stop the conversation was gone from every
    level. Now the shorter one stays, and the stop writes it (the longer is refused)."""
    cache = make_cache(conversation_cache_mib=4, conversation_cache_cold_mib=1)
    short, long = history(1, 40), history(1, 80)
    park_history(cache, short)
    park_history(cache, long)
    assert len(cache.ram.entries) == 2           # before: 1, the shorter one superseded
    cache.close(persist=True)
    reopened = make_cache(conversation_cache_mib=4, conversation_cache_cold_mib=1)
    hit = reopened.lookup(long)
    assert hit is not None and hit.n_tokens == 40   # before: None
