"""What the experiment trackers stored, read back from their own files: W&B's offline runs and
trackio's local store; and the environment that keeps both offline and inside a test's folder.

W&B has no Python reader of its offline `run-<id>.wandb` files (wandb-core writes them): they
are LevelDB-style logs (a 7-byte `:W&B` header, then 32 KiB blocks of records of a CRC, a
length, a type FULL/FIRST/MIDDLE/LAST) of protobuf `Record`s, read here with wandb's own
protobuf classes. trackio's store is read with its own SQLite layer.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

BLOCK = 32768
HEADER = 7  # crc32 (4) + length (2) + type (1)


def offline_env(tmp: Path, *, home: bool = False) -> dict[str, str]:
    """W&B offline (into each run dir), trackio's store under `tmp`; with `home`, also a HOME
    and NETRC of its own, where no W&B credentials can be found."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRACKIO_"))}
    env |= {"WANDB_MODE": "offline", "TRACKIO_DIR": str(tmp / "trackio"),
            "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1",
            # W&B writes its .wandb file every 15 s by default: a test waiting on it reads it
            # every 0.2 s (trackio writes its store every 0.5 s)
            "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL": "0.2"}
    if home:
        (tmp / "home").mkdir(parents=True, exist_ok=True)
        env |= {"HOME": str(tmp / "home"), "NETRC": str(tmp / "home" / ".netrc")}
    return env


def trackio_steps(trackio_dir: Path, project: str, run: str) -> list[int]:
    """The steps trackio has stored so far (read straight from its SQLite file, to wait on)."""
    import sqlite3

    db = trackio_dir / f"{project}.db"
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT step FROM metrics WHERE run_name = ?", (run,)).fetchall()
    except sqlite3.OperationalError:  # the store is still being made
        return []
    return [s for (s,) in rows]


def wandb_records(path: Path):
    """The protobuf Records of one offline `.wandb` file (a torn last record is skipped)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    pos, parts = 7, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0:  # zero padding up to the block end
            pos += left
            continue
        chunk = data[pos + HEADER:pos + HEADER + length]
        if len(chunk) < length:
            return
        pos += HEADER + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(parts)
            yield record


def wandb_runs(run_dir: Path) -> list[dict]:
    """Every offline W&B run under `run_dir/wandb` (oldest first): its id, tags, config keys
    and history rows ({"_step": n, key: value}), values JSON-decoded."""
    out = []
    for folder in sorted((run_dir / "wandb").glob("offline-run-*")):
        run = {"dir": folder, "id": None, "tags": [], "config": {}, "history": []}
        files = list(folder.glob("run-*.wandb"))  # none yet: a run still starting
        for record in wandb_records(files[0]) if files else ():
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run["id"], run["tags"] = record.run.run_id, list(record.run.tags)
            elif kind == "config":
                run["config"] |= {i.key: json.loads(i.value_json) for i in record.config.update}
            elif kind == "history":
                run["history"].append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                                       for i in record.history.item})
        out.append(run)
    return out


def wandb_table(run: dict, row: dict, key: str) -> dict:
    """The table logged under `key` in one history row: {"columns": [...], "data": [[...]]}."""
    return json.loads((run["dir"] / "files" / row[f"{key}/path"]).read_text())


TRACKIO_READ = """if True:
    import json, sys
    from trackio.sqlite_storage import SQLiteStorage
    project, run = sys.argv[1], sys.argv[2]
    out = SQLiteStorage.get_logs(project, run) if run else list(SQLiteStorage.get_runs(project))
    print(json.dumps(out))
"""


def _trackio(trackio_dir: Path, project: str, run: str) -> list:
    """trackio reads TRACKIO_DIR once, when imported: each read is its own process."""
    env = {**os.environ, "TRACKIO_DIR": str(trackio_dir)}
    done = subprocess.run([sys.executable, "-c", TRACKIO_READ, project, run], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def trackio_logs(trackio_dir: Path, project: str, run: str) -> list[dict]:
    """trackio's rows of one run (each {"step": n, key: value}), read from its local store."""
    return _trackio(trackio_dir, project, run)


def trackio_runs(trackio_dir: Path, project: str) -> list[str]:
    """The names of the runs of a trackio project."""
    return _trackio(trackio_dir, project, "")
