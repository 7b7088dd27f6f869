"""The Spark commands' error paths: one line on stderr and exit code 1, before any JVM starts."""

from __future__ import annotations

import subprocess
import sys

import pika
import pytest

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord

pytestmark = [pytest.mark.timeout(60)]

# runs the CLI with pyspark and pyarrow made unimportable, as on an install without the extra
NO_SPARK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("pyspark", "pyarrow"):
            raise ModuleNotFoundError(name, name=name)
sys.meta_path.insert(0, Block())
from headrace.cli.main import main
sys.argv = ["headrace", *sys.argv[1:]]
main()
"""


def run(*args: str, no_spark: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = [sys.executable, "-c", NO_SPARK] if no_spark else [sys.executable, "-m", "headrace"]
    return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=50)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["export", "--out", "o"], ["replay"]])
def test_without_pyspark_one_line_says_how_to_install(tmp_path, command):
    line = one_line_error(run(command[0], "--exchange", "orders", *command[1:], no_spark=True))
    assert "pyspark" in line and "make spark-deps" in line


def test_missing_data_dir_or_mirror_log(tmp_path):
    line = one_line_error(run("export", "--exchange", "orders", "--out", str(tmp_path / "o"),
                              "--data-dir", str(tmp_path / "nowhere")))
    assert "no data directory" in line
    log = MirrorLog(tmp_path, "/", "payments")
    log.recover()
    log.append_many([MirrorRecord(1, "k", b"", b"x")])
    log.close()
    line = one_line_error(run("replay", "--exchange", "orders", "--data-dir", str(tmp_path)))
    assert "'orders'" in line and "no mirror log" in line and "payments" in line
    assert not (tmp_path / "o").exists()


def test_export_refuses_a_non_empty_out_directory_without_overwrite(tmp_path):
    log = MirrorLog(tmp_path, "/", "orders")
    log.recover()
    log.append_many([MirrorRecord(1, "k", b"", b"x")])
    log.close()
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = one_line_error(run("export", "--exchange", "orders", "--data-dir", str(tmp_path), "--out", str(out)))
    assert "is not empty" in line and "--overwrite" in line
    assert (out / "keep.txt").read_text() == "mine"


def test_a_missing_stream_is_named_as_a_stream(tmp_path):
    (tmp_path / "streams").mkdir()
    line = one_line_error(run("export", "--stream", "events", "--data-dir", str(tmp_path), "--out",
                              str(tmp_path / "o")))
    assert "stream 'events'" in line and "x-queue-type: stream" in line and "mirror enable" not in line


def test_replay_target_missing_or_broker_down(broker, tmp_path):
    log = MirrorLog(tmp_path, "/", "orders")
    log.recover()
    log.append_many([MirrorRecord(1, "k", b"", b"x")])
    log.close()
    line = one_line_error(run("replay", "--exchange", "orders", "--data-dir", str(tmp_path),
                              "--to-exchange", "not-declared", "--amqp-url", broker.url))
    assert "'not-declared' does not exist" in line
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))  # the check left the broker well
    conn.close()
    line = one_line_error(run("replay", "--exchange", "orders", "--data-dir", str(tmp_path),
                              "--amqp-url", "amqp://guest:guest@127.0.0.1:1/%2F"))
    assert "cannot connect" in line
