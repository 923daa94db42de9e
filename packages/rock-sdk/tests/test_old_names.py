"""The names ``rock.sdk`` exported before the SDK's drivers were renamed (issue #23) still import,
and each is the very object of its new name."""

from __future__ import annotations

import rock.sdk
from rock.sdk._drivers.base import Driver
from rock.sdk._drivers.embedded import EmbeddedDriver
from rock.sdk._drivers.embedded_default import (
    close_embedded_driver,
    configure_embedded_driver,
    get_embedded_driver,
)


def test_the_old_names_are_the_new_objects() -> None:
    from rock.sdk import (
        EmbeddedEngine,
        Engine,
        close_embedded_engine,
        configure_embedded_engine,
        get_embedded_engine,
    )

    assert EmbeddedEngine is EmbeddedDriver
    assert Engine is Driver
    assert get_embedded_engine is get_embedded_driver
    assert configure_embedded_engine is configure_embedded_driver
    assert close_embedded_engine is close_embedded_driver


def test_every_exported_name_imports() -> None:
    for name in rock.sdk.__all__:
        assert getattr(rock.sdk, name) is not None, name
        assert name in dir(rock.sdk), name
