"""E2B's API on rock's admin (see :mod:`rock_e2b.plugin`)."""
