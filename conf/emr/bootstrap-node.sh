#!/usr/bin/env bash
# EMR bootstrap action for the archive-per-job route (the default, docs/emr.md): the job's Python
# environment comes with each spark-submit (--archives pina-env-<v>.tar.gz#env), so a node only
# needs the interpreter that the archive's bin/python links to, and, on GPU nodes, the cgroup v1
# devices controller that EMR 7's YARN GPU isolation expects.
#
#   --bootstrap-actions Path=s3://YOUR-BUCKET/pina/dist/bootstrap-node.sh,Name=pina-node
#   GPU nodes:          ...,Args=[--gpu]
#
# python3.11: AL2023's package (/usr/bin/python3.11); `make dist` packs the environment with
# --python-prefix /usr so that its bin/python points there. EMR 7's default python3 is 3.9.
set -euxo pipefail

GPU="${1:-}"
PYBIN="${PINA_PYTHON:-python3.11}"

if ! command -v "$PYBIN" >/dev/null 2>&1; then
  sudo dnf install -y python3.11 || sudo yum install -y python3.11
fi

if [[ "$GPU" == "--gpu" ]]; then
  # EMR 7.x: YARN manages GPUs only with cgroup v1's devices controller mounted where
  # configurations-gpu.json points (mount-path / cgroups root = /spark-rapids-cgroup).
  # Amazon EMR Release Guide, "Use the Nvidia RAPIDS Accelerator for Apache Spark",
  # "Add a bootstrap action for your cluster" (Amazon EMR 7.x).
  sudo mkdir -p /spark-rapids-cgroup/devices
  if ! mountpoint -q /spark-rapids-cgroup/devices; then
    sudo mount -t cgroup -o devices cgroupv1-devices /spark-rapids-cgroup/devices
  fi
  sudo chmod a+rwx -R /spark-rapids-cgroup
  # the GPU discovery script of spark.executor.resource.gpu.discoveryScript (configurations-gpu.json,
  # steps-gpu.json): Spark's examples/src/main/scripts/getGpusResources.sh, written here because
  # EMR documents its own copy (/usr/lib/spark/scripts/gpu/) only with the RAPIDS plugin enabled
  sudo mkdir -p /opt/pina
  sudo tee /opt/pina/getGpusResources.sh >/dev/null <<'SCRIPT'
#!/usr/bin/env bash
# this node's GPUs as Spark's resource discovery reads them: {"name": "gpu", "addresses": ["0", ...]}
ADDRS=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/","/g')
echo "{\"name\": \"gpu\", \"addresses\":[\"$ADDRS\"]}"
SCRIPT
  sudo chmod 755 /opt/pina/getGpusResources.sh
fi
