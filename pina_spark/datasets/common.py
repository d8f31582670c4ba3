"""What every converter shares: the split rule, the constants of the prepared files and the
writers (single-file Parquet tables of strings, JSON statistics), all atomic (tmp + rename)."""

import json
import os
import uuid
from typing import Dict, List, Optional, Sequence

from .. import io
from ..folds import in_sample_fraction

SOURCES = ("demo", "instacart", "citeulike-t")
TEST_SALT = "pina-test"
TEST_FRACTION = 0.2
STATS_FILE = "prepare_stats.json"


def _write(out_dir: str, name: str, columns: Dict[str, list]) -> str:
    """Write one single-file Parquet table of string columns atomically (tmp + rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = [pa.field(c, pa.float64() if c == io.WEIGHT else pa.string()) for c in columns]
    table = pa.table(
        {c: pa.array(v, type=f.type) for (c, v), f in zip(columns.items(), fields)},
        schema=pa.schema(fields),
    )
    path = os.path.join(out_dir, f"{name}.parquet")
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    pq.write_table(table, tmp, compression="snappy")
    os.replace(tmp, path)
    return path


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def _read_lines(path: str) -> List[str]:
    """Lines of a text file; a missing final newline is fine, no trailing empty line is made."""
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()


def _split_of(instance_id: str, salt: str = TEST_SALT) -> str:
    return io.SPLIT_TEST if in_sample_fraction(instance_id, TEST_FRACTION, salt) else io.SPLIT_TRAIN


def _need(input_dir: Optional[str], source: str, files: Sequence[str]) -> str:
    if not input_dir:
        raise io.InputError(
            f"prepare-data --source {source}: --input (folder of the raw data " f"set) is required"
        )
    missing = [f for f in files if not os.path.isfile(os.path.join(input_dir, f))]
    if missing:
        raise io.InputError(f"prepare-data --source {source}: {input_dir} lacks {missing}")
    return input_dir
