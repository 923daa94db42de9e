"""``python -m rock.admin ...``: the ``rock admin`` commands (used by ``rock admin start``)."""

from rock.admin.cli import admin

if __name__ == "__main__":
    admin(prog_name="rock admin")
