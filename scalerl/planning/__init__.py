"""Planning a GPU run before it starts: which GPU does what (placement.py), the memory model
(sizing.py) and `scalerl train --dry-run` (dry_run.py). Reads config.json files and GPU
inventories only: nothing here builds a model or starts an engine."""
