"""GEM environments (`rock.make("game:Sokoban-v0-easy")`) served from rock sandboxes.

Not implemented yet: this distribution reserves its name and import path in the rock workspace.
It registers no plugin (no ``rock`` entry point) until its code lands.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
