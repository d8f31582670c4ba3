#!/usr/bin/env bash
# EMR bootstrap action for the bootstrap-per-cluster route (docs/emr.md; the default route is the
# per-job archive with conf/emr/bootstrap-node.sh): install pina-spark's Python stack on EVERY
# node from the wheelhouse that `make dist-wheelhouse` builds and docs/emr.md uploads to S3. No
# PyPI access is needed (offline install). New code then needs a new cluster (or this script
# rerun on every node); steps use spark.pyspark.python=/opt/pina/venv/bin/python.
#
#   --bootstrap-actions Path=s3://YOUR-BUCKET/pina/dist/bootstrap.sh,Args=[s3://YOUR-BUCKET/pina/dist]
#   GPU nodes:          ...,Args=[s3://YOUR-BUCKET/pina/dist,--gpu]
#
# EMR 7 (Amazon Linux 2023) ships Python 3.9 as python3, but the pinned stack has no cp39 wheels
# (torch 2.13, pyarrow 25 need >= 3.10), so this installs AL2023's python3.11 package and builds
# /opt/pina/venv with it; the steps point Spark there (--conf spark.pyspark.python=
# /opt/pina/venv/bin/python at spark-submit: the archive route's steps name ./env/bin/python).
# The venv never contains pyspark: EMR's Spark (3.5) is used, found through SPARK_HOME.
set -euxo pipefail

DIST_URI="${1:?usage: bootstrap.sh s3://BUCKET/prefix/dist [--gpu]}"
GPU="${2:-}"
VENV=/opt/pina/venv
PYBIN="${PINA_PYTHON:-python3.11}"

WORK=$(mktemp -d /tmp/pina-bootstrap.XXXXXX)
# python3.11 and (--gpu) the EMR 7 cgroup v1 devices mount: the same script as the archive route
aws s3 cp --only-show-errors "$DIST_URI/bootstrap-node.sh" "$WORK/bootstrap-node.sh"
bash "$WORK/bootstrap-node.sh" "$GPU"
aws s3 cp --recursive --only-show-errors "$DIST_URI/wheelhouse/" "$WORK/wheelhouse/"

sudo mkdir -p /opt/pina
sudo chown "$(id -u):$(id -g)" /opt/pina
"$PYBIN" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install --no-index --find-links "$WORK/wheelhouse" --upgrade pip || true
if [[ "$GPU" == "--gpu" ]]; then
  # a CUDA build of torch 2.13.0 uploaded to dist/wheelhouse-gpu/ (make dist-wheelhouse-gpu)
  aws s3 cp --recursive --only-show-errors "$DIST_URI/wheelhouse-gpu/" "$WORK/wheelhouse-gpu/"
  if ! ls "$WORK"/wheelhouse-gpu/torch-2.13.0*.whl >/dev/null 2>&1; then
    # without it pip would take the CPU torch of wheelhouse/ and the GPU stages would run on CPU
    echo "bootstrap.sh --gpu: no torch 2.13.0 wheel under $DIST_URI/wheelhouse-gpu/" >&2
    exit 1
  fi
  $PIP install --no-index --find-links "$WORK/wheelhouse-gpu" --find-links "$WORK/wheelhouse" \
    torch==2.13.0
  "$VENV/bin/python" -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' is a CPU build')"
else
  $PIP install --no-index --find-links "$WORK/wheelhouse" torch==2.13.0
fi
# the pinned stack minus pyspark (requirements-emr.txt is written by `make dist`), then the
# project wheel without dependencies (they are all installed above)
$PIP install --no-index --find-links "$WORK/wheelhouse" -r "$WORK/wheelhouse/requirements-emr.txt"
$PIP install --no-index --no-deps "$WORK"/wheelhouse/pina_spark-*.whl
HF_HUB_OFFLINE=1 "$VENV/bin/python" -c "import pina_spark, pecos, torch, pyarrow; print('pina-spark ok', torch.__version__)"
rm -rf "$WORK"
