"""`run_context`: the one place a run's `EnvContext` is built.

A run builds its context once (the glue, before its generators start; a generator given none
builds it at its first multi-turn rollout; `scalerl score` and the tiny tool check call it too):
the tool-call convention chosen for the run's tokenizer (`tool_format` setting: auto | chat |
plain, envs/tool_format.py), the grading settings, and a lazy pool of sandboxed Python sessions
in the grading's sandbox (sandbox/session.py `LazySessions`: none starts until the first `python`
tool call; with `verifiers.cluster: ray`, envs/ray_remote.py `RemoteSessions`: each rollout's
session on one grading actor). Closing the context's sessions is its builder's job.
"""

from __future__ import annotations

from typing import Any

from scalerl.envs.environment import EnvContext
from scalerl.envs.grading import DEFAULT_GRADING, Grading, cluster_grader
from scalerl.envs.tool_format import choose_tool_format
from scalerl.envs.tool_format import tool_format as named_format


def run_context(tool_format: str, tokenizer: Any, grading: Grading = DEFAULT_GRADING,
                *, sessions: Any = None) -> EnvContext:
    """The run's context; `sessions`: a session source to use instead of a lazy pool in the
    grading's sandbox. ValueError (one line) for a tool format the tokenizer cannot write;
    without a tokenizer (an offline replay) the format must be named, not `auto`."""
    from scalerl.sandbox.session import LazySessions

    if tokenizer is None:
        if tool_format == "auto":
            raise ValueError("tool format 'auto' chooses by the tokenizer's chat template; "
                             "without a tokenizer name one: chat or plain")
        fmt = named_format(tool_format)
    else:
        fmt = choose_tool_format(tool_format, tokenizer)
    if sessions is None:
        remote = cluster_grader(grading)
        sessions = (remote.sessions(grading.sandbox) if remote is not None
                    else LazySessions(grading.sandbox))
    return EnvContext(tool_format=fmt, grading=grading, sessions=sessions)
