"""rock: sandboxes for agentic reinforcement learning, compatible with ROCK (``rl-rock``).

``rock.make(env_id)`` (ROCK's), ``rock.amake`` and ``rock.make_vec`` / ``rock.amake_vec`` make
environments in sandboxes (:mod:`rock.sdk.envs`); they are imported on first use.
"""

from rock._lazy import lazy_names

__version__ = "0.1.0"

__all__ = ["__version__", "amake", "amake_vec", "make", "make_vec"]

__getattr__, __dir__ = lazy_names(
    __name__, {name: "rock.sdk.envs" for name in ("amake", "amake_vec", "make", "make_vec")}
)
