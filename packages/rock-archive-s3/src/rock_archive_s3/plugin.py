"""rock-archive-s3's rock plugin: registers :class:`~rock_archive_s3.store.S3ArchiveStore` as ``s3``.

Announced in the ``rock`` entry-point group (``archive-s3 = "rock_archive_s3.plugin"``), so rock
finds it once the distribution is installed; its settings are the plugin's table
``[plugins.archive-s3]`` (or ``ROCK_PLUGIN_ARCHIVE_S3_<KEY>`` variables), handed to the store's
constructor as keyword arguments. boto3 is imported only when a store is built.
"""

from __future__ import annotations

from rock_archive_s3.store import S3ArchiveStore
from rock_core import hookimpl
from rock_core.hookspecs import Register

__all__ = ["rock_register_archive_stores"]


@hookimpl
def rock_register_archive_stores(register: Register) -> None:
    """Register the S3 archive store under the name ``s3``."""
    register(S3ArchiveStore.name, S3ArchiveStore)
