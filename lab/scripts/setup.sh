# Source on the GPU machine after `source /tmp/vllmenv/env.sh` (or with helion from .whl):
# installs the carried wheels of this project (dist/) and of nox (.noxwhl/) into /tmp, no network.
set -e
if [ -d dist ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hl dist/*.whl
  export PYTHONPATH=/tmp/hl:${PYTHONPATH:-}
  export PATH=/tmp/hl/bin:$PATH
  if [ -f dist/COMMIT ]; then export HL_COMMIT=$(cat dist/COMMIT); fi  # provenance of result rows
fi
if [ -d .noxwhl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/noxsite .noxwhl/*.whl
  export PYTHONPATH=${PYTHONPATH:-}:/tmp/noxsite
  export PATH=$PATH:/tmp/noxsite/bin
fi
export PYTHONUNBUFFERED=1
set +e
