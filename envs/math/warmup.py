"""Warms math-verify's parser caches; imported by the verifier pool's forkserver (preload).

ANTLR, which latex2sympy uses, builds its prediction caches lazily and process-wide: the first
few hundred parses in a process run several times slower. Importing this module once in the
forkserver gives every forked worker warm caches. It has no other effect and nothing imports it:
the pool names it (`scalerl.envs.math.warmup`) in envs/math/verifier.py's `make_pool`.
"""

from __future__ import annotations

import gc

from scalerl.envs.math.verifier import warm_up

warm_up()

# Objects created so far live on in every forked worker: keep the collector from touching (and so
# copying) their pages in each worker.
gc.freeze()
