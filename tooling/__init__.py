"""The repository's own tooling, never shipped in the wheel: the services tests start, the fault proxy, the
reliability harness (``python -m tooling.reliability``)."""
