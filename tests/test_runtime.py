"""Executor runtime: device choice from task resources, the per-worker model cache, load counts
and load errors (pina_spark/runtime: cache.py, device.py, checksums.py)."""

import os
import threading
import time
import uuid

import pytest

from pina_spark import runtime
from pina_spark.runtime import checksums


# --------------------------------------------------------------------------- device choice
class _Res:
    """Stands in for pyspark.resource.ResourceInformation."""

    def __init__(self, addresses):
        self.addresses = addresses


@pytest.mark.parametrize(
    "resources, env, cfg, expected",
    [
        ({"gpu": _Res(["1"])}, {"CUDA_VISIBLE_DEVICES": "1"}, "auto", "cuda:0"),
        ({"gpu": _Res(["1"])}, {}, "auto", "cuda:1"),
        ({"gpu": _Res(["3"])}, {"CUDA_VISIBLE_DEVICES": "2,3"}, "auto", "cuda:1"),
        ({"gpu": _Res(["0"])}, {"CUDA_VISIBLE_DEVICES": "5"}, "auto", "cuda:0"),  # already logical
        ({"gpu": _Res(["2"])}, {}, "cuda", "cuda:2"),
        ({"gpu": _Res(["0"])}, {}, "cpu", "cpu"),
        ({}, {}, "auto", "cpu"),
        ({"gpu": _Res([])}, {"CUDA_VISIBLE_DEVICES": "0"}, "auto", "cpu"),
        (None, {}, "auto", "cpu"),
    ],
)
def test_choose_device(resources, env, cfg, expected):
    assert runtime.choose_device(resources, env, cfg) == expected


def test_choose_device_accepts_spark_resource_information():
    from pyspark.resource import ResourceInformation

    res = {"gpu": ResourceInformation("gpu", ["1"])}
    assert runtime.choose_device(res, {"CUDA_VISIBLE_DEVICES": "1"}, "auto") == "cuda:0"


def test_cuda_requested_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="inference.device=cuda but no GPU"):
        runtime.choose_device({}, {}, "cuda", cuda_available=False)
    # torch sees a GPU but Spark gave the task none: falls back to the first visible one
    assert runtime.choose_device({}, {}, "cuda", cuda_available=True) == "cuda:0"


def test_gpu_address_outside_visible_devices_is_an_error():
    with pytest.raises(RuntimeError, match="not among CUDA_VISIBLE_DEVICES"):
        runtime.choose_device({"gpu": _Res(["7"])}, {"CUDA_VISIBLE_DEVICES": "2,3"}, "auto")
    with pytest.raises(ValueError, match="inference.device"):
        runtime.choose_device({}, {}, "tpu")


def test_task_threads():
    class _TC:
        def cpus(self):
            return 3

    assert runtime.task_threads(0, _TC()) == 3
    assert runtime.task_threads(5, _TC()) == 5
    assert runtime.task_threads(0, None) == 1


# --------------------------------------------------------------------------- cache
def test_model_cache_is_lru_and_counts_loads():
    c = runtime.ModelCache(capacity=2)
    calls = []

    def loader(name):
        def _f():
            calls.append(name)
            return name.upper()

        return _f

    assert c.get_or_load("a", loader("a")) == "A"
    assert c.get_or_load("b", loader("b")) == "B"
    assert c.get_or_load("a", loader("a")) == "A"  # hit, refreshes "a"
    assert c.get_or_load("c", loader("c")) == "C"  # evicts "b" (least recent)
    assert "a" in c and "c" in c and "b" not in c
    assert c.get_or_load("b", loader("b")) == "B"  # reload
    assert calls == ["a", "b", "c", "b"]
    assert c.loads["b"] == 2 and c.loads["a"] == 1
    assert len(c) == 2
    with pytest.raises(ValueError):
        runtime.ModelCache(capacity=0)


def test_model_cache_loads_once_under_concurrency():
    c = runtime.ModelCache(capacity=4)
    n_calls = []

    def slow():
        n_calls.append(1)
        time.sleep(0.05)
        return object()

    got = []
    threads = [
        threading.Thread(target=lambda: got.append(c.get_or_load("m", slow))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(n_calls) == 1
    assert len({id(g) for g in got}) == 1


def test_load_stats_and_summary():
    p = runtime.LoadStatsParam()
    acc = p.zero({})
    acc = p.addInPlace(acc, {"loads|1|g": 1, "rows|x": 4})
    acc = p.addInPlace(acc, {"loads|2|g": 1, "loads|2|v": 1, "rows|x": 6})
    s = runtime.summarize_loads(acc)
    assert acc["rows|x"] == 10
    assert s["model_loads"] == 3 and s["worker_processes"] == 2
    assert s["max_loads_per_worker_model"] == 1
    assert s["loads_per_worker"]["2"] == {"g": 1, "v": 1}


def test_executor_functions_refuse_the_driver():
    with pytest.raises(RuntimeError, match="executor side"):
        runtime.get_model("/nowhere", lambda d, dev: None)
    with pytest.raises(RuntimeError, match="executor side"):
        runtime.resolve_device("auto")


def test_local_model_dir_missing_names_the_path(tmp_path):
    missing = str(tmp_path / "models" / "g" / "pina" / "full")
    with pytest.raises(runtime.ModelLoadError, match=missing):
        runtime.local_model_dir(missing)


def test_remote_model_dir_is_copied_once(tmp_path, monkeypatch):
    src = tmp_path / "remote"
    src.mkdir()
    (src / "w.bin").write_bytes(b"weights")
    copies = []

    def fake_copy(a, b):
        copies.append((a, b))
        import shutil

        shutil.copytree(str(src), b)

    monkeypatch.setenv("PINA_MODEL_CACHE", str(tmp_path / "cache"))
    # checksums.py reads both through the storage package, where the patch takes effect
    monkeypatch.setattr(checksums.storage, "is_remote", lambda u: u.startswith("s3://"))
    monkeypatch.setattr(checksums.storage, "copy_dir", fake_copy)
    uri = f"s3://bucket/{uuid.uuid4().hex}/models/vectorizer"
    d1 = runtime.local_model_dir(uri, "v1")
    d2 = runtime.local_model_dir(uri, "v1")
    assert d1 == d2 and len(copies) == 1
    assert open(os.path.join(d1, "w.bin"), "rb").read() == b"weights"

    def broken_copy(a, b):
        raise OSError("access denied")

    monkeypatch.setattr(checksums.storage, "copy_dir", broken_copy)
    with pytest.raises(runtime.ModelLoadError, match="s3://bucket/x/models/g"):
        runtime.local_model_dir("s3://bucket/x/models/g", "v1")


def test_local_model_dir_verifies_checksums_once_per_version(tmp_path):
    d = tmp_path / "models" / "g"
    d.mkdir(parents=True)
    (d / "w.bin").write_bytes(b"weights")
    runtime.write_checksums(str(d))
    uri = str(d)
    assert runtime.local_model_dir(uri, "v1") == uri
    (d / "w.bin").write_bytes(b"planted")
    assert runtime.local_model_dir(uri, "v1") == uri  # verified once for this version
    with pytest.raises(runtime.ModelLoadError, match="w.bin does not match its checksum"):
        runtime.local_model_dir(uri, "v2")


def test_check_artifacts_names_the_broken_file(tmp_path):
    import numpy as np

    d = tmp_path / "g"
    (d / "ranker" / "0.model").mkdir(parents=True)
    (d / "param.json").write_text("{}")
    (d / "ranker" / "param.json").write_text("{}")
    w = d / "ranker" / "0.model" / "W.npz"
    np.savez(str(w), a=np.arange(10))
    np.save(str(d / "output_nodes.npy"), np.arange(3))
    runtime.check_artifacts(str(d), ["param.json", "ranker/param.json"])  # intact: no error
    w.write_bytes(w.read_bytes()[:20])  # truncated
    with pytest.raises(runtime.ModelLoadError, match=str(w)):
        runtime.check_artifacts(str(d))
    w.unlink()
    with pytest.raises(runtime.ModelLoadError, match="missing: .*ranker/param.json"):
        (d / "ranker" / "param.json").unlink()
        runtime.check_artifacts(str(d), ["param.json", "ranker/param.json"])


def test_check_artifacts_counted_text_files(tmp_path):
    vocab = tmp_path / "tfidf" / "vocab.txt"
    vocab.parent.mkdir()
    vocab.write_bytes(b"2\n0\tfoo\n1\tbar\n")
    runtime.check_artifacts(str(tmp_path), counted_text=("vocab.txt",))
    vocab.write_bytes(b"2\n0\tfoo\n")  # truncated
    with pytest.raises(runtime.ModelLoadError, match=str(vocab)):
        runtime.check_artifacts(str(tmp_path), counted_text=("vocab.txt",))
    vocab.write_bytes(b"\x00garbage")  # overwritten
    with pytest.raises(runtime.ModelLoadError, match=str(vocab)):
        runtime.check_artifacts(str(tmp_path), counted_text=("vocab.txt",))
    # a fine-tuned encoder beside the tf-idf has a Hugging Face vocab.txt (one token a line, no
    # count): with counted_under only the tf-idf's files are read as counted text
    vocab.write_bytes(b"2\n0\tfoo\n1\tbar\n")
    hf = tmp_path / "encoder" / "vocab.txt"
    hf.parent.mkdir()
    hf.write_text("[PAD]\n[UNK]\nthe\n")
    runtime.check_artifacts(str(tmp_path), counted_text=("vocab.txt",), counted_under="tfidf")
    with pytest.raises(runtime.ModelLoadError, match=str(hf)):
        runtime.check_artifacts(str(tmp_path), counted_text=("vocab.txt",))


# --------------------------------------------------------------------------- inside Spark
def _count_loads_job(spark, uri, n_parts):
    acc = spark.sparkContext.accumulator({}, runtime.LoadStatsParam())

    def fn(batches):
        import pyarrow as pa

        for rb in batches:
            m = runtime.get_model(uri, lambda d, dev: {"dir": d}, "v", "cpu", acc, "m")
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([os.getpid()] * rb.num_rows, pa.int64()),
                    pa.array([m["dir"]] * rb.num_rows),
                ],
                names=["pid", "dir"],
            )

    rows = spark.range(0, 64, 1, n_parts).mapInArrow(fn, "pid long, dir string").collect()
    return rows, dict(acc.value)


@pytest.mark.slow
def test_each_worker_loads_a_model_once(spark, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    rows, counters = _count_loads_job(spark, str(model), 8)
    pids = {r.pid for r in rows}
    loads = {k: v for k, v in counters.items() if k.startswith("loads|")}
    assert set(r.dir for r in rows) == {str(model)}
    # 8 tasks ran; every worker process that ran one loaded the model exactly once
    assert set(loads.values()) == {1}
    assert {int(k.split("|")[1]) for k in loads} == pids
    assert len(pids) <= 2  # local[2] with worker reuse
    # a second job on the same workers: the cache serves the model, no load at all
    _, again = _count_loads_job(spark, str(model), 8)
    assert not any(k.startswith("loads|") for k in again)


def test_failing_load_fails_the_task_naming_the_artifact(spark, tmp_path):
    bad = tmp_path / "models" / "g" / "pina" / "full"
    bad.mkdir(parents=True)
    uri = str(bad)

    def fn(batches):
        def loader(d, dev):
            raise ValueError("truncated weight file")

        for rb in batches:
            runtime.get_model(uri, loader)
            yield rb

    with pytest.raises(Exception) as ei:
        spark.range(4).mapInArrow(fn, "id long").collect()
    assert uri in str(ei.value) and "truncated weight file" in str(ei.value)
