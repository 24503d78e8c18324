"""Code tasks (placeholder: the code engineer owns this module and replaces it)."""
