"""The gated path to production: artifacts, probes, approvals, promotion."""
