"""``python -m rock.sdk.model model-service ...``: the model service's command line."""

from rock.sdk.model.cli import main

if __name__ == "__main__":
    main()
