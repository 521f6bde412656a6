#!/usr/bin/env bash
# Walk the operator steps of README.md's "Production: compose" against a running compose stack:
# import MiniLM on node-1, probe, approve, promote, create a client, embed through both gateways,
# read the admin API, tail the audit log and verify the read model. Run from the repository root
# after `docker compose up -d --build`, with the .env secrets exported (MODELFORGE_OPERATOR_TOKEN).
# Each step stops the script when it fails. Run it on a fresh stack (a second run finds MiniLM's
# stable deployment and stops at the promotion); it leaves a candidate and a client behind.
# PORTS, DC, MF and PY name the gateways' ports, `docker compose`, the CLI and a Python.
set -euo pipefail
: "${MODELFORGE_OPERATOR_TOKEN:?export MODELFORGE_OPERATOR_TOKEN (from .env)}"
export MODELFORGE_GATEWAY_URL=${MODELFORGE_GATEWAY_URL:-http://127.0.0.1:8080}
DC=${DC:-docker compose}
MF=${MF:-.venv/bin/modelforge}
PY=${PY:-python3}
RUN=${RUN:-$(date +%s)}
field() { $PY -c "import json,sys; print(json.load(sys.stdin)$1)"; }

set_id=$($DC exec -T agent modelforge models pull minilm --artifact-root /artifacts --node-id node-1 --register \
  | awk '/^artifact set/ {print $3}')
status=$($MF artifacts verify "$set_id" | field "['status']")
echo "artifact set $set_id: $status"
candidate=cand-smoke-$RUN
$MF candidates create "$candidate" --artifact-set "$set_id" --profile dimension=384 --profile normalized=true \
  --profile input_semantics=symmetric --config model_name=all-MiniLM-L6-v2 >/dev/null
lab=$($MF approvals lab --candidate "$candidate" --node node-1 | field "['approval_id']")
status=$($MF candidates probe "$candidate" --lab-approval "$lab" | field "['status']")
echo "probe: $status"
approval=$($MF approvals production --candidate "$candidate" --approved-by smoke \
  --review "deploy/smoke.sh: MiniLM from models pull, hashes checked by the agent" --reason "smoke test" \
  | field "['approval_id']")
deployment=$($MF deployments promote --candidate "$candidate" --approval "$approval" | field "['deployment_id']")
echo "deployment: $deployment"
key=$($DC exec -T gateway modelforge clients create --name "smoke-$RUN" --scope rag.embedding@1 | awk '/^api key/ {print $3}')
for port in ${PORTS:-8080 8081}; do
  dims=$(curl -fsS "http://127.0.0.1:$port/v1/embeddings" -H "Authorization: Bearer $key" \
    -H 'content-type: application/json' -d '{"model": "all-MiniLM-L6-v2", "input": ["hello"]}' \
    | field "['data'][0]['embedding'].__len__()")
  echo "gateway :$port embeds ($dims dimensions)"
done
for path in requests scheduler/placements scheduler/metrics nodes clients; do
  curl -fsS -o /dev/null "$MODELFORGE_GATEWAY_URL/admin/v1/$path" -H "Authorization: Bearer $MODELFORGE_OPERATOR_TOKEN"
  echo "admin read /admin/v1/$path"
done
echo "audit tail: $(timeout 10 $DC exec -T projector modelforge audit tail --aggregate client | grep -c Client || true) client events"
$DC exec -T projector modelforge replay --verify --no-progress
if $DC logs nats-1 nats-2 nats-3 | grep -i "permissions violation"; then
  echo "a NATS user was refused a subject (above)" >&2
  exit 1
fi
echo "smoke: every step answered"
