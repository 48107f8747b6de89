"""The start-up line says the files the segment tier and the system-prompt cache skipped and removed, as it says
the warm and cold levels': their warnings and /metrics counted them, the INFO line did not ("segment ... (0
entries, 0 MiB)" over a folder whose damaged files had just been removed).

Real files: a cold entry's sidecar and image, copied into each store's folder with the image cut in half (damaged,
Strata's: removed), and an empty sidecar beside it in the segment folder (not recognisably Strata's: skipped)."""

from __future__ import annotations

import os
import shutil

from tests.cache.conftest import history
from tests.cache.test_faults import one_cold_entry

STORES = {"conversation_cache_segment_mib": 32, "conversation_cache_system_prompt_mib": 32}


def damaged_copy(entry, folder) -> None:
    os.makedirs(folder, exist_ok=True)
    shutil.copy(entry.sidecar_path, folder)
    image = shutil.copy(entry.image_path, folder)
    with open(image, "r+b") as f:
        f.truncate(entry.image_bytes // 2)


def test_the_start_up_line_says_the_stores_files_skipped_and_removed(make_cache, folders):
    _, _, entry = one_cold_entry(make_cache, history(1, 60))
    damaged_copy(entry, folders["segments"])
    damaged_copy(entry, folders["system"])
    open(os.path.join(folders["segments"], "strata-conv-" + "0" * 32 + ".json"), "w").close()
    again = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100, **STORES)
    seg, sp = again.segments.level, again.system_prompts.level
    assert sum(seg.removed.values()) == 1 and sum(seg.skipped.values()) == 2, (seg.skipped, seg.removed)
    assert sum(sp.removed.values()) == 1 and sum(sp.skipped.values()) == 1, (sp.skipped, sp.removed)
    line = again.describe()
    # before: "(0 entries, 0 MiB)" for both
    assert f"segment {folders['segments']} 32 MiB on (0 entries, 0 MiB, 1 skipped, 1 removed)" in line, line
    assert f"system-prompt cache {folders['system']} 32 MiB on (0 entries, 0 MiB, 1 removed)" in line, line


def test_a_store_with_nothing_skipped_says_no_files(make_cache, folders):
    line = make_cache(conversation_cache_mib=0, **STORES).describe()
    assert f"segment {folders['segments']} 32 MiB on (0 entries, 0 MiB);" in line, line
