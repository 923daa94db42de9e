"""ROCK's ``rock.sdk.model``: the model service that runs inside a sandbox, between an agent and
the trainer (``local`` mode) or an inference server (``proxy`` mode).

Everything under this package is standard library only (Python 3.8+): it is shipped into the
sandbox as one zipapp (:func:`rock.sdk.model.zipapp.build_zipapp`) and run by the image's own
python, with no network and nothing to install. ``rock model-service ...`` is its command line
(:mod:`rock.sdk.model.cli`); :class:`~rock.sdk.model.client.ModelClient` is ROCK's trainer-side
reader of the file protocol; :class:`~rock.sdk.model.service.ModelService` starts and stops the
service process.
"""

from __future__ import annotations

__all__ = ["ModelClient", "ModelService"]


def __getattr__(name: str) -> object:
    if name == "ModelClient":
        from rock.sdk.model.client import ModelClient

        return ModelClient
    if name == "ModelService":
        from rock.sdk.model.service import ModelService

        return ModelService
    raise AttributeError(name)
