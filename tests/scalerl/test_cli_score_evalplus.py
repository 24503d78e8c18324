"""`scalerl score --data mbpp=... --data mbpp+=... --data humaneval+=...` on rows in the hubs'
schemas (tests/bench_fixtures.py, tests/data/evalplus): every reference solution is `correct`,
every near miss (off by one on 4,400-digit integers, wrong order where order matters, a rounded
float, a dropped element of a set-equal answer, a wrong root, a wrong tree height, None for a
match) is not. The real bwrap sandbox; about 10 s."""

from __future__ import annotations

import json

import bench_fixtures as bf
import pytest

from scalerl.cli import main
from scalerl.envs.catalog import get_task

NEAR_MISSES = {  # (task, sample id): (old, new) applied to the reference solution
    ("mbpp", "927"): ("return left_height+1", "return left_height+2"),
    ("mbpp", "11"): ("return s", "return s[::-1]"),
    ("mbpp+", "Mbpp/4"): ("return largest_nums", "return largest_nums[::-1]"),
    ("mbpp+", "Mbpp/3"): ("return True\n    return False", "return True\n    return n == 2"),
    ("mbpp+", "Mbpp/2"): ("return tuple(set(test_tup1) & set(test_tup2))",
                          "return tuple(set(test_tup1) & set(test_tup2))[1:]"),
    ("mbpp+", "Mbpp/82"): ("return (4./3.) * math.pi * (r**3)",
                           "return round((4./3.) * math.pi * (r**3), 2)"),
    ("mbpp+", "Mbpp/737"): ("return re.search(regex, string)", "return None"),
    ("mbpp+", "Mbpp/88"): ("return freq_count", "return dict(freq_count, extra=1)"),
    ("humaneval+", "HumanEval/83"): ("return 18 * 10 ** (n - 2)",
                                     "return 18 * 10 ** (n - 2) + 1"),
    ("humaneval+", "HumanEval/2"): ("return number - int(number)",
                                    "return round(number - int(number), 2)"),
    ("humaneval+", "HumanEval/32"): ("    return x\n", "    return x + 1e-3\n"),
    ("humaneval+", "HumanEval/1"): ("return results", "return results[::-1]"),
}


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    return bf.write_all(tmp_path_factory.mktemp("bench"))


def samples(name, copies):
    task = get_task(name).with_data(copies[name])
    return {s.id: s for split in task.splits for s in task.samples(split)}


def test_references_correct_and_near_misses_not(copies, tmp_path):
    rows = []
    for name in ("mbpp", "mbpp+", "humaneval+"):
        for sid, sample in samples(name, copies).items():
            gold = sample.meta["solution"]
            rows.append({"id": f"{name}:{sid}", "task": name, "sample_id": sid,
                         "completion": gold})
            if (name, sid) in NEAR_MISSES:
                old, new = NEAR_MISSES[name, sid]
                assert old in gold, (name, sid)
                rows.append({"id": f"{name}:{sid}:near", "task": name, "sample_id": sid,
                             "completion": gold.replace(old, new)})
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    flags = [f for n in ("mbpp", "mbpp+", "humaneval+") for f in ("--data", f"{n}={copies[n]}")]
    assert main(["score", str(src), "--out", str(out), *flags]) == 0
    got = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert len(got) == len(rows) == 6 + 24 + 16 + len(NEAR_MISSES)
    wrong_gold = {i: r["detail"] for i, r in got.items()
                  if not i.endswith(":near") and r["status"] != "correct"}
    assert wrong_gold == {}
    near = {i: r["status"] for i, r in got.items() if i.endswith(":near")}
    assert len(near) == len(NEAR_MISSES) and set(near.values()) == {"wrong"}, near
