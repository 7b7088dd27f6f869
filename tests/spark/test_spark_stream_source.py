"""The ``headrace`` streaming source's admission control (``maxRecordsPerTrigger``,
``maxBytesPerTrigger``), its start (``startingOffsets``, ``startingTimestamp``) and its offsets in
the query's checkpoint, on logs written by ``MirrorLog`` itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_spark_replay import T0, write_log

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def run(spark, root: Path, tmp: Path, name: str, **options: str) -> tuple[list[int], list[int]]:
    """An availableNow query to Parquet under ``tmp/name`` (its checkpoint beside it): the offsets
    it has written so far (every run of that name) and the rows of each micro-batch of this run."""
    reader = spark.readStream.format("headrace").option("path", str(root)).option("exchange", "orders")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = reader.load().select("offset").writeStream.format("parquet") \
        .option("path", str(tmp / name)).option("checkpointLocation", str(tmp / f"{name}.chk")) \
        .trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    out = tmp / name
    offsets = sorted(r.offset for r in spark.read.parquet(str(out)).collect()) if out.is_dir() and any(
        out.glob("*.parquet")) else []
    return offsets, batches


def test_max_records_per_trigger_caps_each_batch_and_a_restart_resumes(spark, tmp_path):
    root = tmp_path / "data"
    write_log(root, n=200)
    offsets, batches = run(spark, root, tmp_path, "rows", maxRecordsPerTrigger="30")
    assert offsets == list(range(200))
    assert batches == [30] * 6 + [20]
    write_log(root, n=260, start=200)  # the same checkpoint: only what the log gained, 30 at a time
    offsets, batches = run(spark, root, tmp_path, "rows", maxRecordsPerTrigger="30")
    assert offsets == list(range(260)) and batches == [30, 30]


def test_max_bytes_per_trigger_caps_each_batch_by_the_logs_bytes(spark, tmp_path):
    root = tmp_path / "data"
    write_log(root, n=300)  # ~40 bytes a record, an index entry every 256 bytes
    offsets, batches = run(spark, root, tmp_path, "bytes", maxBytesPerTrigger="1200")
    assert offsets == list(range(300))
    assert len(batches) >= 8 and max(batches) <= 1200 // 30, batches
    # both limits: the tighter one wins
    offsets, batches = run(spark, root, tmp_path, "both", maxBytesPerTrigger="100000", maxRecordsPerTrigger="70")
    assert offsets == list(range(300)) and batches == [70] * 4 + [20]
    offsets, batches = run(spark, root, tmp_path, "both2", maxBytesPerTrigger="1200", maxRecordsPerTrigger="1000")
    assert offsets == list(range(300)) and max(batches) <= 40


def test_starting_offsets_and_timestamp(spark, tmp_path):
    root = tmp_path / "data"
    write_log(root, n=100)
    assert run(spark, root, tmp_path, "json", startingOffsets=json.dumps({"orders": 70}))[0] == list(range(70, 100))
    assert run(spark, root, tmp_path, "earliest", startingOffsets="earliest")[0] == list(range(100))
    assert run(spark, root, tmp_path, "ts", startingTimestamp=str(T0 + 42))[0] == list(range(42, 100))
    assert run(spark, root, tmp_path, "iso", startingTimestamp="2023-11-14T22:13:20.090+00:00")[0] == \
        list(range(90, 100))  # T0 + 90 ms
    assert run(spark, root, tmp_path, "latest", startingOffsets="latest")[0] == []
    write_log(root, n=130, start=100)
    assert run(spark, root, tmp_path, "latest", startingOffsets="latest")[0] == list(range(100, 130))
    # a checkpoint wins over the options: the query resumes where it left off
    assert run(spark, root, tmp_path, "json", startingOffsets="earliest")[0] == list(range(70, 130))


@pytest.mark.parametrize("options, message", [
    ({"startingOffsets": "{\"nope\": 3}"}, "startingOffsets names nope, not a log of this source (orders)"),
    ({"startingOffsets": "soon"}, "startingOffsets must be 'earliest', 'latest' or JSON"),
    ({"startingOffsets": "latest", "startingTimestamp": "5"}, "'startingOffsets' or 'startingTimestamp', not both"),
    ({"maxRecordsPerTrigger": "0"}, "'maxRecordsPerTrigger' must be a positive integer"),
])
def test_bad_stream_options_fail_the_query_with_a_clear_line(spark, tmp_path, options, message):
    root = tmp_path / "data"
    write_log(root, n=10)
    with pytest.raises(Exception) as info:
        run(spark, root, tmp_path, "bad", **options)
    assert message in str(info.value)
