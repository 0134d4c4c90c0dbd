"""Helpers for deltalog's tests, benchmarks and reliability harness (real services, no mocks)."""
