"""The stable error-code catalogue.

Every failure the gateway, scheduler, node agent or admin API reports carries one of these codes.
Codes are part of the public contract: never rename one, never reuse one for another meaning.

Each code has a *default* HTTP status. A few codes are reported with a different status depending on
where they arise (for example ``CAPABILITY_NOT_AUTHORIZED`` is 401 for a missing or bad key and 403
for a key without the scope); the raiser passes ``http_status=`` to :class:`ServingError` for those.
See ``docs/reference-behaviour.md`` for when each code is raised.

Pure module: no I/O.
"""

from __future__ import annotations

from typing import Final

from streams.errorspec import ErrorSpec, ErrorType, error_type_for_status, spec

# --- authentication, credentials and client limits -------------------------------------------------
CAPABILITY_NOT_AUTHORIZED: Final = spec(
    "CAPABILITY_NOT_AUTHORIZED",
    401,
    "The bearer credential is missing, unknown, revoked or expired (401), or the client is disabled "
    "or lacks the capability@version scope (raised with 403).",
)
AUTH_BACKEND_UNAVAILABLE: Final = spec(
    "AUTH_BACKEND_UNAVAILABLE", 503, "The credential store could not be read or updated."
)
LIMITS_BACKEND_UNAVAILABLE: Final = spec(
    "LIMITS_BACKEND_UNAVAILABLE",
    503,
    "The shared store of deployment caps (concurrency and queue slots on NATS) did not answer, so "
    "the deployment's cap could not be checked; nothing was run.",
    from_seed=False,
)
RATE_LIMITED: Final = spec("RATE_LIMITED", 429, "The client exceeded its requests-per-minute limit.")
QUEUE_FULL: Final = spec(
    "QUEUE_FULL",
    429,
    "A concurrency or queue bound is reached: the client's concurrent requests, the deployment's "
    "queue depth, or the global queue limit.",
)

# --- request validation and capability resolution --------------------------------------------------
INVALID_INPUT: Final = spec(
    "INVALID_INPUT",
    422,
    "The input breaks the capability contract (too many items, an item too long, bad field); "
    "raised with 413 when the encoded input is larger than the payload limit.",
)
PAYLOAD_TOO_LARGE: Final = spec(
    "PAYLOAD_TOO_LARGE",
    413,
    "The HTTP request body exceeds the server's hard size limit.",
    from_seed=False,
)
RERANK_REQUEST_TOO_LARGE: Final = spec(
    "RERANK_REQUEST_TOO_LARGE", 413, "The encoded reranking request exceeds the reranking size limit."
)
UNKNOWN_CAPABILITY: Final = spec(
    "UNKNOWN_CAPABILITY",
    404,
    "The requested capability@version is not in the capability catalogue.",
    from_seed=False,
)
MODEL_NOT_FOUND: Final = spec(
    "MODEL_NOT_FOUND",
    404,
    "The call's `model` names neither its capability, nor the model its stable deployment serves, "
    "nor an experiment's route.",
    from_seed=False,
)
CAPABILITY_NOT_FOUND: Final = spec(
    "CAPABILITY_NOT_FOUND", 404, "The capability contract or capability deployment does not exist."
)
CAPABILITY_UNAVAILABLE: Final = spec(
    "CAPABILITY_UNAVAILABLE",
    503,
    "The capability exists but has no routable deployment, or its serving state is missing.",
)
RERANKER_NOT_AVAILABLE: Final = spec(
    "RERANKER_NOT_AVAILABLE",
    503,
    "Reranking needs exactly one active evaluated experiment deployment and there is not one.",
)
NO_ELIGIBLE_NODE: Final = spec(
    "NO_ELIGIBLE_NODE",
    503,
    "No enabled, online (and, for production, production-eligible) node or accelerator can serve "
    "the deployment; raised with 409 by promotion gates.",
)
EXPERIMENT_NOT_ROUTABLE: Final = spec(
    "EXPERIMENT_NOT_ROUTABLE", 409, "The named experiment route does not lead to an active experiment."
)

# --- scheduler ---------------------------------------------------------------------------------------
SCHEDULER_STATE_STALE: Final = spec(
    "SCHEDULER_STATE_STALE",
    503,
    "The scheduler's inputs are incomplete or stale (missing residency or envelope, stale measured "
    "envelope, unknown GPU attribution).",
)
ENVELOPE_CLASS_UNMEASURED: Final = spec(
    "ENVELOPE_CLASS_UNMEASURED",
    503,
    "The deployment's resource envelope was measured on another hardware class (accelerator model, "
    "runtime, precision) than any eligible accelerator has: probe it on that class first.",
    from_seed=False,
)
INSUFFICIENT_SCHEDULABLE_VRAM: Final = spec(
    "INSUFFICIENT_SCHEDULABLE_VRAM",
    503,
    "The scheduler rejected placement: not enough schedulable accelerator memory, even after "
    "evicting idle residents.",
)
EVICTION_NOT_ALLOWED: Final = spec(
    "EVICTION_NOT_ALLOWED", 409, "A resident planned for eviction is no longer idle."
)
RUNTIME_UNHEALTHY: Final = spec(
    "RUNTIME_UNHEALTHY",
    503,
    "The scheduler rejected placement because the deployment's runtime is failed or unavailable.",
    from_seed=False,
)
DEADLINE_EXCEEDED: Final = spec(
    "DEADLINE_EXCEEDED",
    503,
    "The scheduler rejected placement because loading or queueing cannot finish before the "
    "request's deadline.",
    from_seed=False,
)
PRESSURE_CRITICAL: Final = spec(
    "PRESSURE_CRITICAL",
    503,
    "The scheduler rejected lower-priority work because the accelerator is under critical memory pressure.",
    from_seed=False,
)
LAB_PAUSED: Final = spec(
    "LAB_PAUSED",
    503,
    "The scheduler policy pauses lab workloads; lab-priority work is rejected.",
    from_seed=False,
)
REQUEST_CANCELLED: Final = spec(
    "REQUEST_CANCELLED",
    499,
    "The request was cancelled before it finished (its client disconnected before its model ran, "
    "or the gateway is shutting down); recorded, never sent: nobody is left to answer.",
    from_seed=False,
)
REQUEST_TIMEOUT: Final = spec(
    "REQUEST_TIMEOUT",
    504,
    "The request did not obtain a lease in the bounded queue, or the worker did not answer before "
    "the request deadline.",
)
LEASE_TIMEOUT: Final = spec(
    "LEASE_TIMEOUT",
    409,
    "A GPU lease or a worker's job lease expired, or the job lease token is invalid.",
)

# --- execution and results ---------------------------------------------------------------------------
INFERENCE_FAILED: Final = spec(
    "INFERENCE_FAILED", 503, "The worker failed the invocation without a more specific code."
)
INVALID_OUTPUT: Final = spec(
    "INVALID_OUTPUT",
    502,
    "The runtime's output breaks the capability contract (count, dimension, finiteness, "
    "normalisation, ranking order); raised with 409 when probe evidence fails a promotion gate.",
)
HEALTHCHECK_FAILED: Final = spec(
    "HEALTHCHECK_FAILED",
    409,
    "Layered health (process, runtime, model) is not all healthy; raised with 502 when a live "
    "worker health probe fails.",
)
RESIDENCY_LOAD_FAILED: Final = spec(
    "RESIDENCY_LOAD_FAILED",
    503,
    "Loading the model failed or the load showed no resident memory.",
)
RESIDENCY_UNLOAD_FAILED: Final = spec(
    "RESIDENCY_UNLOAD_FAILED", 409, "The worker unloaded the model but did not show memory reclaimed."
)
GPU_MEMORY_NOT_RECLAIMED: Final = spec(
    "GPU_MEMORY_NOT_RECLAIMED", 503, "Accelerator memory was not returned after an unload."
)
RESIDENCY_CONFLICT: Final = spec(
    "RESIDENCY_CONFLICT",
    409,
    "A reported or proposed residency does not match the deployment's exact identity, node, "
    "accelerator or worker generation.",
)
WORKER_RESTART_RECONCILED: Final = spec(
    "WORKER_RESTART_RECONCILED",
    503,
    "The worker restarted and the residency was reconciled to cold; in-flight work was lost.",
)
DEPLOYMENT_BUSY: Final = spec(
    "DEPLOYMENT_BUSY", 409, "The deployment has active requests; they must finish before unload."
)
DEPLOYMENT_ALWAYS_WARM: Final = spec(
    "DEPLOYMENT_ALWAYS_WARM",
    409,
    "The deployment is always-warm, so it would be loaded again at once: change its residency "
    "policy, or drain it, before unloading.",
)

# --- node agent and artifacts ------------------------------------------------------------------------
NODE_OWNERSHIP_MISMATCH: Final = spec(
    "NODE_OWNERSHIP_MISMATCH",
    403,
    "The job or deployment belongs to another node (raised with 409 when found at claim time).",
)
NODE_CREDENTIALS_NOT_FOUND: Final = spec(
    "NODE_CREDENTIALS_NOT_FOUND",
    404,
    "The node has no NATS credentials (none were made, or they were revoked).",
)
SERVING_JOB_NOT_FOUND: Final = spec("SERVING_JOB_NOT_FOUND", 404, "The serving job does not exist.")
RUNTIME_DEPENDENCY_MISSING: Final = spec(
    "RUNTIME_DEPENDENCY_MISSING", 409, "The runtime profile or runtime environment is missing."
)
ARTIFACT_INCOMPLETE: Final = spec(
    "ARTIFACT_INCOMPLETE",
    409,
    "The artifact set lacks its revision or one verified location per selected file.",
)
ARTIFACT_PATH_INVALID: Final = spec(
    "ARTIFACT_PATH_INVALID",
    409,
    "Artifact files are not confined to one storage root on the serving node (absolute path, "
    "'..', several roots, or another node).",
)
ARTIFACT_NOT_VERIFIED: Final = spec(
    "ARTIFACT_NOT_VERIFIED",
    409,
    "The artifact set, or one of its members, is not verified or is quarantined.",
)
ARTIFACT_SET_EXCEEDS_CACHE: Final = spec(
    "ARTIFACT_SET_EXCEEDS_CACHE",
    409,
    "The artifact set is larger than the node's artifact cache budget (MODELFORGE_ARTIFACT_CACHE_BYTES), "
    "or than what the sets its workers hold leave of it.",
)
ARTIFACT_FETCH_FAILED: Final = spec(
    "ARTIFACT_FETCH_FAILED",
    409,
    "The node could not fetch the artifact set from the artifact bucket (a file missing there, or its "
    "digest or size not the manifest's).",
)
PICKLE_PRESENT: Final = spec(
    "PICKLE_PRESENT", 409, "The artifact set contains pickle files, which can never be approved."
)
REMOTE_CODE_REQUIRED: Final = spec(
    "REMOTE_CODE_REQUIRED", 409, "The artifacts need remote code, which can never be approved."
)

# --- promotion pipeline ------------------------------------------------------------------------------
CANDIDATE_NOT_FOUND: Final = spec("CANDIDATE_NOT_FOUND", 404, "The candidate does not exist.")
CANDIDATE_NOT_LAB_READY: Final = spec(
    "CANDIDATE_NOT_LAB_READY", 409, "The candidate is not LAB_READY or is already in production."
)
CANDIDATE_EVIDENCE_STALE: Final = spec(
    "CANDIDATE_EVIDENCE_STALE",
    409,
    "The candidate's probe, profile or node evidence is incomplete or no longer current.",
)
RUNTIME_PROBE_REQUIRED: Final = spec(
    "RUNTIME_PROBE_REQUIRED", 409, "A completed runtime probe on a real node is required."
)
COMPATIBILITY_STALE: Final = spec(
    "COMPATIBILITY_STALE", 409, "Current compatible runtime-compatibility evidence is required."
)
NODE_SERVING_CAPABILITY_MISSING: Final = spec(
    "NODE_SERVING_CAPABILITY_MISSING",
    409,
    "The target node does not advertise every operation of the typed serving protocol.",
)
RUNTIME_SECURITY_GATE_FAILED: Final = spec(
    "RUNTIME_SECURITY_GATE_FAILED",
    409,
    "Probe evidence lacks proof of offline, local-only execution or of memory reclaimed on unload.",
)
PROFILE_SEMANTICS_INVALID: Final = spec(
    "PROFILE_SEMANTICS_INVALID", 409, "The runtime profile's input semantics are not a typed mapping."
)
LAB_APPROVAL_STALE: Final = spec(
    "LAB_APPROVAL_STALE",
    409,
    "No current, exact lab execution approval (wrong artifact set or scope, revoked or expired).",
)
PRODUCTION_APPROVAL_NOT_FOUND: Final = spec(
    "PRODUCTION_APPROVAL_NOT_FOUND",
    404,
    "The production approval does not exist or belongs to another candidate.",
)
PRODUCTION_APPROVAL_STALE: Final = spec(
    "PRODUCTION_APPROVAL_STALE",
    409,
    "The production approval is revoked, or a fact behind its evidence fingerprint changed.",
)
STABLE_DEPLOYMENT_EXISTS: Final = spec(
    "STABLE_DEPLOYMENT_EXISTS",
    409,
    "The capability already has a stable deployment; drain it before promoting another.",
)
DEPLOYMENT_PROVENANCE_INCOMPLETE: Final = spec(
    "DEPLOYMENT_PROVENANCE_INCOMPLETE",
    409,
    "The deployment's contract, envelope, residency, route or embedding identity is missing.",
)
DEPLOYMENT_NOT_FOUND: Final = spec("DEPLOYMENT_NOT_FOUND", 404, "The capability deployment does not exist.")
EXPERIMENT_NOT_FOUND: Final = spec("EXPERIMENT_NOT_FOUND", 404, "The capability experiment does not exist.")

ROUTING_WEIGHTS_INVALID: Final = spec(
    "ROUTING_WEIGHTS_INVALID",
    422,
    "A capability's routing weights are not whole percents 0..100 summing to 100.",
    from_seed=False,
)
ROUTING_TARGET_INVALID: Final = spec(
    "ROUTING_TARGET_INVALID",
    409,
    "A routing weight names no experiment of the capability, one in another embedding space, or gives "
    "a share of the traffic to an inactive or draining experiment or to one without a usable "
    "production approval.",
    from_seed=False,
)
ROLLBACK_POLICY_INVALID: Final = spec(
    "ROLLBACK_POLICY_INVALID",
    422,
    "A rollback policy's guard has no positive threshold or window, or is set on a stable deployment.",
    from_seed=False,
)

# --- clients and projects ----------------------------------------------------------------------------
CLIENT_EXISTS: Final = spec("CLIENT_EXISTS", 409, "A service client with this name already exists.")
CLIENT_NOT_FOUND: Final = spec("CLIENT_NOT_FOUND", 404, "The service client does not exist.")
CREDENTIAL_NOT_FOUND: Final = spec(
    "CREDENTIAL_NOT_FOUND",
    404,
    "The service client has no credential with this id, or no active credential to rotate.",
    from_seed=False,
)
PROJECT_NOT_FOUND: Final = spec("PROJECT_NOT_FOUND", 404, "The project does not exist or is inactive.")
PROJECT_CAPABILITY_NOT_BOUND: Final = spec(
    "PROJECT_CAPABILITY_NOT_BOUND",
    409,
    "The project has no active binding for this capability (raised with 403 when a project-bound "
    "client calls another capability or its binding is deprecated).",
)
PROJECT_FIT_DEPLOYMENT_MISMATCH: Final = spec(
    "PROJECT_FIT_DEPLOYMENT_MISMATCH",
    422,
    "The project-fit evidence names a deployment of a different capability.",
)
PROJECT_FIT_GATES_FAILED: Final = spec(
    "PROJECT_FIT_GATES_FAILED",
    422,
    "Promotion eligibility needs owner-photo evidence, a satisfied production gate, at least one "
    "case, zero critical errors and no blockers.",
)
PROJECT_PRODUCTION_VALIDATION_FAILED: Final = spec(
    "PROJECT_PRODUCTION_VALIDATION_FAILED",
    422,
    "Production validation can only be satisfied by promotion-eligible owner-photo evidence.",
)

# --- generic -----------------------------------------------------------------------------------------
ROUTE_NOT_FOUND: Final = spec("ROUTE_NOT_FOUND", 404, "No API route has this path.", from_seed=False)
METHOD_NOT_ALLOWED: Final = spec(
    "METHOD_NOT_ALLOWED", 405, "The route exists but does not take this HTTP method.", from_seed=False
)
STATE_CONFLICT: Final = spec(
    "STATE_CONFLICT", 409, "The command conflicts with current state (a concurrent change or duplicate)."
)
INTERNAL_ERROR: Final = spec(
    "INTERNAL_ERROR", 500, "The gateway failed in a way it has no more specific code for (it is logged)."
)


# Every ErrorSpec constant above, in the order defined: one list of codes, not two to keep alike.
ERROR_CODES: Final[dict[str, ErrorSpec]] = {
    value.code: value for value in list(globals().values()) if isinstance(value, ErrorSpec)
}


def spec_for(code: str) -> ErrorSpec:
    """The catalogue entry for ``code``; ``KeyError`` for a code that is not in the catalogue."""
    return ERROR_CODES[code]


class ServingError(Exception):
    """A failure with a stable catalogue code.

    ``http_status`` defaults to the code's catalogue status; pass it explicitly only where the
    reference behaviour reports that code with another status (see the module docstring).
    ``details`` holds secret-free, content-free facts for the error body and the failure event.
    """

    code: str
    message: str
    param: str | None
    details: dict[str, object]

    def __init__(
        self,
        code: str,
        message: str,
        param: str | None = None,
        *,
        http_status: int | None = None,
        details: dict[str, object] | None = None,
    ) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown error code {code!r}")
        if http_status is not None and not 400 <= http_status <= 599:
            raise ValueError(f"error status must be 4xx or 5xx, got {http_status}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.details = dict(details) if details else {}
        self._status_override = http_status

    @property
    def spec(self) -> ErrorSpec:
        return ERROR_CODES[self.code]

    @property
    def http_status(self) -> int:
        if self._status_override is not None:
            return self._status_override
        return self.spec.http_status

    @property
    def type(self) -> ErrorType:
        if self._status_override is None or self._status_override == self.spec.http_status:
            return self.spec.type
        return error_type_for_status(self._status_override)

    def to_body(self, request_id: str | None = None) -> dict[str, object]:
        """The wire shape: ``{"error": {"code", "message", "type", "param", "request_id"}}``."""
        error: dict[str, object] = {
            "code": self.code,
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "request_id": request_id,
        }
        if self.details:
            error["details"] = dict(self.details)
        return {"error": error}

    def __repr__(self) -> str:
        return f"ServingError(code={self.code!r}, http_status={self.http_status}, message={self.message!r})"
