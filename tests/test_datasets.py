"""pina_spark.datasets: the demo generator (determinism, contract, signal) and the converters of
the shared data sets (checked against the raw files, recomputed independently here)."""

import collections
import hashlib
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pina_spark import datasets, storage
from pina_spark.storage.folds import in_sample_fraction

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = ("instances", "labels", "instance_labels", "events")


def _sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _read(path):
    return pq.read_table(path).to_pandas()


def _co_bought_pairs(events):
    pairs = set()
    for _, items in events.groupby(storage.BASKET_ID)[storage.ITEM_ID]:
        pairs.update(itertools.combinations(sorted(set(items)), 2))
    return sorted(pairs)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("demo") / "input")
    return datasets.write_demo_data(out)


@pytest.fixture(scope="module")
def demo_frames(demo):
    return {k: _read(v) for k, v in demo.items()}


# --------------------------------------------------------------------------- demo
def test_demo_returns_absolute_paths_of_the_four_tables(demo):
    assert sorted(demo) == sorted(TABLES)
    for name, path in demo.items():
        assert os.path.isabs(path) and os.path.isfile(path)
        assert os.path.basename(path) == f"{name}.parquet"


def _paths_from_fresh_interpreter(code: str, out: str):
    """Run ``code`` (which prints the written paths as JSON) with ``out`` as its argument in a
    fresh interpreter with another hash seed; return the paths it printed."""
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=ROOT)
    res = subprocess.run(
        [sys.executable, "-c", code, out],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_demo_is_byte_identical_across_runs_and_processes(demo, tmp_path):
    # a second run in a fresh interpreter with another hash seed: no dependence on set order,
    # time or process state
    out2 = str(tmp_path / "again")
    code = (
        "import json, sys; from pina_spark.datasets import write_demo_data; "
        "print(json.dumps(write_demo_data(sys.argv[1])))"
    )
    again = _paths_from_fresh_interpreter(code, out2)
    for name in TABLES:
        assert _sha(demo[name]) == _sha(again[name]), name


CONTRACT = {
    "instances": [
        (storage.INSTANCE_ID, pa.string()),
        (storage.TEXT, pa.string()),
        (storage.SPLIT, pa.string()),
    ],
    "labels": [(storage.LABEL_ID, pa.string()), (storage.TEXT, pa.string())],
    "instance_labels": [(storage.INSTANCE_ID, pa.string()), (storage.LABEL_ID, pa.string())],
    "events": [
        (storage.BASKET_ID, pa.string()),
        (storage.ITEM_ID, pa.string()),
        (storage.EVENT_TIME, pa.string()),
    ],
}


def _assert_contract(paths):
    for name, cols in CONTRACT.items():
        schema = pq.read_schema(paths[name])
        assert [(f.name, f.type) for f in schema] == cols, name
        required, optional = storage.INPUT_COLUMNS[name]
        assert set(required) <= set(schema.names) <= set(required) | set(optional)
        assert pq.ParquetFile(paths[name]).metadata.num_rows > 0, name


def test_demo_schema_is_exactly_the_input_contract(demo):
    _assert_contract(demo)


def test_demo_tables_are_consistent_and_sized_for_a_quick_demo(demo_frames):
    inst, labels = demo_frames["instances"], demo_frames["labels"]
    il, ev = demo_frames["instance_labels"], demo_frames["events"]
    for df in demo_frames.values():
        assert not df.isna().any().any()
    assert inst[storage.INSTANCE_ID].is_unique and inst[storage.TEXT].is_unique
    assert labels[storage.LABEL_ID].is_unique and labels[storage.TEXT].is_unique
    assert 2000 <= len(inst) <= 3000
    assert 120 <= len(labels) <= 180
    assert (inst[storage.TEXT].str.split().str.len() >= 3).all()
    # every product has 1..5 labels, all pairs reference known ids, no duplicate pairs
    assert not il.duplicated().any()
    per_inst = il.groupby(storage.INSTANCE_ID).size()
    assert set(per_inst.index) == set(inst[storage.INSTANCE_ID])
    assert per_inst.min() >= 1 and per_inst.max() <= 5
    assert set(il[storage.LABEL_ID]) == set(labels[storage.LABEL_ID])  # every label is used
    # baskets: ~15k of 3..15 distinct known items
    assert set(ev[storage.ITEM_ID]) <= set(inst[storage.INSTANCE_ID])
    assert not ev.duplicated([storage.BASKET_ID, storage.ITEM_ID]).any()
    sizes = ev.groupby(storage.BASKET_ID).size()
    assert 12000 <= len(sizes) <= 18000
    assert sizes.min() >= 3 and sizes.max() <= 15
    assert pd.to_datetime(ev[storage.EVENT_TIME], format="%Y-%m-%dT%H:%M:%S").notna().all()


def test_demo_split_follows_the_id_hash(demo_frames):
    inst = demo_frames["instances"]
    assert set(inst[storage.SPLIT]) == {storage.SPLIT_TRAIN, storage.SPLIT_TEST}
    expect = [
        storage.SPLIT_TEST if in_sample_fraction(i, 0.2, "pina-demo-test") else storage.SPLIT_TRAIN
        for i in inst[storage.INSTANCE_ID]
    ]
    assert inst[storage.SPLIT].tolist() == expect
    frac = (inst[storage.SPLIT] == storage.SPLIT_TEST).mean()
    assert 0.15 < frac < 0.25


def test_demo_co_purchases_share_labels_far_more_than_random_pairs(demo_frames):
    inst, il, ev = (demo_frames[k] for k in ("instances", "instance_labels", "events"))
    labs = {k: set(v) for k, v in il.groupby(storage.INSTANCE_ID)[storage.LABEL_ID]}
    co = _co_bought_pairs(ev)
    share_co = np.mean([bool(labs[a] & labs[b]) for a, b in co])
    ids = inst[storage.INSTANCE_ID].to_numpy()
    rng = np.random.RandomState(0)
    rand = [(ids[x], ids[y]) for x, y in rng.randint(len(ids), size=(20000, 2)) if x != y]
    share_rand = np.mean([bool(labs[a] & labs[b]) for a, b in rand])
    assert share_co > 4 * share_rand, (share_co, share_rand)
    # hub items exist: the most bought item is in far more baskets than the median one
    counts = ev[storage.ITEM_ID].value_counts()
    assert counts.iloc[0] > 20 * counts.median()


def test_demo_has_labels_that_only_co_purchase_reveals(demo_frames):
    """Mission labels are given to a random subset of a category's items: among products with
    the SAME title noun (identical title signal), co-bought pairs agree on mission labels much
    more often than other pairs, so neighbours carry information the title does not."""
    products, labels, _ = datasets.demo_catalogue()
    mission_ids = {lab["label_id"] for lab in labels if lab["kind"] == "mission"}
    assert len(mission_ids) >= 15
    il = demo_frames["instance_labels"]
    missions = {
        k: set(v) & mission_ids for k, v in il.groupby(storage.INSTANCE_ID)[storage.LABEL_ID]
    }
    noun = {p["instance_id"]: p["noun"] for p in products}
    co = {
        (a, b)
        for a, b in _co_bought_pairs(demo_frames["events"])
        if noun[a] == noun[b] and (missions[a] or missions[b])
    }
    by_noun = collections.defaultdict(list)
    for iid, n in noun.items():
        by_noun[n].append(iid)
    same_noun = [
        (a, b)
        for ids in by_noun.values()
        for a, b in itertools.combinations(ids, 2)
        if (missions[a] or missions[b]) and (a, b) not in co
    ]

    def agree(pairs):
        return np.mean([bool(missions[a] & missions[b]) for a, b in pairs])

    assert len(co) > 200 and len(same_noun) > 1000
    assert agree(co) > 1.5 * agree(same_noun), (agree(co), agree(same_noun))
    # and title words alone do not decide them: some noun carries a mission label on some of
    # its products but not on others
    mixed = sum(1 for ids in by_noun.values() if 0 < sum(bool(missions[i]) for i in ids) < len(ids))
    assert mixed > 50


@pytest.mark.slow
def test_demo_tables_read_through_the_pipeline_reader(spark, demo):
    for name, path in demo.items():
        df = storage.read_input(spark, path, name)  # raises InputError on a wrong column or type
        want = [f for f in storage.schema(name).fields]
        assert [(f.name, f.dataType) for f in df.schema.fields if f.name != storage.CORRUPT] == [
            (f.name, f.dataType) for f in want
        ]


def test_prepare_data_demo_rewrites_the_same_files_in_place(demo):
    out = os.path.dirname(demo["instances"])
    before = {n: _sha(demo[n]) for n in TABLES}
    paths = datasets.prepare_data("demo", None, out)
    assert paths == demo
    assert {n: _sha(paths[n]) for n in TABLES} == before  # idempotent
    with open(os.path.join(out, datasets.STATS_FILE)) as fh:
        stats = json.load(fh)
    for name in TABLES:
        assert stats[name]["rows"] == pq.ParquetFile(demo[name]).metadata.num_rows


def test_prepare_data_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown source"):
        datasets.prepare_data("amazon", None, str(tmp_path))
    with pytest.raises(storage.InputError, match="--input"):
        datasets.prepare_data("citeulike-t", None, str(tmp_path))
    with pytest.raises(storage.InputError, match="lacks"):
        datasets.prepare_data("instacart", str(tmp_path), str(tmp_path / "out"))


def test_citeulike_text_rule():
    vocab = ["gene", "cell", "protein", "rna"]
    assert (
        datasets.citeulike_text(["3:1", "2:3", "0:1", "1:3"], vocab)
        == "cell cell cell protein protein protein gene rna"
    )
    assert datasets.citeulike_text([], vocab) == ""


# --------------------------------------------------------------------------- synthetic
SYN_N, SYN_SEED = 2000, 1


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    paths = datasets.prepare_data("synthetic", None, str(out), instances=SYN_N, seed=SYN_SEED)
    stats = json.loads((out / datasets.STATS_FILE).read_text())
    return paths, {k: _read(v) for k, v in paths.items()}, stats


def _synthetic_in_process(out, **kw):
    spec = datasets.SyntheticSpec(SYN_N, **{"seed": SYN_SEED, **kw})
    return datasets.write_synthetic_data(str(out), spec)[0]


def test_synthetic_schema_is_exactly_the_input_contract(synthetic):
    paths, _, _ = synthetic
    assert sorted(paths) == sorted(TABLES)
    _assert_contract(paths)


def test_synthetic_is_byte_identical_across_runs_and_processes(synthetic, tmp_path):
    # a fresh interpreter with another hash seed: no dependence on set order, time or process
    paths, _, _ = synthetic
    code = (
        "import json, sys; from pina_spark.datasets import prepare_data; "
        f"print(json.dumps(prepare_data('synthetic', None, sys.argv[1], {SYN_N}, {SYN_SEED})))"
    )
    again = _paths_from_fresh_interpreter(code, str(tmp_path / "again"))
    for name in TABLES:
        assert _sha(paths[name]) == _sha(again[name]), name
    with open(os.path.join(os.path.dirname(paths["events"]), datasets.STATS_FILE)) as a:
        with open(os.path.join(tmp_path / "again", datasets.STATS_FILE)) as b:
            assert a.read() == b.read()


def test_synthetic_another_seed_gives_other_data(synthetic, tmp_path):
    paths, _, _ = synthetic
    other = _synthetic_in_process(tmp_path, seed=SYN_SEED + 1)
    for name in ("instances", "instance_labels", "events"):
        assert _sha(paths[name]) != _sha(other[name]), name


def test_synthetic_output_does_not_depend_on_the_chunk_size(synthetic, tmp_path):
    """Memory is bounded by the chunk (one 1,024-row block here, against 50,000 by default),
    and the bytes do not change: randomness is per fixed block, row groups have a fixed size."""
    paths, _, _ = synthetic
    small = _synthetic_in_process(tmp_path, chunk_size=1)
    for name in TABLES:
        assert _sha(paths[name]) == _sha(small[name]), name


def test_synthetic_row_counts_and_references(synthetic):
    paths, frames, stats = synthetic
    inst, labels = frames["instances"], frames["labels"]
    il, ev = frames["instance_labels"], frames["events"]
    for df in frames.values():
        assert not df.isna().any().any()
    assert len(inst) == SYN_N and inst[storage.INSTANCE_ID].is_unique
    assert inst[storage.INSTANCE_ID].tolist() == [f"p{i:04d}" for i in range(SYN_N)]
    # events: the baskets stop at the one that reaches 50 x N, so 50 N <= events < 50 N + 20
    assert 50 * SYN_N <= len(ev) < 50 * SYN_N + 20
    # labels: N / 10 with unique texts (the vocabulary's ~150 plus ranked keyword labels)
    assert len(labels) == SYN_N // 10
    assert labels[storage.LABEL_ID].is_unique and labels[storage.TEXT].is_unique
    # 1-5 labels per product, every id known, no duplicate pair
    assert not il.duplicated().any()
    per_inst = il.groupby(storage.INSTANCE_ID).size()
    assert set(per_inst.index) == set(inst[storage.INSTANCE_ID])
    assert per_inst.min() >= 1 and per_inst.max() <= 5 and 2 <= per_inst.mean() <= 4
    assert set(il[storage.LABEL_ID]) <= set(labels[storage.LABEL_ID])
    assert il[storage.LABEL_ID].nunique() >= 0.95 * len(labels)  # labels are used
    # baskets of 3-20 distinct known items, timestamps in order
    assert set(ev[storage.ITEM_ID]) <= set(inst[storage.INSTANCE_ID])
    assert not ev.duplicated([storage.BASKET_ID, storage.ITEM_ID]).any()
    sizes = ev.groupby(storage.BASKET_ID).size()
    assert sizes.min() >= 3 and sizes.max() <= 20 and 8 <= sizes.mean() <= 12
    times = pd.to_datetime(ev[storage.EVENT_TIME], format="%Y-%m-%dT%H:%M:%S")
    assert times.is_monotonic_increasing and ev[storage.BASKET_ID].is_monotonic_increasing
    # titles of 2-8 words, nearly all distinct
    words = inst[storage.TEXT].str.replace(",", "").str.split().str.len()
    assert words.min() >= 2 and words.max() <= 8
    assert inst[storage.TEXT].nunique() >= 0.99 * SYN_N
    # the split rule of every converter, and the statistics file agrees
    expect = [
        storage.SPLIT_TEST if in_sample_fraction(i, 0.2, "pina-test") else storage.SPLIT_TRAIN
        for i in inst[storage.INSTANCE_ID]
    ]
    assert inst[storage.SPLIT].tolist() == expect
    assert stats["source"] == "synthetic" and stats["rules"]["seed"] == SYN_SEED
    for name in TABLES:
        assert stats[name]["rows"] == len(frames[name]), name
    assert stats["events"]["baskets"] == len(sizes)
    assert stats["instances"]["test"] == (inst[storage.SPLIT] == storage.SPLIT_TEST).sum()


def test_synthetic_popularity_is_long_tailed(synthetic):
    _, frames, stats = synthetic
    counts = np.sort(frames["events"][storage.ITEM_ID].value_counts().to_numpy())[::-1]
    top = counts[: SYN_N // 100].sum() / counts.sum()
    assert top > 0.08, top  # the top 1 % of items take > 8 x their uniform share of events
    assert counts[0] > 50 * np.median(counts)
    assert stats["events"]["top_1pct_items_event_share"] == pytest.approx(top, abs=1e-4)


def test_synthetic_co_purchases_are_complementary(synthetic):
    """Items bought together share a category (complement and mission baskets) far more often
    than chance, and distinct co-bought pairs share labels far more often than random pairs."""
    _, frames, _ = synthetic
    ev = frames["events"]
    cat = datasets.synthetic_catalogue(datasets.SyntheticSpec(SYN_N, seed=SYN_SEED)).category
    ev = ev.assign(cat=cat[ev[storage.ITEM_ID].str[1:].astype(int).to_numpy()])
    per_cat = ev.groupby([storage.BASKET_ID, "cat"]).size()
    size = ev.groupby(storage.BASKET_ID).size()
    same = (per_cat * (per_cat - 1) / 2).sum() / (size * (size - 1) / 2).sum()
    chance = float(((np.bincount(cat) / len(cat)) ** 2).sum())
    assert same > 8 * chance, (same, chance)
    il = frames["instance_labels"]
    labs = {k: set(v) for k, v in il.groupby(storage.INSTANCE_ID)[storage.LABEL_ID]}
    rng = np.random.RandomState(0)
    ids = sorted(labs)
    rand = [(ids[x], ids[y]) for x, y in rng.randint(len(ids), size=(20000, 2)) if x != y]
    co = _co_bought_pairs(ev)
    share_co = np.mean([bool(labs[a] & labs[b]) for a, b in co])
    share_rand = np.mean([bool(labs[a] & labs[b]) for a, b in rand])
    assert share_co > 4 * share_rand, (share_co, share_rand)


def test_prepare_data_synthetic_usage_errors(tmp_path, capsys):
    from pina_spark.cli import commands as cli

    with pytest.raises(storage.InputError, match="--instances N is required"):
        datasets.prepare_data("synthetic", None, str(tmp_path))
    with pytest.raises(storage.InputError, match="synthetic only"):
        datasets.prepare_data("demo", None, str(tmp_path), seed=3)
    with pytest.raises(storage.InputError, match="instances must be an integer >= 100"):
        datasets.prepare_data("synthetic", None, str(tmp_path), instances=5)
    for argv, msg in (
        (["--source", "synthetic"], "--source synthetic needs --instances N"),
        (["--source", "demo", "--instances", "10"], "--instances is for --source synthetic"),
        (["--source", "instacart", "--seed", "1"], "--seed is for --source synthetic"),
    ):
        with pytest.raises(SystemExit) as e:
            cli.main(["prepare-data", *argv, "--output", str(tmp_path)])
        assert e.value.code == 2
        assert msg in capsys.readouterr().err
    assert not os.listdir(tmp_path)  # nothing was written


# --------------------------------------------------------------------------- citeulike-t
def _counted_lines(path):
    with open(path) as fh:
        return [ln.split() for ln in fh.read().split("\n")]


@pytest.fixture(scope="module")
def citeulike(citeulike_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("citeulike-t")
    paths = datasets.prepare_data("citeulike-t", citeulike_dir, str(out))
    frames = {k: _read(v) for k, v in paths.items()}
    stats = json.loads((out / datasets.STATS_FILE).read_text())
    return paths, frames, stats


def test_citeulike_instances_match_mult_dat(citeulike, citeulike_dir):
    paths, frames, stats = citeulike
    assert sorted(paths) == sorted(TABLES)
    inst = frames["instances"]
    mult = _counted_lines(os.path.join(citeulike_dir, "mult.dat"))
    assert len(inst) == len(mult) == 25975
    assert inst[storage.INSTANCE_ID].tolist() == [str(i) for i in range(len(mult))]
    with open(os.path.join(citeulike_dir, "vocabulary.dat")) as fh:
        vocab = fh.read().split("\n")
    assert len(vocab) == 20000
    texts = inst.set_index(storage.INSTANCE_ID)[storage.TEXT]
    rng = np.random.RandomState(7)
    for a in list(rng.choice(len(mult), 25, replace=False)) + [0, len(mult) - 1]:
        bag = collections.Counter(
            {vocab[int(e.split(":")[0])]: int(e.split(":")[1]) for e in mult[a][1:]}
        )
        words = texts[str(a)].split()
        assert collections.Counter(words) == bag, a
        # salient (most frequent) words first
        firsts = list(dict.fromkeys(words))
        assert [bag[w] for w in firsts] == sorted((bag[w] for w in firsts), reverse=True)
    n_empty = sum(1 for ln in mult if ln[0] == "0")
    assert (texts == "").sum() == n_empty == stats["instances"]["empty_text"]
    expect = [
        storage.SPLIT_TEST if in_sample_fraction(i, 0.2, "pina-test") else storage.SPLIT_TRAIN
        for i in inst[storage.INSTANCE_ID]
    ]
    assert inst[storage.SPLIT].tolist() == expect
    assert 0.18 < (inst[storage.SPLIT] == storage.SPLIT_TEST).mean() < 0.22


def test_citeulike_tags_with_five_articles(citeulike, citeulike_dir):
    _, frames, stats = citeulike
    with open(os.path.join(citeulike_dir, "tags.dat")) as fh:
        tags = fh.read().split("\n")
    tag_items = _counted_lines(os.path.join(citeulike_dir, "tag-item.dat"))
    assert len(tags) == len(tag_items) == 52946
    # independent count: distinct articles per tag via pandas
    rows = [(t, int(a)) for t, ln in enumerate(tag_items) for a in ln[1:]]
    df = pd.DataFrame(rows, columns=["tag", "article"]).drop_duplicates()
    n_art = df.groupby("tag")["article"].nunique()
    keep = set(n_art[n_art >= 5].index)
    assert len(keep) == 8311
    want = df[df["tag"].isin(keep)]
    il = frames["instance_labels"]
    assert len(il) == len(want) == stats["instance_labels"]["rows"]
    got = set(zip(il[storage.INSTANCE_ID].astype(int), il[storage.LABEL_ID].astype(int)))
    assert got == set(zip(want["article"], want["tag"]))
    labels = frames["labels"]
    assert sorted(labels[storage.LABEL_ID].astype(int)) == sorted(keep)
    names = dict(zip(labels[storage.LABEL_ID].astype(int), labels[storage.TEXT]))
    for t in sorted(keep)[:50]:
        assert names[t] == tags[t].replace("-", " ").replace("_", " ")
        assert "-" not in names[t] and "_" not in names[t]
    # nothing silently lost: raw pairs = kept + dropped
    s = stats["instance_labels"]
    assert s["raw_entries"] == len(rows) == 290830
    assert (
        s["rows"]
        + s["dropped_with_rare_tags"]
        + s["duplicate_entries_dropped"]
        + s["unknown_article_dropped"]
        == s["raw_entries"]
    )
    assert stats["tags"]["kept"] + stats["tags"]["dropped_fewer_than_min_articles"] == len(tags)


def test_citeulike_events_are_user_libraries(citeulike, citeulike_dir):
    _, frames, stats = citeulike
    users = _counted_lines(os.path.join(citeulike_dir, "users.dat"))
    ev = frames["events"]
    assert list(ev.columns) == [storage.BASKET_ID, storage.ITEM_ID]
    assert len(ev) == sum(int(ln[0]) for ln in users) == 134860
    assert ev[storage.BASKET_ID].nunique() == len(users) == 7947
    lib = ev[ev[storage.BASKET_ID] == "u1"][storage.ITEM_ID].tolist()
    assert sorted(lib, key=int) == sorted(users[1][1:], key=int)
    assert stats["events"]["rows"] == len(ev)


# --------------------------------------------------------------------------- instacart
@pytest.fixture(scope="module")
def instacart(instacart_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("instacart")
    paths = datasets.prepare_data("instacart", instacart_dir, str(out))
    stats = json.loads((out / datasets.STATS_FILE).read_text())
    return paths, {k: _read(v) for k, v in paths.items()}, stats


def test_instacart_conversion(instacart, instacart_dir):
    paths, frames, stats = instacart
    assert sorted(paths) == ["events", "instances"]
    raw = pd.read_csv(os.path.join(instacart_dir, "order_products_sample.csv"), index_col=0)
    products = pd.read_csv(os.path.join(instacart_dir, "products.csv"))
    inst = frames["instances"]
    assert len(inst) == raw["product_id"].nunique() == 14190
    assert set(inst[storage.INSTANCE_ID]) == set(raw["product_id"].astype(str))
    names = dict(zip(products["product_id"].astype(str), products["product_name"]))
    assert (inst[storage.TEXT] == inst[storage.INSTANCE_ID].map(names)).all()
    assert 0.18 < (inst[storage.SPLIT] == storage.SPLIT_TEST).mean() < 0.22
    ev = frames["events"]
    assert list(ev.columns) == [storage.BASKET_ID, storage.ITEM_ID, storage.EVENT_TIME]
    assert len(ev) == len(raw.drop_duplicates(["order_id", "product_id"]))
    assert ev[storage.BASKET_ID].nunique() == raw["order_id"].nunique() == 15183
    got = set(zip(ev[storage.BASKET_ID], ev[storage.ITEM_ID]))
    assert got == set(zip(raw["order_id"].astype(str), raw["product_id"].astype(str)))
    # one timestamp per order, and a user's orders are in order_number order
    assert (ev.groupby(storage.BASKET_ID)[storage.EVENT_TIME].nunique() == 1).all()
    orders = raw.drop_duplicates("order_id").set_index("order_id")
    t = ev.drop_duplicates(storage.BASKET_ID).set_index(
        ev.drop_duplicates(storage.BASKET_ID)[storage.BASKET_ID].astype(int)
    )[storage.EVENT_TIME]
    orders = orders.assign(t=t).sort_values(["user_id", "order_number"])
    assert (orders.groupby("user_id")["t"].apply(lambda s: s.is_monotonic_increasing)).all()
    assert stats["instances"]["rows"] == len(inst) and stats["events"]["rows"] == len(ev)


# --------------------------------------------------------------------------- configs
@pytest.mark.parametrize(
    "name,source",
    [
        ("citeulike-t", "citeulike-t"),
        ("citeulike-t-i2i", "citeulike-t"),
        ("citeulike-t-both", "citeulike-t"),
        ("instacart", "instacart"),
    ],
)
def test_real_data_configs_point_at_prepared_files(name, source):
    from pina_spark.config import load_config

    cfg = load_config(os.path.join(ROOT, "conf", f"{name}.yaml"))
    assert cfg.graph.min_count == 2
    assert cfg.output == f"runs/{name}"
    inputs = {k: v for k, v in cfg.input.to_dict().items() if v}
    tables = TABLES if source == "citeulike-t" else ("instances", "events")
    assert sorted(inputs) == sorted(tables)
    for k, v in inputs.items():
        assert v == f"data/{source}/{k}.parquet"
    if source == "instacart":
        assert cfg.task.labels == "graph" and cfg.side_info == "label_text"
    else:
        assert cfg.task.labels == "given"
