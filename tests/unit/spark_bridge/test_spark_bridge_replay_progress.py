"""A replay partition's progress journal (spark_bridge/replay_progress.py) read back as the whole
files of earlier versions were: offsets, standing, compaction, torn lines, a new run's rewrite."""

from __future__ import annotations

import json

from headrace.spark_bridge.replay_progress import (COMPACT_FACTOR, ProgressJournal, doubt_range, load_progress,
                                                   run_total)


def test_a_save_writes_only_the_keys_that_moved_and_reads_back_whole(tmp_path):
    journal = ProgressJournal(str(tmp_path), 3)
    for k in range(1000):
        journal.note(f"k.{k}", k)
    journal.save("r1", 0, -1, 5000)  # the first save of a run writes the file whole
    first = (tmp_path / "part-3.json").stat().st_size
    journal.note("k.7", 42)
    journal.note("k.9", 43)
    journal.save("r1", 2, 43, 5000)
    lines = (tmp_path / "part-3.json").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["offsets"] == {"k.7": 42, "k.9": 43}
    assert (tmp_path / "part-3.json").stat().st_size - first < 200  # not the 1,000 keys again
    done = load_progress(str(tmp_path))
    assert len(done) == 1000 and done["k.7"] == 42 and done["k.9"] == 43 and done["k.8"] == 8
    assert doubt_range(str(tmp_path)) == (43, 5000)
    assert run_total(str(tmp_path), "r1") == 2 and run_total(str(tmp_path), "r0") == 0


def test_the_journal_is_rewritten_whole_once_it_outgrows_its_keys(tmp_path):
    journal = ProgressJournal(str(tmp_path), 0)
    saves = 0
    offset = 0
    while True:
        for k in range(10):
            offset += 1
            journal.note(f"k.{k}", offset)
        journal.save("r", offset, offset, offset)
        saves += 1
        lines = (tmp_path / "part-0.json").read_text().splitlines()
        if len(lines) == 1 and saves > 1:
            break
        assert saves < 1000
    assert saves * 11 > COMPACT_FACTOR * 10  # it grew first
    assert load_progress(str(tmp_path)) == {f"k.{k}": offset - 9 + k for k in range(10)}


def test_a_torn_last_line_leaves_the_lines_before_it(tmp_path):
    journal = ProgressJournal(str(tmp_path), 1)
    journal.note("a", 10)
    journal.save("r", 1, 10, 20)
    journal.note("a", 15)
    journal.save("r", 2, 15, 20)
    with (tmp_path / "part-1.json").open("a") as f:
        f.write('{"offsets": {"a": 99}, "run": "r", "published": 3, "thr')  # killed mid-write
    assert load_progress(str(tmp_path)) == {"a": 15}
    assert doubt_range(str(tmp_path)) == (15, 20)
    assert run_total(str(tmp_path), "r") == 2


def test_a_new_run_starts_its_file_afresh_and_reads_files_of_one_line(tmp_path):
    (tmp_path / "part-2.json").write_text(json.dumps({"offsets": {"old": 5, "kept": 7}, "run": "r0",
                                                      "published": 9, "through": 7, "bound": 8}))
    assert load_progress(str(tmp_path)) == {"old": 5, "kept": 7}  # as earlier versions wrote it
    journal = ProgressJournal(str(tmp_path), 2)
    journal.note("kept", 7)  # a key this run sees is listed again from what was loaded
    journal.save("r1", 0, 7, 30)
    assert load_progress(str(tmp_path)) == {"kept": 7}  # as a whole-file save of the keys it saw did
    assert doubt_range(str(tmp_path)) == (7, 30)
