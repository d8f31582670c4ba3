"""Finding run roots: the ``run_date=`` roots under an output (:func:`list_run_dates`), and a
run root from wherever a notebook kernel or a shell starts: Jupyter starts the
kernel in the notebook's folder (``notebooks/``), VS Code and papermill often in the
repository root, so a relative ``runs/demo/run`` must not depend on which.

Example::

    RUN = find_run_root("runs/demo/run")   # from notebooks/ too: <repo>/runs/demo/run
"""

import os

from pina_spark import storage


def find_run_root(path: str, start: str | None = None) -> str:
    """The run root ``path`` names: a URI (``s3://...``) or an absolute path as given; a relative
    path is looked up from ``start`` (default the working directory) and then from each of its
    parents, and the first folder holding ``<path>/_manifest.json`` is returned (absolute, with
    symbolic links resolved).

    Raises
    ------
    FileNotFoundError
        No run manifest at ``path`` from ``start`` or any parent.

    Examples
    --------
    >>> import os, tempfile
    >>> repo = os.path.realpath(tempfile.mkdtemp())
    >>> os.makedirs(os.path.join(repo, "runs", "r")); os.makedirs(os.path.join(repo, "notebooks"))
    >>> open(os.path.join(repo, "runs", "r", "_manifest.json"), "w").close()
    >>> find_run_root("runs/r", start=os.path.join(repo, "notebooks")) == f"{repo}/runs/r"
    True
    """
    if storage.is_remote(path) or os.path.isabs(storage.local_path(path)):
        return path
    here = os.path.abspath(start or os.getcwd())
    while True:
        candidate = os.path.join(here, path)
        if os.path.exists(os.path.join(candidate, storage.MANIFEST)):
            return os.path.realpath(candidate)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    raise FileNotFoundError(
        f"no run at {path!r}: no {path}/{storage.MANIFEST} under {os.path.abspath(start or '.')} "
        "or its parents (run `make demo`, or set RUN / PINA_RUN to a run root)"
    )


def list_run_dates(spark, output: str) -> list[str]:
    """The ``run_date=YYYY-MM-DD`` folders under ``output``, sorted."""
    out = []
    for name, is_dir in storage.list_dir(spark, output):
        if is_dir and name.startswith("run_date="):
            out.append(name[len("run_date=") :])
    return sorted(out)


def list_run_dates_arrow(output: str) -> list[str] | None:
    """:func:`list_run_dates` with pyarrow, for the pre-flight (no Spark): ``None`` where
    pyarrow does not reach ``output`` or cannot list it here.

    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(out, "run_date=2026-11-02")); os.makedirs(os.path.join(out, "x"))
    >>> list_run_dates_arrow(out), list_run_dates_arrow(os.path.join(out, "absent"))
    (['2026-11-02'], [])
    """
    if not storage.pyarrow_reaches(output):
        return None
    import pyarrow.fs as pafs

    try:
        fs, path = storage.pyarrow_fs(output)
        if fs.get_file_info(path).type != pafs.FileType.Directory:
            return []
        infos = fs.get_file_info(pafs.FileSelector(path))
    except Exception:  # no credentials for the bucket here, ...
        return None
    names = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
    return sorted(n[len("run_date=") :] for n in names if n.startswith("run_date="))
