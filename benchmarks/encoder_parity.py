"""Train/test parity of a vectorizer on a finished run's sample (issue #18 evidence).

The evaluate stage already writes ``eval/encoder_parity.json`` for the run's own embeddings. This
script measures the same sample (same rows, same candidate labels: ``pina_spark.models.parity``'s
id-hash rule) with another encoder, so that a fine-tuned encoder's train - test gaps can be read
against the frozen encoder's gaps on exactly the same rows (the noise level, and how much of the gap
the data itself has).

Usage::

    python benchmarks/encoder_parity.py RUN_ROOT [--encoder minilm] [--json OUT]
        [--max-per-split 5000]

``--encoder run`` reads the run's embeddings (what evaluate measured); ``minilm`` encodes the
sampled texts with the frozen all-MiniLM-L6-v2 shipped in the wheel (dense part only, as the
run's measurement). Prints the JSON (``train``, ``test``, ``gap`` per metric) and writes it to
``--json`` when given.
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", help="a finished run's output root")
    p.add_argument("--encoder", choices=["run", "minilm"], default="minilm")
    p.add_argument("--max-per-split", type=int, default=5000)
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="minilm's max_length (default: the run's, from " "vectorizer/encoder.json, else 64)",
    )
    p.add_argument("--json", default=None)
    p.add_argument(
        "--exclude-twins",
        choices=["auto", "yes", "no"],
        default="auto",
        help="leave an item's own label node out of its candidates (auto: when the "
        "run's manifest says task.labels: graph)",
    )
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pina_spark import storage
    from pina_spark.config import SparkConfig
    from pina_spark.models import parity
    from pina_spark.orchestration.session import get_spark

    encoder = None
    if args.encoder == "minilm":
        from pina_spark.models.artifacts import ENCODER_JSON, vectorizer_dir
        from pina_spark.models.encoders import load_encoder

        spec_path = os.path.join(vectorizer_dir(os.path.join(args.root, "models")), ENCODER_JSON)
        max_length = args.max_length or (
            json.load(open(spec_path)).get("max_length", 64) if os.path.exists(spec_path) else 64
        )
        encoder = load_encoder({"kind": "minilm", "path": None, "max_length": max_length})
    twins = args.exclude_twins == "yes"
    if args.exclude_twins == "auto":
        with open(storage.RunPaths(args.root).manifest) as fh:
            twins = json.load(fh).get("config", {}).get("task", {}).get("labels") == "graph"
    spark = get_spark(
        SparkConfig(
            master="local[2]", app_name="encoder_parity", conf={"spark.ui.enabled": "false"}
        )
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        res = parity.measure_run(
            spark,
            storage.RunPaths(args.root),
            args.max_per_split,
            encoder=encoder,
            exclude_twins=twins,
        )
    finally:
        spark.stop()
    if res is None:
        raise SystemExit(f"{args.root}: no test instance or no embeddings to measure")
    res["encoder"] = args.encoder
    res["root"] = args.root
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
