# The context server as an image: `haki-context serve` on its embedded PostgreSQL + pgvector,
# its data on a volume at /var/lib/haki; or against the PostgreSQL named by HAKI_DATABASE_URL
# (docker-compose.yml pairs it with pgvector/pgvector:pg18).
#
# No Docker engine runs in the development environment, so this file is kept correct by
# reading; tests/test_docker_start.py checks it and runs its start command both ways: on an
# embedded database in a data folder, and against a real database through HAKI_DATABASE_URL.
#
#   docker build -t haki-context .
#   docker run -d --name haki -p 8000:8000 -v haki:/var/lib/haki haki-context
#   docker exec haki haki-context keys create --project my-project
#   docker run -p 8000:8000 -e HAKI_DATABASE_URL=postgresql://user:pass@host:5432/db haki-context
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

# Never run as root (PostgreSQL refuses to, too). The embedded database lives in HAKI_DATA_DIR,
# a volume the server's user owns, so it outlives the container; unused with HAKI_DATABASE_URL.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin haki \
    && mkdir -p /var/lib/haki && chown haki:haki /var/lib/haki
USER haki
WORKDIR /home/haki

# Bound to 0.0.0.0, keyless development mode is off either way: every request needs a key
# (`haki-context keys create` in the container).
ENV HAKI_PORT=8000 \
    HAKI_DATA_DIR=/var/lib/haki
VOLUME ["/var/lib/haki"]
EXPOSE 8000

# Ready means the database answers, migrations are applied and the embedder is loaded.
HEALTHCHECK --interval=15s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=3)"]

CMD ["haki-context", "serve", "--host", "0.0.0.0"]
