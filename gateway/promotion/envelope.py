"""A deployment's resource envelope, taken from what a runtime probe measured on a real node."""

from __future__ import annotations

from streams.events.control import ProbeCompleted
from streams.events.serving import ResourceEnvelope

MIB = 1 << 20
# Working memory a request needs beyond the loaded model when the probe saw none (a CPU device
# measuring RSS may see the warm-up's buffers already folded into the loaded figure).
MIN_REQUEST_BYTES = 16 * MIB


def envelope_from_probe(probe: ProbeCompleted) -> ResourceEnvelope:
    """required = what the loaded model holds (what loading added, its weights at the least);
    peak = the warm-up's high-water mark over the baseline; per request = the peak above the
    loaded footprint."""
    required = max(0, probe.measured_bytes)
    peak = required + max(0, probe.peak_bytes - probe.loaded_bytes)  # the warm-up's growth on top
    return ResourceEnvelope(
        required_bytes=required,
        peak_bytes=peak,
        per_request_bytes=max(MIN_REQUEST_BYTES, peak - required),
        cold_load_ms=probe.cold_load_ms,
    )
