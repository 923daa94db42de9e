"""rock's archive store on S3-compatible object storage.

:class:`S3ArchiveStore` keeps each part of an archived sandbox as the object
``<prefix>/<sandbox_id>/<part>``, streamed as a multipart upload. It is registered as the archive
store ``s3`` by this distribution's rock plugin (entry point ``archive-s3``), and configured by
the plugin's table ``[plugins.archive-s3]``. :mod:`rock_archive_s3.testing` has a real S3 server
on 127.0.0.1 for tests (moto's).
"""

from rock_archive_s3.store import S3ArchiveStore

__version__ = "0.1.0"

__all__ = ["S3ArchiveStore", "__version__"]
