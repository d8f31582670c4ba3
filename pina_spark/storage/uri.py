"""URI helpers: one spelling for local paths and ``scheme://`` URIs (``s3://``, ``hdfs://``).

These are pure string functions that every other storage module shares. ``os.path`` would
mangle a URI, so paths are joined and compared here.
"""


def norm(uri: str) -> str:
    """``uri`` without trailing slashes: the one spelling two URIs are compared in.

    >>> norm("s3://b/run/")
    's3://b/run'
    """
    return str(uri).rstrip("/")


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for local paths and URIs alike (``os.path.join`` would mangle
    ``s3://``); the one place outside :class:`~pina_spark.storage.paths.RunPaths` that builds
    a path.

    >>> join("s3://b/run/", "models", "g")
    's3://b/run/models/g'
    """
    return "/".join([norm(base)] + [str(p).strip("/") for p in parts])


#: Hadoop's names for S3 (the S3A and old S3N connectors): the same objects as ``s3://``
_S3_ALIASES = ("s3a://", "s3n://")


def arrow_uri(uri: str) -> str:
    """``uri`` as ``pyarrow.fs`` names it: Hadoop's ``s3a://`` and ``s3n://`` become ``s3://``
    (the same bucket and key), so a run root that Spark reaches through S3A is reached by the
    driver's small files (manifest, lease, commits) too; anything else is unchanged. pyarrow
    takes its credentials and region from the AWS default chain and its endpoint is AWS's, not
    Hadoop's ``fs.s3a.*`` settings: ``pina-spark check`` and ``run`` refuse an ``s3a://`` root
    whose config points S3A at another store
    (:func:`pina_spark.cli.check.s3a_endpoint_problem`).

    >>> arrow_uri("s3a://b/run/_LOCK"), arrow_uri("s3://b/x"), arrow_uri("/tmp/x")
    ('s3://b/run/_LOCK', 's3://b/x', '/tmp/x')
    """
    for alias in _S3_ALIASES:
        if uri.startswith(alias):
            return "s3://" + uri[len(alias) :]
    return uri


def same_place(a: str, b: str) -> bool:
    """Whether two spellings name the same folder: ``file://`` or not, relative or absolute,
    ``.`` and doubled slashes in a local path, Hadoop's ``s3a://`` for ``s3://``, trailing
    slashes. For refusals that must not be dodged by spelling a run root another way.

    >>> same_place("runs/r/", "./runs//r"), same_place("s3a://b/prod", "s3://b/prod/")
    (True, True)
    >>> import os
    >>> same_place("file://" + os.path.abspath("runs/r"), "runs/r"), same_place("runs/r", "runs/s")
    (True, False)
    """

    def key(uri: str) -> str:
        uri = arrow_uri(str(uri))
        if is_remote(uri):
            scheme, rest = uri.split("://", 1)
            return scheme + "://" + "/".join(p for p in rest.split("/") if p)
        import os

        return os.path.abspath(os.path.normpath(local_path(uri)))

    return key(a) == key(b)


def is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri
