"""A candidate's runtime profile and deployment config: the string maps its events carry, checked
once at creation and read back into typed values at promotion."""

from __future__ import annotations

from streams.codes import ServingError
from streams.events import control as c
from streams.events import serving as s

RESIDENCY_KINDS = ("on_demand", "keep_warm", "always_warm")
PLACEMENTS = ("binpack", "spread")
MAX_REPLICAS = 64  # more copies than any fleet this serves has nodes: a typo, not a plan
EMBEDDING_CAPABILITIES = ("rag.embedding@1", "vision.embedding@1")


def _int(raw: str, name: str, code: str = "INVALID_INPUT") -> int:
    if not raw.strip():
        raise ServingError(code, f"`{name}` is required", name)
    try:
        value = int(raw)
    except ValueError:
        raise ServingError(code, f"`{name}` must be an integer, got {raw!r}", name) from None
    if value <= 0:
        raise ServingError(code, f"`{name}` must be positive", name)
    return value


def check_profile(capability: str, profile: dict[str, str], config: dict[str, str]) -> None:
    """A candidate's profile and deployment config, as they must be at its creation."""
    check_runtime_profile(capability, profile)
    residency_policy(config)
    scaling(config)
    if "max_batch_size" in config:
        _int(config["max_batch_size"], "max_batch_size")


def check_runtime_profile(capability: str, profile: dict[str, str]) -> None:
    """What a capability's runtime profile must declare: an embedding's space (dimension,
    normalisation, input semantics); the other capabilities' outputs are fixed by their contracts,
    so their profile may be empty."""
    if capability in EMBEDDING_CAPABILITIES:
        if not profile:
            raise ServingError(
                "PROFILE_SEMANTICS_INVALID",
                f"a {capability} candidate declares its embedding space in its runtime profile: "
                "dimension, normalized and input_semantics (the CLI: --profile dimension=384 "
                "--profile normalized=true --profile input_semantics=symmetric)",
                "runtime_profile",
            )
        _int(profile.get("dimension", ""), "dimension", "PROFILE_SEMANTICS_INVALID")
        if profile.get("normalized") not in ("true", "false"):
            raise ServingError(
                "PROFILE_SEMANTICS_INVALID", "`normalized` must be 'true' or 'false'", "normalized"
            )
        if not profile.get("input_semantics", "").strip():
            raise ServingError(
                "PROFILE_SEMANTICS_INVALID", "`input_semantics` is required", "input_semantics"
            )
        for part in filter(None, profile.get("truncatable_dimensions", "").split(",")):
            _int(part.strip(), "truncatable_dimensions", "PROFILE_SEMANTICS_INVALID")


def residency_policy(config: dict[str, str]) -> s.ResidencyPolicy:
    kind = config.get("residency", "on_demand")
    if kind not in RESIDENCY_KINDS:
        raise ServingError(
            "INVALID_INPUT", f"`residency` must be one of {', '.join(RESIDENCY_KINDS)}", "residency"
        )
    try:
        ttl = float(config.get("keep_warm_ttl_s", "0") or 0)
    except ValueError:
        raise ServingError("INVALID_INPUT", "`keep_warm_ttl_s` must be a number", "keep_warm_ttl_s") from None
    if ttl < 0 or (kind == "keep_warm" and ttl <= 0):
        raise ServingError("INVALID_INPUT", "keep_warm needs a positive `keep_warm_ttl_s`", "keep_warm_ttl_s")
    return s.ResidencyPolicy(kind=kind, keep_warm_ttl_s=ttl)  # type: ignore[arg-type]


def scaling(config: dict[str, str]) -> tuple[s.Replicas, s.PlacementKind]:
    """`replicas_min`, `replicas_max` (default 1 and 1, or max = min) and `placement` of a
    deployment config, checked as `check_scaling` does."""
    low = _int(config.get("replicas_min", "1"), "replicas_min")
    high = _int(config.get("replicas_max", str(low)), "replicas_max")
    placement = config.get("placement", "binpack")
    return check_scaling(low, high, placement)


def check_scaling(low: int, high: int, placement: str) -> tuple[s.Replicas, s.PlacementKind]:
    """1 <= min <= max <= MAX_REPLICAS and a known placement, or INVALID_INPUT naming the field."""
    if not 1 <= low <= MAX_REPLICAS:
        raise ServingError("INVALID_INPUT", f"`replicas.min` must be 1 to {MAX_REPLICAS}", "replicas.min")
    if not low <= high <= MAX_REPLICAS:
        raise ServingError(
            "INVALID_INPUT",
            f"`replicas.max` must be at least `replicas.min` and at most {MAX_REPLICAS}",
            "replicas.max",
        )
    if placement not in PLACEMENTS:
        raise ServingError(
            "INVALID_INPUT", f"`placement` must be one of {', '.join(PLACEMENTS)}", "placement"
        )
    return s.Replicas(min=low, max=high), placement  # type: ignore[return-value]


def max_batch_size(config: dict[str, str]) -> int:
    return _int(config.get("max_batch_size", "32"), "max_batch_size")


def truncatable(profile: dict[str, str]) -> tuple[int, ...]:
    return tuple(sorted(int(p) for p in profile.get("truncatable_dimensions", "").split(",") if p.strip()))


def output_mismatch(capability: str, profile: dict[str, str], probed: c.ProbeCompleted) -> str:
    """Why the output a probe measured is not the embedding space the candidate declares ('' when
    it is): the space a deployment serves comes from the declared profile, so a profile the model
    does not produce must stop the candidate before lab-ready and production."""
    if capability not in EMBEDDING_CAPABILITIES:
        return ""
    if probed.output_dimension <= 0:
        return "the probe did not measure the output dimension (a probe from an older agent): probe again"
    declared = profile.get("dimension", "").strip()
    if declared != str(probed.output_dimension):
        return f"the profile declares dimension {declared}, the probe measured {probed.output_dimension}"
    normalized = "true" if probed.output_normalized else "false"
    if profile.get("normalized") != normalized:
        return f"the profile declares normalized={profile.get('normalized')}, the probe measured {normalized}"
    too_long = [d for d in truncatable(profile) if d > probed.output_dimension]
    if too_long:
        return f"truncatable dimensions {too_long} exceed the measured dimension {probed.output_dimension}"
    return ""
