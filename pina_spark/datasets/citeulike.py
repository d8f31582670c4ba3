"""``prepare-data --source citeulike-t``: articles -> tags (rules in the package docstring)."""

import logging
import os
from collections.abc import Sequence

from pina_spark import storage
from pina_spark.datasets.common import (
    STATS_FILE,
    TEST_FRACTION,
    TEST_SALT,
    _need,
    _read_lines,
    _split_of,
    _write,
    _write_json,
)

log = logging.getLogger(__name__)


def _parse_counted_line(line: str, path: str, lineno: int) -> list[str]:
    """``n a b c ...`` -> ``[a, b, c]``; the leading count must match."""
    parts = line.split()
    if not parts:
        return []
    n = int(parts[0])
    if n != len(parts) - 1:
        raise storage.InputError(f"{path}:{lineno + 1}: count {n} != {len(parts) - 1} entries")
    return parts[1:]


def citeulike_text(entries: Sequence[str], vocabulary: Sequence[str]) -> str:
    """Text of one article from its ``mult.dat`` entries (``"word_id:count"`` strings).

    Words ordered by count descending, ties by vocabulary index ascending; each word repeated by
    its count; joined by single spaces. No words gives ``""``.

    Examples
    --------
    >>> citeulike_text(["2:1", "0:2", "1:2"], ["gene", "cell", "protein"])
    'gene gene cell cell protein'
    """
    bag = []
    for e in entries:
        wid, cnt = e.split(":")
        bag.append((-int(cnt), int(wid)))
    bag.sort()
    return " ".join(" ".join([vocabulary[w]] * (-c)) for c, w in bag)


def prepare_citeulike(
    input_dir: str | None, output_dir: str, min_tag_articles: int = 5
) -> tuple[dict[str, str], dict]:
    """Convert the shared citeulike-t folder to the input contract (rules in the module docs).

    Parameters
    ----------
    input_dir : str or None
        Folder with ``mult.dat``, ``vocabulary.dat``, ``tags.dat``, ``tag-item.dat``,
        ``users.dat`` (``None`` or a folder lacking one: :class:`pina_spark.storage.InputError`).
    output_dir : str
        Where the four Parquet files and ``prepare_stats.json`` go.
    min_tag_articles : int
        Keep a tag (label) only when it is on at least this many distinct articles.

    Returns
    -------
    (paths, stats)
        Absolute paths of ``instances``, ``labels``, ``instance_labels``, ``events``, and the
        statistics also written to ``prepare_stats.json``.

    Example::

        paths, stats = prepare_citeulike("../shared/data/citeulike-t", "/tmp/cul")
        stats["tags"]["kept"]  # 8311
    """
    files = ["mult.dat", "vocabulary.dat", "tags.dat", "tag-item.dat", "users.dat"]
    d = _need(input_dir, "citeulike-t", files)
    out = os.path.abspath(output_dir)
    os.makedirs(out, exist_ok=True)
    vocab = _read_lines(os.path.join(d, "vocabulary.dat"))
    mult_path = os.path.join(d, "mult.dat")
    mult = _read_lines(mult_path)
    ids = [str(i) for i in range(len(mult))]
    texts = [
        citeulike_text(_parse_counted_line(ln, mult_path, i), vocab) for i, ln in enumerate(mult)
    ]
    splits = [_split_of(a) for a in ids]
    n_art = len(ids)

    tags = _read_lines(os.path.join(d, "tags.dat"))
    ti_path = os.path.join(d, "tag-item.dat")
    tag_items = _read_lines(ti_path)
    if len(tag_items) != len(tags):
        raise storage.InputError(f"{ti_path}: {len(tag_items)} lines but tags.dat has {len(tags)}")
    raw_pairs = dup_pairs = bad_pairs = 0
    kept_pairs: list[tuple[str, str]] = []
    kept_tags: list[int] = []
    dropped_tag_pairs = dropped_tags = 0
    for t, ln in enumerate(tag_items):
        entries = _parse_counted_line(ln, ti_path, t)
        raw_pairs += len(entries)
        arts = sorted({int(a) for a in entries})
        dup_pairs += len(entries) - len(arts)
        ok = [a for a in arts if 0 <= a < n_art]
        bad_pairs += len(arts) - len(ok)
        if len(ok) >= min_tag_articles:
            kept_tags.append(t)
            kept_pairs += [(str(a), str(t)) for a in ok]
        else:
            dropped_tags += 1
            dropped_tag_pairs += len(ok)
    kept_pairs.sort(key=lambda p: (int(p[0]), int(p[1])))
    label_texts = [tags[t].replace("-", " ").replace("_", " ").strip() for t in kept_tags]
    arts_with_tag = {a for a, _ in kept_pairs}
    arts_any_tag: set[int] = set()
    for ln_i, ln in enumerate(tag_items):
        arts_any_tag.update(int(a) for a in _parse_counted_line(ln, ti_path, ln_i))

    u_path = os.path.join(d, "users.dat")
    users = _read_lines(u_path)
    ev_b: list[str] = []
    ev_i: list[str] = []
    ev_dup = ev_bad = 0
    for u, ln in enumerate(users):
        entries = _parse_counted_line(ln, u_path, u)
        uniq = sorted({int(a) for a in entries})
        ev_dup += len(entries) - len(uniq)
        ok = [a for a in uniq if 0 <= a < n_art]
        ev_bad += len(uniq) - len(ok)
        ev_b += [f"u{u}"] * len(ok)
        ev_i += [str(a) for a in ok]

    paths = {
        "instances": _write(
            out, "instances", {storage.INSTANCE_ID: ids, storage.TEXT: texts, storage.SPLIT: splits}
        ),
        "labels": _write(
            out,
            "labels",
            {storage.LABEL_ID: [str(t) for t in kept_tags], storage.TEXT: label_texts},
        ),
        "instance_labels": _write(
            out,
            "instance_labels",
            {
                storage.INSTANCE_ID: [a for a, _ in kept_pairs],
                storage.LABEL_ID: [t for _, t in kept_pairs],
            },
        ),
        "events": _write(out, "events", {storage.BASKET_ID: ev_b, storage.ITEM_ID: ev_i}),
    }
    n_test = sum(s == storage.SPLIT_TEST for s in splits)
    stats = {
        "source": "citeulike-t",
        "rules": {
            "instance_id": "0-based line number in mult.dat",
            "text": "words by count desc (ties: vocabulary index asc), each repeated by count",
            "split": f"test when in_sample_fraction(instance_id, {TEST_FRACTION}, "
            f"'{TEST_SALT}')",
            "label_id": "0-based line number in tags.dat",
            "label_text": "tag name with '-' and '_' replaced by spaces",
            "min_tag_articles": min_tag_articles,
            "basket_id": "'u' + 0-based line number in users.dat",
        },
        "instances": {
            "rows": n_art,
            "train": n_art - n_test,
            "test": n_test,
            "empty_text": sum(1 for t in texts if not t),
            "without_kept_tag": n_art - len(arts_with_tag),
            "without_any_tag": n_art - len(arts_any_tag & set(range(n_art))),
            "dropped": 0,
        },
        "tags": {
            "total": len(tags),
            "kept": len(kept_tags),
            "dropped_fewer_than_min_articles": dropped_tags,
            "kept_label_texts_not_unique": len(label_texts) - len(set(label_texts)),
        },
        "instance_labels": {
            "raw_entries": raw_pairs,
            "duplicate_entries_dropped": dup_pairs,
            "unknown_article_dropped": bad_pairs,
            "dropped_with_rare_tags": dropped_tag_pairs,
            "rows": len(kept_pairs),
        },
        "events": {
            "users": len(users),
            "rows": len(ev_b),
            "duplicate_entries_dropped": ev_dup,
            "unknown_article_dropped": ev_bad,
            "distinct_items": len(set(ev_i)),
        },
    }
    _write_json(os.path.join(out, STATS_FILE), stats)
    log.info(
        "citeulike-t -> %s: %d articles (%d test), %d/%d tags kept (>= %d articles), "
        "%d pairs (%d dropped with rare tags), %d events",
        out,
        n_art,
        n_test,
        len(kept_tags),
        len(tags),
        min_tag_articles,
        len(kept_pairs),
        dropped_tag_pairs,
        len(ev_b),
    )
    return paths, stats
