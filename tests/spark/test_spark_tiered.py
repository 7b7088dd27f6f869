"""The ``headrace`` source reads a log whose older segments are only in its tier (a ``file://``
URI): from the data directory, over the HTTP API straight from the tier, and over the HTTP API
with the broker reading the tier (``tierRead=broker``); every offset once, whichever way."""

from __future__ import annotations

import pytest

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord, list_segments
from headrace.persistence.tier import TierSettings, tier_pass

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

N = 2000


def test_spark_reads_tiered_segments_locally_and_over_http(spark, broker, tmp_path):
    log = MirrorLog(broker.data_dir, "/", "tiered", segment_max_bytes=16384, index_interval_bytes=1024)
    log.recover()
    log.append_many([MirrorRecord(1_700_000_000_000 + i, f"k.{i % 7}", b"", b"m%05d" % i) for i in range(N)])
    log.close()
    report = tier_pass(broker.data_dir, "mirror", "/", "tiered",
                       TierSettings(f"file://{tmp_path / 'tier'}", local_max_bytes=0), 0)
    assert len(report.uploaded) > 3 and len(list_segments(broker.data_dir, "/", "tiered")) == 1
    reads = {
        "path": {"path": str(broker.data_dir)},
        "url": {"url": broker.http_url},
        "url via broker": {"url": broker.http_url, "tierRead": "broker"},
    }
    for how, options in reads.items():
        df = spark.read.format("headrace").options(**options).option("exchange", "tiered") \
            .option("partitionBytes", "20000").load()
        rows = df.select("offset", "body").orderBy("offset").collect()
        assert [r.offset for r in rows] == list(range(N)), how
        assert [bytes(r.body) for r in rows] == [b"m%05d" % i for i in range(N)], how
        part = df.filter("offset >= 1500 and offset < 1510").count()
        assert part == 10, how
