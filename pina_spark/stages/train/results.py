"""A trained variant's result: its predictions frame and its statistics."""

import logging

import numpy as np

from pina_spark import storage
from pina_spark.stages.train.inputs import LabelProblem, VariantInputs

TRAIN_STATS_FILE = "_train_stats.json"  # same name as evaluate.TRAIN_STATS_FILE

log = logging.getLogger(__name__)


def variant_result(
    prob: LabelProblem, variant: str, inp: VariantInputs, cols_k, scores_k, train_s, predict_s
):
    """``(the predictions frame, the variant's statistics)`` of a fitted variant (the driver
    and the executor path alike)."""
    for r in inp.no_feat_rows:  # no features for this test instance: no prediction
        cols_k[r] = cols_k[r][:0]
        scores_k[r] = scores_k[r][:0]
    frame = _predictions_frame(variant, prob.test_ids, cols_k, scores_k, prob.label_ids)
    log.info(
        "train: variant %s: %d features, train %.1fs, predict %.1fs",
        variant,
        inp.n_features,
        train_s,
        predict_s,
    )
    return frame, {
        "train_s": round(train_s, 3),
        "predict_s": round(predict_s, 3),
        "features_s": round(inp.prep_s, 3),
        "n_features": inp.n_features,
        "n_labels_trained": len(prob.label_ids),
    }


def _predictions_frame(variant, test_ids, cols_k, scores_k, label_ids):
    import pandas as pd

    return pd.DataFrame(
        {
            storage.INSTANCE_ID: test_ids,
            storage.LABEL_IDS: [label_ids[c].tolist() for c in cols_k],
            storage.SCORES: [s.astype(np.float32) for s in scores_k],
            storage.VARIANT: variant,
        }
    )
