#!/usr/bin/env bash
# Refresh the vendored GraphiQL assets in haki_context/static/graphiql/.
#
# Strawberry's stock GraphiQL page loads its JS/CSS from unpkg, so it is a
# blank page offline. We serve the same builds from our own server instead;
# this script re-downloads them with `npm pack` (tarballs straight from the npm
# registry, no node_modules, no install scripts) and copies only the files the
# page needs plus each package's licence. It is a developer tool: nothing is
# ever fetched at run time.
#
# The versions below must match those in Strawberry's template
# (strawberry/static/graphiql.html); bump them together with strawberry-graphql.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${ROOT}/haki_context/static/graphiql"

REACT_VERSION="18.2.0"
REACT_DOM_VERSION="18.2.0"
JS_COOKIE_VERSION="3.0.5"
GRAPHIQL_VERSION="3.8.3"
EXPLORER_VERSION="1.0.2"
# Not loaded by the page itself: @graphiql/plugin-explorer's UMD build bundles
# graphiql-explorer (its only dependency, "^0.9.0"; 0.9.0 is the last release),
# so we fetch it only to ship its licence next to the bundle.
GRAPHIQL_EXPLORER_VERSION="0.9.0"

command -v npm >/dev/null || { echo "npm is required" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

# fetch <spec> <dir>: npm pack the spec and unpack it into $WORK/<dir>.
fetch() {
  local spec="$1" dir="$2" tarball
  mkdir -p "${WORK}/${dir}"
  # --ignore-scripts: we only want the published tarball, never run its code.
  tarball="$(cd "${WORK}" && npm pack --silent --ignore-scripts "${spec}" | tail -n 1)"
  tar -xzf "${WORK}/${tarball}" -C "${WORK}/${dir}" --strip-components=1
}

# put <src relative to WORK> <dest name>: copy one file, failing loudly if the
# package layout changed under a new version.
put() {
  local src="${WORK}/$1"
  [[ -f "${src}" ]] || { echo "missing in package: $1" >&2; exit 1; }
  cp "${src}" "${STAGE}/$2"
}

fetch "react@${REACT_VERSION}" react
fetch "react-dom@${REACT_DOM_VERSION}" react-dom
fetch "js-cookie@${JS_COOKIE_VERSION}" js-cookie
fetch "graphiql@${GRAPHIQL_VERSION}" graphiql
fetch "@graphiql/plugin-explorer@${EXPLORER_VERSION}" plugin-explorer
fetch "graphiql-explorer@${GRAPHIQL_EXPLORER_VERSION}" graphiql-explorer

# Stage first, then swap, so a failed run never leaves a half-updated dir.
STAGE="${WORK}/stage"
mkdir -p "${STAGE}"

put react/umd/react.production.min.js           react.production.min.js
put react-dom/umd/react-dom.production.min.js   react-dom.production.min.js
put js-cookie/dist/js.cookie.min.js             js.cookie.min.js
put graphiql/graphiql.min.js                    graphiql.min.js
put graphiql/graphiql.min.css                   graphiql.min.css
put plugin-explorer/dist/index.umd.js           plugin-explorer.umd.js
put plugin-explorer/dist/style.css              plugin-explorer.css

put react/LICENSE            LICENSE.react
put react-dom/LICENSE        LICENSE.react-dom
put js-cookie/LICENSE        LICENSE.js-cookie
put graphiql/LICENSE         LICENSE.graphiql
# The plugin-explorer tarball ships no LICENSE file; its package.json says MIT
# and it lives in the graphql/graphiql monorepo, whose MIT licence ("GraphQL
# Contributors") is the one the graphiql package ships.
put graphiql/LICENSE         LICENSE.plugin-explorer
put graphiql-explorer/LICENSE LICENSE.graphiql-explorer

# Check the staged files against the integrity="sha384-..." attributes of the
# installed Strawberry template: this proves we vendored exactly the bytes the
# stock page would load from unpkg, and catches a version drift after a
# strawberry-graphql upgrade. Skipped (with a warning) if Strawberry is absent.
PYTHON="${PYTHON:-${ROOT}/.venv/bin/python}"
if [[ -x "${PYTHON}" ]] && "${PYTHON}" -c "import strawberry" 2>/dev/null; then
  "${PYTHON}" - "${STAGE}" <<'PY'
import base64, hashlib, pathlib, re, sys
import strawberry

stage = pathlib.Path(sys.argv[1])
template = pathlib.Path(strawberry.__file__).parent / "static" / "graphiql.html"
expected = set(re.findall(r'integrity="(sha384-[^"]+)"', template.read_text("utf-8")))
assets = [p for p in stage.iterdir() if p.suffix in (".js", ".css")]
actual = {
    p.name: "sha384-" + base64.b64encode(hashlib.sha384(p.read_bytes()).digest()).decode()
    for p in assets
}
bad = sorted(name for name, h in actual.items() if h not in expected)
if bad or len(actual) != len(expected):
    sys.exit(f"SRI mismatch with {template}: {bad or 'file count differs'}")
print(f"All {len(actual)} assets match the SRI hashes in {template}")
PY
else
  echo "warning: strawberry not importable with ${PYTHON}; skipped SRI check" >&2
fi

mkdir -p "${DEST}"
# Keep README.md (hand-written); replace every vendored file.
find "${DEST}" -maxdepth 1 -type f ! -name README.md -delete
cp "${STAGE}"/* "${DEST}/"

echo "Vendored GraphiQL assets into ${DEST}:"
(cd "${DEST}" && ls -l && du -ch -- * | tail -n 1)
