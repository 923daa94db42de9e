"""Archive store for stopped rock sandboxes on S3-compatible object storage.

Not implemented yet: this distribution reserves its name and import path in the rock workspace.
It registers no plugin (no ``rock`` entry point) until its code lands.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
