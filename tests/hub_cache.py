"""A Hugging Face hub cache written by a test: the layout `huggingface_hub` and `datasets` read
offline (`HF_HUB_CACHE/datasets--owner--name/snapshots/<commit>/...`, `refs/<branch>`).

`write_snapshot(hub, repo, commit, files)` writes one snapshot (files as JSON lines, parquet or
text by suffix) and returns its folder; `MBPP_README` is the config table of the real
google-research-datasets/mbpp card (its `configs:` YAML), so a snapshot loads by config name as
the hub copy does.
"""

from __future__ import annotations

import json
from pathlib import Path

MBPP_README = """---
configs:
- config_name: full
  data_files:
  - split: train
    path: full/train-*
  - split: test
    path: full/test-*
  - split: validation
    path: full/validation-*
  - split: prompt
    path: full/prompt-*
  default: true
- config_name: sanitized
  data_files:
  - split: train
    path: sanitized/train-*
  - split: test
    path: sanitized/test-*
  - split: validation
    path: sanitized/validation-*
  - split: prompt
    path: sanitized/prompt-*
---
# Dataset Card for Mostly Basic Python Problems (mbpp)
"""


def write_snapshot(hub: Path, repo: str, commit: str, files: dict[str, list[dict] | str],
                   *, ref: str | None = None) -> Path:
    """The snapshot of `repo` at `commit` under the hub cache `hub`: each file's rows as JSON
    lines (`.jsonl`) or parquet (`.parquet`), or its text; `ref` (a branch) points at it."""
    import datasets

    owner, name = repo.split("/", 1)
    root = hub / f"datasets--{owner}--{name}"
    snapshot = root / "snapshots" / commit
    for rel, content in files.items():
        path = snapshot / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        elif rel.endswith(".parquet"):
            datasets.Dataset.from_list(content).to_parquet(str(path))
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in content))
    if ref:
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    return snapshot
