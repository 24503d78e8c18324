"""Sandbox: run untrusted programs under bubblewrap, docker or (loudly) bare rlimits."""
