"""`GET /admin/v1/residencies`: every residency on the read model's books, with what its worker
process holds now (`worker_bytes`, from its node's last telemetry: RSS on the CPU device, the NVML
per-process figure on a GPU; null where no sample names it, e.g. once it was unloaded) beside what
its load measured (`measured_bytes`).
"""

from __future__ import annotations

from gateway.admin.endpoint import ROWS, Call, Endpoint
from gateway.admin.reads import fresh_for

RESIDENCIES_SQL = """
SELECT r.accelerator_id, r.deployment_id, r.node_id, r.state, r.runtime, r.measured_bytes,
       w.worker_bytes, w.observed_at AS worker_observed_at, r.cold_load_ms, r.load_count,
       r.failure_code, r.unload_reason, r.updated_at
FROM residencies r
LEFT JOIN worker_memory w ON w.accelerator_id = r.accelerator_id AND w.deployment_id = r.deployment_id
ORDER BY r.accelerator_id, r.deployment_id
"""


async def list_residencies(call: Call) -> object:
    model = call.edge.read_models.required("the residencies")
    await fresh_for(model, call)
    return await model.query(RESIDENCIES_SQL)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/residencies",
        "Residencies and each worker's memory now (read model)",
        list_residencies,
        tag="operations",
        response=ROWS,
    ),
]
