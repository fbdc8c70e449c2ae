# The context server as an image: `haki-context serve` against the PostgreSQL + pgvector
# named by HAKI_DATABASE_URL (docker-compose.yml pairs it with pgvector/pgvector:pg18).
#
# No Docker engine runs in the development environment, so this file is kept correct by
# reading; tests/test_docker_start.py checks it and runs its start command against a real
# database through HAKI_DATABASE_URL.
#
#   docker build -t haki-context .
#   docker run -p 8000:8000 -e HAKI_DATABASE_URL=postgresql://user:pass@host:5432/db haki-context
#   docker run --rm -e HAKI_DATABASE_URL=... haki-context haki-context keys create --project P
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY haki_context ./haki_context
# The default install serves the shipped int8 ONNX model on onnxruntime: no torch in the image.
RUN pip install . \
    && if python -c "import torch" 2>/dev/null; then echo "torch was installed" >&2; exit 1; fi \
    && python -c "from haki_context.core.embedding.embedder import OnnxMiniLMEncoder; OnnxMiniLMEncoder.shipped()"

# Never run as root. HAKI_DATA_DIR only matters if HAKI_DATABASE_URL is left unset.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin haki
USER haki
WORKDIR /home/haki

# HAKI_DATABASE_URL is expected at run time (e.g. postgresql://haki:haki@db:5432/haki); with
# it set the server uses that database and development mode is off (every request needs a key).
ENV HAKI_PORT=8000 \
    HAKI_DATA_DIR=/home/haki/.haki-data
EXPOSE 8000

HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=3)"]

CMD ["haki-context", "serve", "--host", "0.0.0.0"]
