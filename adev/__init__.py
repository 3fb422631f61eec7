"""adev: a testbed for KV-cache store tiers under agentic coding workloads."""
__version__ = "0.1.0"
