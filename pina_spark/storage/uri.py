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


def is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri
