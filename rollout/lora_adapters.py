"""Which LoRA adapters an engine keeps loaded, and which request samples under which one.

A LoRA run (`EngineConfig.lora`) publishes one adapter per weight version (rollout/lora.py names
it `adapter_name(version)`). `Adapters` is the generators' shared bookkeeping of them (the
in-process engine, rollout/engine.py, and the servers' generator, rollout/server_generator.py):

- `stage` writes a published adapter's tensors in PEFT's layout under the generator's weights
  folder, one folder per version (never a same-path reload: vLLM's `load_inplace` re-reads the
  adapter from disk every scheduler step, vllm #33791, and a same-name swap could reuse stale
  prefix-cache KV; a new name per version keys vLLM's prefix cache apart);
- `publish` makes a loaded version the current one: every request sent from then on names it;
- `enter` / `leave` bracket one sampling request: it runs to its end under the adapter it was
  sent with (no mid-request switch), so every token it samples carries that adapter's version,
  exactly; version 0 (nothing published yet) is the base model, no adapter (PEFT starts with
  B = 0: the same policy);
- an adapter that is no longer current is retired (unloaded, its folder removed) only once no
  request in flight uses it: `leave` and `publish` say which versions to retire.

The engine keeps `max_loras` adapters in a batch at once (a run sets it to `max_lag` + 1), so the
rollouts in flight under the last `max_lag` versions run side by side; a request under yet another
one waits in vLLM's queue (its scheduler never batches more than `max_loras`) rather than failing.
Nothing here talks to vLLM: the generators load and unload.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from scalerl.rollout.lora import LoraServing, adapter_name, write_adapter
from scalerl.rollout.weights import WeightUpdateError

LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight")
"""How every tensor name of a PEFT LoRA adapter ends (`get_peft_model_state_dict`)."""


def adapter_tensors(named_tensors: Iterable, what: str) -> list:
    """The (name, tensor) pairs of one adapter, checked to be PEFT LoRA tensors (WeightUpdateError
    naming the first that is not, e.g. a full model's weight handed to `update_adapter`)."""
    pairs = list(named_tensors)
    if not pairs:
        raise WeightUpdateError(f"{what}: no adapter tensors")
    for name, _ in pairs:
        if not name.startswith("base_model.model.") or not name.endswith(LORA_SUFFIXES):
            raise WeightUpdateError(
                f"{what}: {name!r} is not a PEFT LoRA tensor name (valid: "
                "base_model.model.<module>.lora_A.weight or .lora_B.weight, as "
                "get_peft_model_state_dict names them)")
    return pairs


def no_adapters(version: int, where: str) -> WeightUpdateError:
    """The error of `update_adapter` on a generator started for full weights."""
    return WeightUpdateError(f"adapter update to version {version}: {where} without engine.lora "
                             "(a full-weights run); publish with update_weights")


class Adapters:
    """The adapters a generator has loaded, by version, and the requests in flight under each."""

    def __init__(self, serving: LoraServing, root: Path, base_model: str) -> None:
        self.serving = serving
        self.root = root
        self.base_model = base_model
        self.paths: dict[int, Path] = {}
        """Loaded versions and their folders (the current one among them)."""
        self.current = 0
        """The version new requests sample under (0: the base model, no adapter)."""
        self._users: Counter[int] = Counter()
        self._retiring: dict[int, Path] = {}

    def folder(self, version: int) -> Path:
        return self.root / f"lora-v{version:06d}"

    def stage(self, named_tensors: Iterable, version: int) -> tuple[Path, int, int]:
        """Write version `version`'s adapter; (its folder, tensors, bytes). WeightUpdateError on
        a bad tensor name or a failed write (nothing left behind)."""
        what = f"adapter update to version {version}"
        if version <= self.current or version in self.paths:
            raise WeightUpdateError(f"{what}: versions must grow; the current one is "
                                    f"{self.current}")
        pairs = adapter_tensors(named_tensors, what)
        target = self.folder(version)
        try:
            _, size = write_adapter(pairs, self.serving, self.base_model, target)
        except (OSError, ValueError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise WeightUpdateError(f"{what}: writing the adapter failed: {exc}") from exc
        return target, len(pairs), size

    def update(self, named_tensors: Iterable, version: int, load: Callable[[Path, str], float],
               ) -> dict[str, float]:
        """A generator's `update_adapter`: stage version `version`'s adapter, then
        `load(folder, what)` (the generator loads it and calls `publish`; returns its seconds).
        A failed or timed-out load removes the folder and raises WeightUpdateError, the version
        unchanged. Returns timings (write_s, load_s)."""
        t = time.perf_counter()
        path, tensors, size = self.stage(named_tensors, version)
        write_s = time.perf_counter() - t
        what = (f"adapter update to version {version} ({tensors} tensors, "
                f"{size / 2**20:.2f} MiB)")
        try:
            load_s = load(path, what)
        except (TimeoutError, WeightUpdateError) as exc:
            self.discard(path)
            raise WeightUpdateError(str(exc)) from exc
        return {"write_s": write_s, "load_s": load_s}

    def publish(self, version: int, path: Path) -> list[int]:
        """`version` (loaded from `path`) is current from now on; the versions to retire now."""
        self.paths[version] = path
        self.current = version
        return self._idle()

    def enter(self) -> tuple[int, str | None]:
        """A request starts: (the version it samples under, its adapter's name; None: the base
        model)."""
        version = self.current
        self._users[version] += 1
        return version, adapter_name(version) if version in self.paths else None

    def loaded(self) -> dict[int, Path]:
        """Every version a request may still name (current and in use), by folder: what a
        server that joins must load before it takes requests."""
        return dict(self.paths)

    def leave(self, version: int) -> list[int]:
        """A request under `version` ended; the versions to retire now."""
        self._users[version] -= 1
        if self._users[version] <= 0:
            del self._users[version]
        return self._idle()

    def _idle(self) -> list[int]:
        """The loaded versions no request uses any more and none will (not current), taken out
        of `paths` at once (so each is retired once); their folders are removed by `retired`."""
        idle = [v for v in self.paths if v != self.current and not self._users[v]]
        for v in idle:
            self._retiring[v] = self.paths.pop(v)
        return idle

    def retired(self, version: int) -> None:
        """`version` was unloaded (or failed to be): remove its folder."""
        path = self._retiring.pop(version, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def discard(self, path: Path) -> None:
        """A staged adapter that was never published: remove its folder."""
        shutil.rmtree(path, ignore_errors=True)

    def in_use(self) -> dict[int, int]:
        """Requests in flight per version."""
        return dict(self._users)


ADAPTER_DIR = "adapter"
"""Where a LoRA run's checkpoint holds its adapter (`<checkpoint>/adapter/`, PEFT's layout)."""


def checkpoint_adapter(checkpoint: str | Path) -> tuple[str, LoraServing, Path] | None:
    """A LoRA checkpoint's (base model, serving shape, adapter folder): `<checkpoint>/adapter/`
    with PEFT's `adapter_config.json` (its `base_model_name_or_path` names the base); None when
    `checkpoint` holds no adapter. ValueError (one line) on an adapter config that cannot be
    served (a missing field, a rank vLLM does not serve)."""
    import json

    folder = Path(checkpoint) / ADAPTER_DIR
    path = folder / "adapter_config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    try:
        base, rank, alpha = (config["base_model_name_or_path"], config["r"],
                             config["lora_alpha"])
        targets = config["target_modules"]
    except KeyError as exc:
        raise ValueError(f"{path}: no {exc.args[0]!r} (a PEFT LoRA adapter_config.json has "
                         "base_model_name_or_path, r, lora_alpha, target_modules)") from None
    if not (folder / "adapter_model.safetensors").is_file():
        raise ValueError(f"{folder}: adapter_config.json without adapter_model.safetensors")
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    return base, LoraServing(rank=rank, alpha=float(alpha), targets=targets, max_loras=1), folder
