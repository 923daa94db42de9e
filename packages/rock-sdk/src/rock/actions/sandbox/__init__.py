"""ROCK's ``rock.actions.sandbox`` package: the sandbox request and response models."""
