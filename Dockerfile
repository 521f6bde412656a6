# Image for the gateway, projector and agent processes (compose.yaml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY streams streams
COPY eventstore eventstore
COPY projections projections
COPY gateway gateway
COPY nodeagent nodeagent
COPY modelforge modelforge
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT ["modelforge"]
