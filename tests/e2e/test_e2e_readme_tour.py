"""The README's five-minute tour, run as a new user runs it: in a fresh clone, with the broker that
``make run`` starts, every shell block of the tour in order, as written (connect a client, manage
it, streams, the three-node cluster with a leader killed), except Spark's, whose first step installs
pyspark from the network (tests/spark run those commands' code).

The tour uses fixed ports and paths (5672, 15672, 2379, /tmp/headrace-hr1, ...), so it runs in
namespaces of its own (``unshare``: network, process ids, mounts, with a private /tmp): it touches
nothing of the machine's, and everything it started dies with it. It ends by stopping the processes
it started, by the PIDs it recorded; that they are gone is checked here. Needs
root, as ``make test`` runs in CI (as the cluster's partition test does)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
# the tour's nodes and etcd by their command lines (not this script's own, which holds the tour's text)
LEFT = "^[^ ]+ [^ ]+/headrace cluster join|^etcd "


def tour_blocks(readme: str) -> list[tuple[str, str]]:
    """(heading, commands) of each shell block under a ``###`` heading of the tour, in order."""
    out: list[tuple[str, str]] = []
    heading = ""
    for m in re.finditer(r"^(#{2,3} [^\n]*)$|^```\n(.*?)^```$", readme, re.M | re.S):
        if m.group(1):
            heading = m.group(1)
        elif heading.startswith("### ") and m.group(2):
            out.append((heading.removeprefix("### "), m.group(2)))
    return out


def test_the_readme_tour_runs_as_written_on_a_fresh_clone(tmp_path: Path):
    readme = (ROOT / "README.md").read_text()
    blocks = [(h, b) for h, b in tour_blocks(readme) if h != "Spark"]
    assert [h for h, _ in blocks][:1] == ["Connect a client"] and blocks[-1][0] == "Cluster"
    # the namespace's /tmp is this test's own directory, where the clone is: /tmp/clone inside
    private_tmp = tmp_path / "tmp"
    clone = private_tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / "README.md").write_text(readme)  # the checkout's README, committed or not
    (clone / ".venv").symlink_to(ROOT / ".venv")  # what `make run` made: headrace installed from the checkout
    tour = "\n".join(f"echo '=== {h}'\n{b}" for h, b in blocks)
    inner = f"""set -e
ip link set lo up
mount --bind {shlex.quote(str(private_tmp))} /tmp
cd /tmp/clone
.venv/bin/headrace serve > serve.log 2>&1 &   # make run
serve=$!
until curl -sf -u guest:guest localhost:15672/api/overview >/dev/null; do
  kill -0 $serve || {{ cat serve.log; exit 1; }}
  sleep 0.1
done
set -x
{tour}
set +x
for _ in $(seq 100); do pgrep -f '{LEFT}' > /dev/null || break; sleep 0.1; done
if pgrep -af '{LEFT}'; then echo 'the tour left these running'; exit 1; fi
kill -0 $serve   # what the tour did not start, it left alone
echo '=== stopped'
"""
    done = subprocess.run(["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "-c", inner],
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.rstrip().endswith("=== stopped")
    assert "b'hello'" in out  # the client's message back
    assert "exported definitions to defs.json:" in out and (clone / "defs.json").exists()
    assert "│ order.created │" in out  # `headrace get orders`
    statuses = out.split("=== Cluster")[1]
    assert re.search(r"│ /\s+│ jobs\s+│ classic\s+│ True\s+│ 100 ", statuses), statuses[-2000:]  # nothing lost
