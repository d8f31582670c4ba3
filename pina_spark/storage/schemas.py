"""Column names, the relative paths of a run's tables, their Spark schemas, and InputError.

Every column and table name the pipeline uses is a constant here, so no other module spells
one. :func:`schema` gives the explicit Spark schema of an input table (the input contract) or
of a produced table; :data:`INPUT_COLUMNS` gives the required and optional columns of each
input.

Examples
--------
>>> INPUT_COLUMNS["events"][0]
('basket_id', 'item_id')
"""

# --------------------------------------------------------------------------- column names
INSTANCE_ID = "instance_id"
LABEL_ID = "label_id"
TEXT = "text"
SPLIT = "split"
BASKET_ID = "basket_id"
ITEM_ID = "item_id"
EVENT_TIME = "event_time"
WEIGHT = "weight"
REASON = "reason"

NODE_INDEX = "node_index"
KIND = "kind"
NODE_ID = "node_id"
KIND_INSTANCE = "instance"
KIND_LABEL = "label"

SRC_ID = "src_id"
DST_ID = "dst_id"
COUNT = "count"
SCORE = "score"
SRC_INDEX = "src_index"
DST_INDEX = "dst_index"
BLOCK = "block"
VARIANT = "variant"

INSTANCE_INDEX = "instance_index"
LABEL_INDEX = "label_index"
NEIGHBOR = "neighbor"
DENSE = "dense"
SPARSE_INDICES = "sparse_indices"
SPARSE_VALUES = "sparse_values"
NEIGHBOR_IDS = "neighbor_ids"
NEIGHBOR_WEIGHTS = "neighbor_weights"
FOLD = "fold"
LABEL_IDS = "label_ids"
SCORES = "scores"

SPLIT_TRAIN = "train"
SPLIT_TEST = "test"
SPLIT_VALID = "valid"

# --------------------------------------------------------------------------- output layout
# relative paths of every published table / folder under a run root
NODES = "nodes"
I2I_EDGES = "graph/i2i_edges"
INSTANCE_LABELS = "graph/instance_labels"  # downstream target Y: instance_index, label_index
PRETRAIN_EDGES = "graph/pretrain_edges"  # B_pre, partitioned by variant (pina, pina_naive)
VECTORIZER = "vectorizer"  # Phi_pre (tf-idf + encoder), the vectorizer stage's folder
MODELS = "models"  # g per variant, folds, model card: the pretrain stage's folder
EMBEDDINGS = "embeddings"
NEIGHBORS = "neighbors"  # partitioned by variant
FEATURES = "features"  # partitioned by variant, split
PREDICTIONS = "predictions"  # partitioned by variant
DOWNSTREAM_MODELS = "downstream_models"  # the train stage's PECOS models, one folder per variant
EVAL = "eval"
QUARANTINE = "quarantine"
MANIFEST = "_manifest.json"
STAGING = "_staging"
#: scratch folder of an incremental stage (its selected rows and output before the merge)
INCREMENTAL_SCRATCH = "_incremental"
STAGING_RUN_TAG = ".run-"
LOCK = "_LOCK"  # the run root's lease (one writer per root)
COMMITS = "_commits"  # one atomic commit record per stage
VERSION_FILE = "_VERSION"  # version token inside every published folder


def _schemas():
    from pyspark.sql import types as T

    s, lng, f = T.StringType(), T.LongType(), T.FloatType()
    arr = T.ArrayType
    return {
        # input contract
        "instances": T.StructType(
            [T.StructField(INSTANCE_ID, s), T.StructField(TEXT, s), T.StructField(SPLIT, s)]
        ),
        "labels": T.StructType([T.StructField(LABEL_ID, s), T.StructField(TEXT, s)]),
        "instance_labels": T.StructType(
            [T.StructField(INSTANCE_ID, s), T.StructField(LABEL_ID, s)]
        ),
        "events": T.StructType(
            [
                T.StructField(BASKET_ID, s),
                T.StructField(ITEM_ID, s),
                T.StructField(EVENT_TIME, s),
                T.StructField(WEIGHT, T.DoubleType()),
            ]
        ),
        "filter_pairs": T.StructType([T.StructField(INSTANCE_ID, s), T.StructField(LABEL_ID, s)]),
        # produced tables
        NODES: T.StructType(
            [
                T.StructField(NODE_INDEX, lng, False),
                T.StructField(KIND, s, False),
                T.StructField(NODE_ID, s, False),
                T.StructField(TEXT, s),
                T.StructField(SPLIT, s),
            ]
        ),
        EMBEDDINGS: T.StructType(
            [
                T.StructField(NODE_INDEX, lng, False),
                T.StructField(DENSE, arr(f)),
                T.StructField(SPARSE_INDICES, arr(T.IntegerType())),
                T.StructField(SPARSE_VALUES, arr(f)),
            ]
        ),
        NEIGHBORS: T.StructType(
            [
                T.StructField(INSTANCE_INDEX, lng, False),
                T.StructField(NEIGHBOR, arr(lng)),
                T.StructField(SCORE, arr(f)),
            ]
        ),
        # partitioned by VARIANT and SPLIT on disk (SPLIT is also kept as a column)
        FEATURES: T.StructType(
            [
                T.StructField(INSTANCE_ID, s),
                T.StructField(SPLIT, s),
                T.StructField(DENSE, arr(f)),
                T.StructField(SPARSE_INDICES, arr(T.IntegerType())),
                T.StructField(SPARSE_VALUES, arr(f)),
                T.StructField(NEIGHBOR_IDS, arr(s)),
                T.StructField(NEIGHBOR_WEIGHTS, arr(f)),
            ]
        ),
    }


#: input tables: (required columns, optional columns)
INPUT_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "instances": ((INSTANCE_ID, TEXT), (SPLIT,)),
    "labels": ((LABEL_ID, TEXT), ()),
    "instance_labels": ((INSTANCE_ID, LABEL_ID), ()),
    "events": ((BASKET_ID, ITEM_ID), (EVENT_TIME, WEIGHT)),
    "filter_pairs": ((INSTANCE_ID, LABEL_ID), ()),
}


def schema(name: str):
    """The explicit Spark schema of an input or produced table."""
    return _schemas()[name]


class InputError(ValueError):
    """A missing input, a missing column or a wrong column type; names the column and file."""
