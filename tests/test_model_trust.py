"""Loading a model folder runs no code from it (issue #36, defect 5).

A planted file would create a marker file when unpickled: each test checks that the load is
refused naming the file, and that the marker does not exist. Folder-level trust (the HMAC key in
``$PINA_SPARK_MODEL_KEY``, the promotion record's digest, ``run.trust_models``) is checked on
the driver (pina_spark/models/trust.py) and, through the digest in the embed task, by every
executor (pina_spark/runtime/checksums.py).
"""

import hashlib
import json
import os
import pickle

import pytest

from pina_spark import runtime, storage
from pina_spark.config import ConfigError, config_from_dict
from pina_spark.models import artifacts, trust
from pina_spark.orchestration import promotion
from pina_spark.runtime import checksums

KEY = "k" * 32


class _Planted:
    """Unpickling this creates ``marker``: what a planted model file would run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _vectorizer(d, tfidf_type="tfidf", encoder=None):
    """A minimal saved vectorizer: a real PECOS tf-idf (or a planted pickle of another type)."""
    from pecos.utils.featurization.text.preprocess import Preprocessor

    tf = os.path.join(d, "tfidf")
    if tfidf_type == "tfidf":
        Preprocessor.train(["a b c", "b c d"], {"type": "tfidf", "kwargs": {}}).save(tf)
    else:
        os.makedirs(tf)
        with open(os.path.join(tf, "config.json"), "w") as fh:
            json.dump({"type": tfidf_type, "kwargs": {}}, fh)
        with open(os.path.join(tf, "vectorizer.pkl"), "wb") as fh:
            pickle.dump(_Planted(os.path.join(os.path.dirname(d), "MARKER")), fh)
    with open(os.path.join(d, "encoder.json"), "w") as fh:
        json.dump(encoder or {"kind": "minilm", "path": None, "max_length": 16}, fh)
    return d


def _rewrite_checksums(d):
    """What whoever can write the folder does after changing a file: matching checksums."""
    for base, _, files in os.walk(d):
        sums = {
            f: hashlib.sha256(open(os.path.join(base, f), "rb").read()).hexdigest()
            for f in files
            if f not in (checksums.CHECKSUMS, checksums.SIGNATURE, "_SUCCESS")
        }
        with open(os.path.join(base, checksums.CHECKSUMS), "w") as fh:
            json.dump(sums, fh)


# --------------------------------------------------------------------------- what a loader reads
@pytest.mark.parametrize("planted_type", ["sklearntfidf", "sklearnhashing"])
def test_planted_preprocessor_type_is_refused_before_unpickling(tmp_path, planted_type):
    """tfidf/config.json naming a pickling PECOS vectorizer: refused before PECOS sees it, even
    with matching in-folder checksums."""
    vec = _vectorizer(str(tmp_path / "vectorizer"), planted_type)
    runtime.write_checksums(vec)
    assert runtime.verify_checksums(vec, vec)  # the folder's own checksums vouch for it
    marker = tmp_path / "MARKER"
    cfg_json = os.path.join(vec, "tfidf", "config.json")
    with pytest.raises(runtime.ModelLoadError, match=f"{cfg_json}.*{planted_type}"):
        artifacts.load_vectorizer(vec, "cpu")
    assert not marker.exists()


def test_saved_tfidf_loads_and_transforms(tmp_path):
    from pina_spark.models.safe_load import load_tfidf

    vec = _vectorizer(str(tmp_path / "vectorizer"))
    pre = load_tfidf(os.path.join(vec, "tfidf"))
    assert pre.predict(["a b", "zzz"]).shape[0] == 2


def test_encoder_path_outside_the_vectorizer_is_refused(tmp_path):
    """encoder.json may name only the folder's own encoder/ (or the wheel's MiniLM)."""
    from pina_spark.models.vectorizer import PhiPre

    vec = _vectorizer(
        str(tmp_path / "vectorizer"),
        encoder={"kind": "hf", "path": str(tmp_path / "elsewhere"), "max_length": 16},
    )
    with pytest.raises(runtime.ModelLoadError, match="encoder.json.*elsewhere"):
        PhiPre.load(vec)


def test_torch_module_loads_weights_only(tmp_path):
    import torch
    from pecos.xmc.xtransformer.network import TransformerLinearXMCHead

    from pina_spark.models.safe_load import load_torch_module

    allowed = (TransformerLinearXMCHead, torch.nn.Embedding)
    good = str(tmp_path / "head")
    head = TransformerLinearXMCHead(4, 3)
    torch.save(head, good)
    back = load_torch_module(good, allowed)
    assert torch.equal(back.W.weight, head.W.weight)
    bad = str(tmp_path / "planted")
    torch.save(_Planted(str(tmp_path / "MARKER")), bad)
    with pytest.raises(runtime.ModelLoadError, match=bad):
        load_torch_module(bad, allowed)
    assert not (tmp_path / "MARKER").exists()


def _tiny_xtransformer(d):
    """A saved XR-Transformer text encoder as the pretrain stage writes it (tiny BERT)."""
    import numpy as np
    import scipy.sparse as sp
    from pecos.xmc.xtransformer.matcher import TransformerMatcher
    from pecos.xmc.xtransformer.model import XTransformer
    from pecos.xmc.xtransformer.network import BertForXMC, TransformerLinearXMCHead
    from transformers import BertConfig, BertTokenizerFast

    from pina_spark.models.encoders import minilm_path

    config = BertConfig(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    matcher = TransformerMatcher(
        BertForXMC(config),
        BertTokenizerFast.from_pretrained(minilm_path()),
        TransformerLinearXMCHead(8, 3),
        C=sp.csr_matrix(np.ones((3, 1), np.float32)),
    )
    XTransformer(matcher, None).save(d)
    return d


def test_xtransformer_label_head_is_loaded_weights_only(tmp_path):
    """PECOS' TransformerMatcher.load reads text_model with torch.load(weights_only=False)."""
    from pina_spark.models.encoders import load_encoder

    d = _tiny_xtransformer(str(tmp_path / "encoder"))
    spec = {"kind": "xtransformer", "path": d, "max_length": 8}
    enc = load_encoder(spec)
    assert enc.dim == 8 and enc.encode(["a title", ""]).shape == (2, 8)
    import torch

    head = os.path.join(d, "text_encoder", "text_model")
    torch.save(_Planted(str(tmp_path / "MARKER")), head)
    with pytest.raises(runtime.ModelLoadError, match=head):
        load_encoder(spec)
    assert not (tmp_path / "MARKER").exists()


def test_xtransformer_tokenizer_is_loaded_without_remote_code(tmp_path, monkeypatch):
    """The tokenizer of a saved XR-Transformer is loaded with ``trust_remote_code=False`` passed
    explicitly, as its config and encoder are."""
    from pecos.xmc.xtransformer.network import ENCODER_CLASSES

    from pina_spark.models import safe_load

    d = _tiny_xtransformer(str(tmp_path / "encoder"))
    seen = []
    for cls in {dnn.tokenizer_class for dnn in ENCODER_CLASSES.values()}:
        real = cls.from_pretrained

        def spy(klass, *args, _real=real, **kwargs):
            seen.append((os.path.basename(str(args[0])), kwargs.get("trust_remote_code")))
            return _real(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    safe_load.load_xtransformer(d)
    # the load of the saved folder (transformers may then reload it from a temporary copy)
    assert seen[0] == ("text_tokenizer", False), seen


def test_hf_weights_bin_is_loaded_weights_only(tmp_path):
    """A planted pytorch_model.bin instead of model.safetensors (transformers' weights-only
    unpickler; the project passes weights_only=True and no remote code explicitly)."""
    import shutil

    from pina_spark.models.encoders import MeanPoolEncoder, minilm_path

    d = tmp_path / "hf"
    shutil.copytree(minilm_path(), d)
    os.remove(d / "model.safetensors")
    import torch

    torch.save(_Planted(str(tmp_path / "MARKER")), str(d / "pytorch_model.bin"))
    with pytest.raises(OSError, match="pytorch_model.bin") as ei:
        MeanPoolEncoder(str(d), "hf", 16)
    assert not (tmp_path / "MARKER").exists()
    chain, e = [], ei.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any("Weights only load failed" in str(c) for c in chain), chain


# --------------------------------------------------------------------------- who vouches
def _cfg(output, **run):
    return config_from_dict({"output": str(output), "run": run})


def _published_vectorizer(root):
    """``<root>/vectorizer`` published the way artifacts.publish writes it (checksums, and the
    signature when the key is set)."""
    vec = _vectorizer(storage.RunPaths(str(root)).table(storage.VECTORIZER))
    runtime.write_checksums(vec)
    return vec


def _tamper(vec):
    """Change a file and rewrite the checksums to match (no key needed)."""
    with open(os.path.join(vec, "encoder.json"), "w") as fh:
        json.dump({"kind": "minilm", "path": None, "max_length": 17}, fh)
    _rewrite_checksums(vec)
    assert runtime.verify_checksums(vec, vec)  # the in-folder checksums are fooled


def test_hmac_key_refuses_rewritten_or_unsigned_models(tmp_path, monkeypatch):
    monkeypatch.setenv(checksums.MODEL_KEY_ENV, KEY)
    vec = _published_vectorizer(tmp_path / "run")
    assert os.path.exists(os.path.join(vec, checksums.SIGNATURE))
    cfg = _cfg(tmp_path / "run")
    digest = trust.anchor(cfg, vec, "vectorizer")
    assert digest == trust.folder_digest(vec) and digest
    _tamper(vec)
    with pytest.raises(trust.ModelTrustError, match=f"{checksums.SIGNATURE} does not match"):
        trust.anchor(cfg, vec, "vectorizer")
    os.remove(os.path.join(vec, checksums.SIGNATURE))
    with pytest.raises(trust.ModelTrustError, match="unsigned models are refused"):
        trust.anchor(cfg, vec, "vectorizer")
    # signed under another key
    monkeypatch.setenv(checksums.MODEL_KEY_ENV, "x" * 32)
    runtime.write_checksums(vec)
    monkeypatch.setenv(checksums.MODEL_KEY_ENV, KEY)
    with pytest.raises(trust.ModelTrustError, match="another key"):
        trust.anchor(cfg, vec, "vectorizer")
    monkeypatch.setenv(checksums.MODEL_KEY_ENV, "short")
    with pytest.raises(runtime.ModelLoadError, match="shorter than"):
        trust.anchor(cfg, vec, "vectorizer")


def test_own_models_load_without_a_key_and_others_need_a_voucher(tmp_path, monkeypatch):
    monkeypatch.delenv(checksums.MODEL_KEY_ENV, raising=False)
    models_run = tmp_path / "models_run"
    vec = _published_vectorizer(models_run)
    assert not os.path.exists(os.path.join(vec, checksums.SIGNATURE))
    # the run's own models (the demo, a default run): no key, no record needed
    assert trust.anchor(_cfg(models_run), vec, "vectorizer") == trust.folder_digest(vec)
    # another run's models: nothing vouches for them
    other = _cfg(tmp_path / "daily", models=str(models_run))
    with pytest.raises(trust.ModelTrustError, match="nothing vouches for it.*run.trust_models"):
        trust.anchor(other, vec, "vectorizer")
    opted = _cfg(tmp_path / "daily", models=str(models_run), trust_models=True)
    assert trust.anchor(opted, vec, "vectorizer") == trust.folder_digest(vec)


def test_models_latest_checks_the_promotion_record(tmp_path, monkeypatch):
    """evaluate's promotion writes the vectorizer's digest under output; run.models: latest
    loads that run's vectorizer only while it has that digest."""
    monkeypatch.delenv(checksums.MODEL_KEY_ENV, raising=False)
    out = tmp_path / "out"
    run_root = storage.RunPaths(str(out), "2026-11-20").root
    vec = _published_vectorizer(run_root)
    metrics = {"variants": {"pina": {"P@1": 0.5}}}
    assert promotion.consider(_cfg(out, run_date="2026-11-20"), run_root, metrics)["promoted"]
    record = promotion.read_promoted(str(out))
    assert record[trust.DIGESTS] == {"vectorizer": trust.folder_digest(vec)}
    daily = promotion.resolve_models(_cfg(out, run_date="2026-11-21", models="latest"))
    assert trust.anchor(daily, vec, "vectorizer") == trust.folder_digest(vec)
    # the promoted run named explicitly: the same record vouches for it
    named = _cfg(out, run_date="2026-11-21", models=run_root)
    assert trust.anchor(named, vec, "vectorizer") == trust.folder_digest(vec)
    _tamper(vec)
    with pytest.raises(trust.ModelTrustError, match="promotion record .*_PROMOTED"):
        trust.anchor(daily, vec, "vectorizer")
    # run.trust_models does not override a record that pins other content
    opted = _cfg(out, run_date="2026-11-21", models=run_root, trust_models=True)
    with pytest.raises(trust.ModelTrustError, match="rewritten after it was promoted"):
        trust.anchor(opted, vec, "vectorizer")
    # a record written before digests existed vouches for nothing
    storage.write_bytes(
        promotion.pointer_uri(str(out)), json.dumps({"run": run_root, "value": 0.5}).encode()
    )
    with pytest.raises(trust.ModelTrustError, match="holds no digest.*vouches for nothing"):
        trust.anchor(daily, vec, "vectorizer")


def test_a_daily_output_follows_the_retraining_outputs_promotion(tmp_path, monkeypatch):
    """The shipped DAGs' layout: retraining runs promote under ``prod``; daily runs write under
    ``prod-daily`` with ``run.promoted_from: prod``. ``latest`` resolves to prod's promoted run,
    whose record vouches for its models, and the daily run's own root is not the retraining
    run's, on the same date too. Without ``run.promoted_from`` the daily output has no record."""
    monkeypatch.delenv(checksums.MODEL_KEY_ENV, raising=False)
    prod, daily_out = tmp_path / "prod", tmp_path / "prod-daily"
    run_root = storage.RunPaths(str(prod), "2026-12-01").root
    vec = _published_vectorizer(run_root)
    metrics = {"variants": {"pina": {"P@1": 0.5}}}
    assert promotion.consider(_cfg(prod, run_date="2026-12-01"), run_root, metrics)["promoted"]
    with pytest.raises(ConfigError, match="no promoted run at .*prod-daily.*run.promoted_from"):
        promotion.resolve_models(_cfg(daily_out, run_date="2026-12-01", models="latest"))
    daily = promotion.resolve_models(
        _cfg(daily_out, run_date="2026-12-01", models="latest", promoted_from=str(prod)),
        ("embed", "neighbors", "aggregate"),
    )
    assert daily.run.models == storage.norm(run_root)
    assert trust.promotion_output(daily) == str(prod)
    assert trust.anchor(daily, vec, "vectorizer") == trust.folder_digest(vec)
    _tamper(vec)
    with pytest.raises(trust.ModelTrustError, match=f"promotion record {prod}/_PROMOTED"):
        trust.anchor(daily, vec, "vectorizer")
    # the record of the daily's own output vouches for nothing it does not name
    unrelated = _cfg(daily_out, models=run_root)
    with pytest.raises(trust.ModelTrustError, match="nothing vouches for it"):
        trust.anchor(unrelated, vec, "vectorizer")
    with pytest.raises(ConfigError, match="run.promoted_from: expected the output"):
        _cfg(daily_out, promoted_from="latest")


def test_embed_stage_refuses_before_reading_anything(tmp_path, monkeypatch):
    """The embed stage asks trust.anchor on the driver before any task loads the vectorizer."""
    from pina_spark.stages import StageContext
    from pina_spark.stages.embed import stage as embed_stage

    monkeypatch.delenv(checksums.MODEL_KEY_ENV, raising=False)
    vec = _published_vectorizer(tmp_path / "models_run")
    cfg = _cfg(tmp_path / "daily", models=str(tmp_path / "models_run"))
    monkeypatch.setattr(artifacts, "require_vectorizer", lambda spark, models_root: vec)

    def no_read(*a, **k):
        raise AssertionError("embed read its input before checking the vectorizer")

    monkeypatch.setattr(storage, "read_table", no_read)
    paths = storage.RunPaths(cfg.output)
    ctx = StageContext(None, cfg, paths, None, str(tmp_path / "models_run" / "models"))
    with pytest.raises(trust.ModelTrustError, match=vec):
        embed_stage.run(ctx)


def test_executor_copy_must_have_the_digest_the_driver_vouched_for(tmp_path):
    """A folder changed (checksums rewritten to match) after the driver's check is refused by
    the executor's copy check."""
    vec = _published_vectorizer(tmp_path / "run")
    digest = trust.folder_digest(vec)
    assert runtime.local_model_dir(vec, "v1", digest) == vec
    _tamper(vec)
    with pytest.raises(runtime.ModelLoadError, match="not the ones the driver checked"):
        runtime.local_model_dir(vec, "v2", digest)
    assert runtime.local_model_dir(vec, "v2") == vec  # without a digest: its own checksums


def test_signature_is_never_listed_and_only_at_the_top(tmp_path, monkeypatch):
    monkeypatch.setenv(checksums.MODEL_KEY_ENV, KEY)
    d = tmp_path / "m"
    (d / "sub").mkdir(parents=True)
    (d / "w.bin").write_bytes(b"w")
    (d / "sub" / "x.bin").write_bytes(b"x")
    runtime.write_checksums(str(d))
    assert checksums.SIGNATURE not in json.load(open(d / checksums.CHECKSUMS))
    assert runtime.verify_checksums(str(d), "m")
    (d / "sub" / checksums.SIGNATURE).write_text("planted")
    with pytest.raises(runtime.ModelLoadError, match="not in _CHECKSUMS.json"):
        runtime.verify_checksums(str(d), "m")
    # without the key, publishing again drops the stale signature
    monkeypatch.delenv(checksums.MODEL_KEY_ENV)
    (d / "sub" / checksums.SIGNATURE).unlink()
    runtime.write_checksums(str(d))
    assert not (d / checksums.SIGNATURE).exists()


@pytest.mark.slow
def test_embed_tasks_check_the_digest_in_their_plan(spark, tmp_path):
    """The digest reaches the executors inside the frozen embed task: a copy without it fails
    the task naming the folder (Spark, local[2])."""
    from pina_spark.config import InferenceConfig
    from pina_spark.stages.embed.stage import embed_frame

    vec = _published_vectorizer(tmp_path / "run")
    nodes = spark.createDataFrame([(0, "a b"), (1, "c")], "node_index long, text string")

    def fake_load(local, device):
        raise AssertionError("loaded a folder the driver did not vouch for")

    with pytest.raises(Exception, match="not the ones the driver checked") as ei:
        embed_frame(nodes, vec, InferenceConfig(), 2, load_fn=fake_load, digest="0" * 64).collect()
    assert vec in str(ei.value)


@pytest.mark.slow
def test_embed_fails_on_a_nan_embedding_naming_the_rows(spark, tmp_path):
    """A vectorizer that returns NaN for one text fails the embed job naming that row's
    node_index: a NaN row would turn V of every instance that takes it as a neighbour into
    NaN, and nothing downstream removes it (Spark, local[2])."""
    import numpy as np
    import scipy.sparse as sp

    from pina_spark.config import InferenceConfig
    from pina_spark.stages.embed.stage import embed_frame

    vec = _published_vectorizer(tmp_path / "run")
    nodes = spark.createDataFrame(
        [(0, "fine"), (7, "overflows"), (3, "also fine")], "node_index long, text string"
    )

    class NanOnOne:
        def transform(self, texts, batch_size):
            dense = np.ones((len(texts), 2), dtype=np.float32)
            dense[[t == "overflows" for t in texts]] = np.nan
            return dense, sp.csr_matrix(np.ones((len(texts), 3), dtype=np.float32))

    ok = embed_frame(
        nodes.where("node_index != 7"),
        vec,
        InferenceConfig(),
        2,
        load_fn=lambda local, device: NanOnOne(),
    ).collect()
    assert sorted(r.node_index for r in ok) == [0, 3]
    with pytest.raises(Exception, match=r"NaN or infinite values for 1 of \d+ texts") as ei:
        embed_frame(
            nodes, vec, InferenceConfig(), 3, load_fn=lambda local, device: NanOnOne()
        ).collect()
    assert "node_index [7]" in str(ei.value)


def test_a_record_from_before_digests_names_the_upgrade_and_promote_records_them(
    tmp_path, monkeypatch, capsys
):
    """A ``_PROMOTED`` written before digests were recorded: ``--models latest`` is refused with
    a message naming ``pina-spark promote``; that command records the promoted run's digests
    (under its lease), after which the daily run's trust check passes. Deleting the digests
    again is no bypass, and a record whose digests no longer match is not re-vouched."""
    from pina_spark import cli

    monkeypatch.delenv(checksums.MODEL_KEY_ENV, raising=False)
    out = tmp_path / "out"
    run_root = storage.RunPaths(str(out), "2026-11-20").root
    vec = _published_vectorizer(run_root)
    old = {"run": run_root, "variant": "pina", "metric": "P@1", "value": 0.5}
    storage.write_bytes(promotion.pointer_uri(str(out)), json.dumps(old).encode())
    daily = promotion.resolve_models(_cfg(out, run_date="2026-11-21", models="latest"))
    with pytest.raises(trust.ModelTrustError, match="holds no digest.*`pina-spark promote --conf"):
        trust.anchor(daily, vec, "vectorizer")

    conf = tmp_path / "conf.yaml"
    conf.write_text(f"output: {out}\n")
    assert cli.main(["promote", "--config", str(conf)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["changed"] and shown["run"] == run_root
    record = promotion.read_promoted(str(out))
    assert record[trust.DIGESTS] == {"vectorizer": trust.folder_digest(vec)}
    assert {k: record[k] for k in old} == old
    assert storage.read_lease(run_root) is None  # its lease was held, and released
    assert trust.anchor(daily, vec, "vectorizer") == trust.folder_digest(vec)
    assert cli.main(["promote", "--config", str(conf)]) == 0  # again: nothing changes
    assert not json.loads(capsys.readouterr().out)["changed"]

    _tamper(vec)  # changed after the digests were recorded: refused, and promote won't vouch
    with pytest.raises(trust.ModelTrustError, match="rewritten after it was promoted"):
        trust.anchor(daily, vec, "vectorizer")
    assert cli.main(["promote", "--config", str(conf)]) == 2
    assert "changed after the promotion" in capsys.readouterr().err
    storage.write_bytes(promotion.pointer_uri(str(out)), json.dumps(old).encode())
    with pytest.raises(trust.ModelTrustError, match="holds no digest"):  # deleted: no bypass
        trust.anchor(daily, vec, "vectorizer")


def test_promotion_record_is_not_written_on_a_lost_lease(tmp_path, monkeypatch):
    """The promotion record is a trust anchor: evaluate's promotion checks the run root's lease
    before writing it, as publish and the stage commit do."""
    monkeypatch.delenv(checksums.MODEL_KEY_ENV, raising=False)
    out = tmp_path / "out"
    run_root = storage.RunPaths(str(out), "2026-11-20").root
    _published_vectorizer(run_root)
    metrics = {"variants": {"pina": {"P@1": 0.5}}}
    with storage.acquire_lease(run_root, "me", stale_s=600, heartbeat_s=300):
        taker = {"run_id": "taker", "nonce": "n", "heartbeat": 9e12}
        storage.write_bytes(os.path.join(run_root, storage.LOCK), json.dumps(taker).encode())
        with pytest.raises(storage.LeaseError, match="lost its lease"):
            promotion.consider(_cfg(out, run_date="2026-11-20"), run_root, metrics)
    assert promotion.read_promoted(str(out)) is None


def _published_g(root, folds=2):
    """``<root>/models`` with fold models of ``pina`` (files stand in for PECOS' own), published
    the way artifacts.publish writes it (checksums in every folder)."""
    models = storage.RunPaths(str(root)).table(storage.MODELS)
    for f in range(folds):
        d = artifacts.g_dir(models, "pina", f)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "param.json"), "w") as fh:
            json.dump({"fold": f}, fh)
        with open(os.path.join(d, artifacts.OUTPUT_NODES), "wb") as fh:
            fh.write(b"nodes %d" % f)
    with open(os.path.join(models, artifacts.FOLDS_JSON), "w") as fh:
        json.dump({"folds": folds}, fh)
    runtime.write_checksums(models)
    return models


def test_the_promotion_pins_g_too_and_a_refit_after_it_is_refused(tmp_path, monkeypatch, capsys):
    """A user's trial: promoting a run, then refitting its g in place (``--stages pretrain``),
    let daily runs predict with the refit g, which no evaluation had passed: the promotion record
    held the vectorizer's digest only. It now holds g's ``models`` digest too; the neighbours
    stage anchors g (and hands each fold model's digest to the executors); a record from before
    is upgraded by ``pina-spark promote`` only while what it pins is unchanged."""
    from pina_spark import cli

    monkeypatch.delenv(checksums.MODEL_KEY_ENV, raising=False)
    out = tmp_path / "out"
    run_root = storage.RunPaths(str(out), "2026-11-20").root
    vec, models = _published_vectorizer(run_root), _published_g(run_root)
    metrics = {"variants": {"pina": {"P@1": 0.5}}}
    assert promotion.consider(_cfg(out, run_date="2026-11-20"), run_root, metrics)["promoted"]
    record = promotion.read_promoted(str(out))
    assert record[trust.DIGESTS] == {
        "vectorizer": trust.folder_digest(vec),
        "models": trust.folder_digest(models),
    }
    daily = promotion.resolve_models(_cfg(out, run_date="2026-11-21", models="latest"))
    parts = ["g/pina/fold=0", "g/pina/fold=1"]
    got = trust.anchor_parts(daily, models, "models", parts)
    for p in parts:  # what each executor compares its copy with
        assert got[p] == checksums.local_digest(os.path.join(models, p)) and got[p]

    fold0 = artifacts.g_dir(models, "pina", 0)
    with open(os.path.join(fold0, "param.json"), "w") as fh:  # the refit: g changes in place
        json.dump({"fold": 0, "refit": True}, fh)
    runtime.write_checksums(models)
    with pytest.raises(trust.ModelTrustError, match="rewritten after it was promoted"):
        trust.anchor_parts(daily, models, "models", parts)
    assert trust.anchor(daily, vec, "vectorizer")  # the vectorizer is as promoted

    # a record from before g's digest: `promote` adds it while the vectorizer's still holds
    conf = tmp_path / "conf.yaml"
    conf.write_text(f"output: {out}\n")
    old = {"run": run_root, "value": 0.5, trust.DIGESTS: {"vectorizer": trust.folder_digest(vec)}}
    storage.write_bytes(promotion.pointer_uri(str(out)), json.dumps(old).encode())
    with pytest.raises(trust.ModelTrustError, match="holds no digest of its models folder"):
        trust.anchor_parts(daily, models, "models", parts)
    assert cli.main(["promote", "--config", str(conf)]) == 0
    assert promotion.read_promoted(str(out))[trust.DIGESTS]["models"] == trust.folder_digest(models)
    assert trust.anchor_parts(daily, models, "models", parts)["g/pina/fold=0"]
    # what the driver reads itself, and parts the folder's digest does not cover
    read_here = [artifacts.FOLDS_JSON, f"g/pina/fold=0/{artifacts.OUTPUT_NODES}"]
    assert trust.anchor_parts(daily, models, "models", parts, read_here)
    with open(os.path.join(models, artifacts.FOLDS_JSON), "w") as fh:  # checksums left as is
        json.dump({"folds": 3}, fh)
    with pytest.raises(trust.ModelTrustError, match="folds.json is not the file .*other content"):
        trust.anchor_parts(daily, models, "models", parts, read_here)
    added = artifacts.g_dir(models, "pina", 2)
    os.makedirs(added)
    open(os.path.join(added, "param.json"), "w").write("{}")
    with pytest.raises(trust.ModelTrustError, match="fold=2 has no _CHECKSUMS.json of its own"):
        trust.anchor_parts(daily, models, "models", parts + ["g/pina/fold=2"])

    # g refit after the promotion (the manifest says so): promote does not vouch for it
    from pina_spark.storage.manifest import Manifest

    Manifest(storage.RunPaths(run_root).manifest).record_stage("pretrain", {}, "fp", 1.0)
    late = {**old, "promoted_at": "2026-01-01T00:00:00Z"}
    storage.write_bytes(promotion.pointer_uri(str(out)), json.dumps(late).encode())
    assert cli.main(["promote", "--config", str(conf)]) == 2
    assert "pretrain stage finished after the run was promoted" in capsys.readouterr().err

    _tamper(vec)  # a record whose vectorizer digest no longer holds is not upgraded
    storage.write_bytes(promotion.pointer_uri(str(out)), json.dumps(old).encode())
    assert cli.main(["promote", "--config", str(conf)]) == 2
