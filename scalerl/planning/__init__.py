"""Planning a GPU run before it starts: which GPU does what (placement.py), the memory model
(sizing.py), the throughput model (throughput.py), a recipe in their terms and the split of a
node they pick (layouts.py), and `scalerl train --dry-run` (dry_run.py, speed.py). Reads
config.json files and GPU inventories only: nothing here builds a model or starts an engine."""
