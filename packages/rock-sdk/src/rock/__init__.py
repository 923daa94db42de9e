"""rock: sandboxes for agentic reinforcement learning, compatible with ROCK (``rl-rock``)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
