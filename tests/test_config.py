"""Strict configuration: every error names the key and the source file; --set overrides;
skeleton round trip."""

import os

import pytest
import yaml

from pina_spark.config import (
    ConfigError,
    PinaConfig,
    config_from_dict,
    dump_config,
    load_config,
    parse_stages,
    skeleton,
)


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def err(path, overrides=None):
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    return str(e.value)


def test_minimal_config_and_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "output: /tmp/run\n"))
    assert cfg.output == "/tmp/run"
    assert cfg.neighbors.k == 5 and cfg.side_info == "label_text"
    assert cfg.spark.master == "local[2]" and cfg.run.run_date is None


def test_unknown_key_names_key_and_file(tmp_path):
    p = write(tmp_path, "output: /x\nneighbours: {k: 3}\n")
    msg = err(p)
    assert p in msg and "'neighbours'" in msg and "known:" in msg
    p = write(tmp_path, "output: /x\nneighbors: {kk: 3}\n", "nested.yaml")
    msg = err(p)
    assert p in msg and "'neighbors.kk'" in msg
    p = write(tmp_path, "output: /x\npretrain: {xlinear: {nr_split: 3}}\n", "deep.yaml")
    assert "'pretrain.xlinear.nr_split'" in err(p)


def test_a_quality_gate_key_naming_no_reason_or_table_is_an_error(tmp_path):
    """``quality.max_reason_fraction`` is a free mapping in YAML: a misspelt reason or table
    used to be kept and never match, which silently turned the intended gate off."""
    p = write(tmp_path, "output: /x\nquality: {max_reason_fraction: {evnts.unknown_item: 0.1}}\n")
    msg = err(p)
    assert p in msg and "'evnts.unknown_item'" in msg and "did you mean 'events'" in msg
    p = write(
        tmp_path, "output: /x\nquality: {max_reason_fraction: {unknwn_item: 0.1}}\n", "r.yaml"
    )
    assert "did you mean 'unknown_item'" in err(p)
    for key, what in ((".unknown_item", "unknown key"), ("events", "'events' is a table")):
        body = f"output: /x\nquality: {{max_reason_fraction: {{{key}: 0.1}}}}\n"
        assert what in err(write(tmp_path, body, "t.yaml")), key
    ok = write(tmp_path, "output: /x\n", "ok.yaml")
    cfg = load_config(ok, ["quality.max_reason_fraction={events.unknown_item: 0.1}"])
    assert cfg.quality.limit("events", "unknown_item") == 0.1
    assert cfg.quality.limit("events", "duplicate_event") is None
    assert cfg.quality.limit("instances", "unbalanced_quote") == 0.0  # the built-in limit
    cfg = load_config(ok, ["quality.max_reason_fraction={unbalanced_quote: 1}"])
    assert cfg.quality.limit("labels", "unbalanced_quote") == 1.0


@pytest.mark.parametrize(
    "body,key,what",
    [
        ("neighbors: {k: three}", "neighbors.k", "expected an integer"),
        ("neighbors: {k: 2.5}", "neighbors.k", "expected an integer"),
        ("neighbors: {leave_self_out: 'yes'}", "neighbors.leave_self_out", "expected true/false"),
        ("aggregate: {v1_weight: high}", "aggregate.v1_weight", "expected a number"),
        ("train: {variants: pina}", "train.variants", "expected a list"),
        ("spark: {conf: [a, b]}", "spark.conf", "expected a mapping"),
        ("graph: 3", "graph", "expected a section"),
        ("spark: {app_name: 5}", "spark.app_name", "expected a string"),
    ],
)
def test_wrong_type_names_key_and_file(tmp_path, body, key, what):
    p = write(tmp_path, "output: /x\n" + body + "\n")
    msg = err(p)
    assert p in msg and key in msg and what in msg


def test_missing_output(tmp_path):
    p = write(tmp_path, "neighbors: {k: 3}\n")
    msg = err(p)
    assert p in msg and "missing required key 'output'" in msg
    # empty file too
    assert "'output'" in err(write(tmp_path, "", "empty.yaml"))


@pytest.mark.parametrize(
    "body,key,value",
    [
        ("side_info: graphy", "side_info", "graphy"),
        ("task: {labels: maybe}", "task.labels", "maybe"),
        ("graph: {measure: cosine}", "graph.measure", "cosine"),
        ("neighbors: {train_mode: oof}", "neighbors.train_mode", "oof"),
        ("aggregate: {strategy: magic}", "aggregate.strategy", "magic"),
        ("inference: {device: tpu}", "inference.device", "tpu"),
    ],
)
def test_bad_enum_lists_allowed_values(tmp_path, body, key, value):
    p = write(tmp_path, "output: /x\n" + body + "\n")
    msg = err(p)
    assert p in msg and key in msg and repr(value) in msg and "is not one of" in msg


def test_an_unquoted_off_is_the_word_off_where_a_setting_takes_words(tmp_path):
    """YAML 1.1 reads on/off/yes/no unquoted as booleans; a word setting takes them as words,
    in a file and through --set alike; a boolean it cannot map is still an error."""
    p = write(tmp_path, "output: /x\nselect: {follow: off}\n")
    assert load_config(p).select.follow == "off"
    assert load_config(write(tmp_path, "output: /x\n"), ["select.follow=off"]).select.follow == (
        "off"
    )
    msg = err(write(tmp_path, "output: /x\nselect: {follow: yes}\n"))
    assert "select.follow" in msg and "True is not one of" in msg


def test_out_of_range_and_combinations(tmp_path):
    msg = err(write(tmp_path, "output: /x\nneighbors: {k: 0}\n"))
    assert "neighbors.k" in msg and "out of range" in msg and "c.yaml" in msg
    msg = err(write(tmp_path, "output: /x\nside_info: i2i\n", "combo.yaml"))
    assert "combo.yaml" in msg and "input.events" in msg
    msg = err(write(tmp_path, "output: /x\nrun: {incremental: true}\n", "inc.yaml"))
    assert "run.models" in msg
    msg = err(write(tmp_path, "output: /x\ntrain: {variants: [pina, pinax]}\n", "v.yaml"))
    assert "train.variants" in msg and "pinax" in msg


def test_file_problems(tmp_path):
    assert "not found" in err(str(tmp_path / "nope.yaml"))
    assert "not valid YAML" in err(write(tmp_path, "output: [unclosed\n"))
    assert "top level must be a mapping" in err(write(tmp_path, "- a\n- b\n", "list.yaml"))


def test_overrides_nested_and_typed(tmp_path):
    p = write(tmp_path, "output: /x\nneighbors: {k: 3}\n")
    cfg = load_config(
        p,
        [
            "neighbors.k=7",
            "pretrain.xlinear.Cp=2",
            "graph.top_n=10",
            "evaluate.ks=[1,2]",
            "side_info=naive",
            "input.instances=s3://b/i",
            "output=/y",
            "graph.min_score=null",
        ],
    )
    assert cfg.neighbors.k == 7 and cfg.pretrain.xlinear.Cp == 2.0
    assert cfg.graph.top_n == 10 and cfg.evaluate.ks == [1, 2] and cfg.side_info == "naive"
    assert cfg.input.instances == "s3://b/i" and cfg.output == "/y"
    # the file's other keys survive an override of a sibling
    assert load_config(p, ["neighbors.folds=4"]).neighbors.k == 3


def test_override_errors_name_the_key(tmp_path):
    p = write(tmp_path, "output: /x\n")
    msg = err(p, ["neighbors.k=abc"])
    # the value is --set's, not the file's (as an unknown --set key is)
    assert msg.startswith("--set 'neighbors.k=abc': neighbors.k: expected an integer"), msg
    bad = write(tmp_path, "output: /x\nneighbors: {k: abc}\n", "bad.yaml")
    assert err(bad, ["train.variants=[pina]"]).startswith(bad)  # the file's own error
    assert "'neighbors.kk'" in err(p, ["neighbors.kk=1"])
    assert "expected key.sub=value" in err(p, ["neighbors.k"])
    assert "is not a section" in err(p, ["output.x=1"])
    assert "empty key" in err(p, ["=3"])


def test_spark_conf_overrides_stay_strings(tmp_path):
    p = write(tmp_path, "output: /x\nspark: {conf: {spark.sql.shuffle.partitions: 8}}\n")
    cfg = load_config(
        p,
        [
            "spark.conf.spark.executor.memory=4g",
            "spark.conf.spark.dynamicAllocation.enabled=true",
            "spark.conf.spark.executor.cores=4",
            "spark.master=yarn",
        ],
    )
    assert cfg.spark.conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.executor.memory": "4g",
        "spark.dynamicAllocation.enabled": "true",
        "spark.executor.cores": "4",
    }
    assert cfg.spark.master == "yarn"
    # YAML booleans/ints in a file become Spark-style strings
    p2 = write(tmp_path, "output: /x\nspark: {master: null, conf: {a.b: true, c.d: 2}}\n", "b.yaml")
    cfg = load_config(p2)
    assert cfg.spark.conf == {"a.b": "true", "c.d": "2"} and cfg.spark.master is None


def test_run_date(tmp_path):
    p = write(tmp_path, "output: /x\nrun: {run_date: 2026-11-21}\n")  # unquoted YAML date
    assert load_config(p).run.run_date == "2026-11-21"
    assert load_config(p, ["run.run_date=2026-11-22"]).run.run_date == "2026-11-22"
    msg = err(p, ["run.run_date=2026-13-01"])
    assert "run.run_date" in msg and "YYYY-MM-DD" in msg
    assert "run.run_date" in err(p, ["run.run_date=yesterday"])
    # fromisoformat accepts these on Python >= 3.11; a run-date folder must be one spelling
    for odd in ("2026-W47-6", "2026-11-21T00:00", "2026-325", "2026-1-5"):
        assert "YYYY-MM-DD" in err(p, [f"run.run_date={odd}"]), odd


def test_output_equal_to_or_inside_an_input_is_refused(tmp_path):
    for out in ("/data/events", "/data/events/", "/data/events/run"):
        with pytest.raises(ConfigError, match="input.events"):
            config_from_dict(
                {"output": out, "input": {"instances": "/data/i.csv", "events": "/data/events"}}
            )
    config_from_dict({"output": "/data/events-out", "input": {"events": "/data/events"}})


def test_skeleton_round_trip(tmp_path):
    sk = skeleton()
    assert sk["output"] == "<required>" and "neighbors" in sk and "k" in sk["neighbors"]
    cfg = config_from_dict({**sk, "output": "/runs/x"})
    assert cfg == PinaConfig.from_dict({"output": "/runs/x"})
    # dump -> load gives an equal config, for defaults and for a non-trivial one
    full = load_config(
        write(tmp_path, "output: /x\n"),
        [
            "neighbors.k=9",
            "spark.conf.spark.executor.memory=2g",
            "train.variants=[pina,baseline]",
            "run.run_date=2026-01-02",
            "graph.top_n=4",
            "pretrain.tfidf.min_df_cnt=3",
        ],
    )
    for c in (cfg, full):
        p = write(tmp_path, dump_config(c), "dump.yaml")
        assert load_config(p) == c
        assert yaml.safe_load(open(p)) == c.to_dict()


def test_fingerprint_sections():
    a = config_from_dict({"output": "/x"})
    b = config_from_dict({"output": "/x", "neighbors": {"k": 6}})
    assert a.fingerprint("graph") == b.fingerprint("graph")
    assert a.fingerprint("neighbors") != b.fingerprint("neighbors")


def test_parse_stages():
    assert parse_stages("aggregate,embed") == ("embed", "aggregate")
    assert parse_stages(None)[0] == "graph"
    with pytest.raises(ConfigError, match="embedd"):
        parse_stages("embedd")


def test_shipped_configs_load():
    root = os.path.join(os.path.dirname(__file__), "..", "conf")
    for name in ("demo.yaml", "local.yaml", "emr.yaml", "emr-gpu.yaml"):
        path = os.path.join(root, name)
        if not os.path.exists(path):
            pytest.fail(f"conf/{name} is missing")
        base = {"output": "/tmp/x"} if name == "demo.yaml" else None
        cfg = load_config(path, base=base)
        assert cfg.output
    emr = load_config(os.path.join(root, "emr.yaml"))
    assert emr.spark.master is None and emr.output.startswith("s3://")
    gpu = load_config(os.path.join(root, "emr-gpu.yaml"))
    # GPU requests are per step (conf/emr/steps-gpu.json): a key here would fill the CPU steps
    assert not [k for k in gpu.spark.conf if "resource.gpu" in k]
    assert gpu.inference.device == "auto"


def test_a_removed_key_says_why_and_what_replaces_it():
    """``pretrain.encode_batch_size`` went with the driver-side encoding: an old config gets an
    error naming the key and the setting that replaced it, not a bare "unknown key"."""
    with pytest.raises(ConfigError, match=r"'pretrain.encode_batch_size' was removed.*inference"):
        config_from_dict({"output": "/tmp/r", "pretrain": {"encode_batch_size": 64}})


def _fingerprint_without(cfg, *paths: str) -> str:
    """What ``cfg.fingerprint()`` was before the keys ``paths`` (``section.key``) existed."""
    import hashlib
    import json

    d = cfg.to_dict()
    for path in paths:
        section, key = path.split(".")
        del d[section][key]
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _changed_stages(a, b) -> set[str]:
    """The stages whose fingerprints differ between configs ``a`` and ``b``."""
    from pina_spark.stages import STAGES

    def fp(c, name):
        return c.fingerprint(*STAGES[name].fingerprint_sections(c))

    return {name for name in STAGES if fp(a, name) != fp(b, name)}


def test_fold_seed_at_zero_leaves_every_fingerprint_as_before():
    """``neighbors.fold_seed`` came after roots were made: at 0 (the split they used) it is left
    out of every fingerprint, so they keep their stages; another value changes exactly the
    stages that depend on g's split (g, its neighbours, the out-of-fold label features)."""
    import dataclasses as dc

    from pina_spark.config import config_from_dict

    cfg = config_from_dict({"output": "/r", "pretrain": {"naive_max_leaf_size": 50}})
    assert cfg.fingerprint() == _fingerprint_without(cfg, "neighbors.fold_seed")
    seeded = cfg.replace(neighbors=dc.replace(cfg.neighbors, fold_seed=1))
    assert _changed_stages(cfg, seeded) == {"pretrain", "neighbors", "aggregate"}
    with pytest.raises(Exception, match="neighbors.fold_seed"):
        config_from_dict({"output": "/r", "neighbors": {"fold_seed": -1}})


def test_naive_max_leaf_size_left_out_of_fingerprints_at_none():
    """``pretrain.naive_max_leaf_size`` came after roots were made: at ``None`` (pina_naive's g on
    ``xlinear.max_leaf_size``, as every g before it) it is left out of every fingerprint; a value
    changes the pretrain stage's alone (the later stages rerun on its new models' version), and
    only ``pina_naive``'s g settings."""
    import dataclasses as dc

    from pina_spark.config import config_from_dict

    unset = config_from_dict({"output": "/r", "pretrain": {"naive_max_leaf_size": None}})
    assert unset.fingerprint() == _fingerprint_without(
        unset, "neighbors.fold_seed", "pretrain.naive_max_leaf_size"
    )
    leaf = unset.replace(pretrain=dc.replace(unset.pretrain, naive_max_leaf_size=25))
    assert _changed_stages(unset, leaf) == {"pretrain"}
    assert leaf.pretrain.xlinear_of("pina_naive").max_leaf_size == 25
    assert leaf.pretrain.xlinear_of("pina") == unset.pretrain.xlinear_of("pina")
    assert unset.pretrain.xlinear_of("pina_naive") == unset.pretrain.xlinear
    with pytest.raises(Exception, match="pretrain.naive_max_leaf_size"):
        config_from_dict({"output": "/r", "pretrain": {"naive_max_leaf_size": 1}})
