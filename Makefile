# The two commands of README.md. Each prepares everything it needs (scripts/prepare.sh):
# uv, the workspace, a Docker engine and the offline test images.
SHELL := /bin/bash
PYTEST_ARGS ?=

.PHONY: test rollout prepare

## make test: run ruff and mypy (scripts/check.sh), then every test of every package and of tests/, then the SDK's tests that
## go through the driver again in remote mode (through a real `rock admin` server; the others ran already, see
## packages/rock-sdk/tests/conftest.py) unless PYTEST_ARGS narrows the run
test: prepare
	scripts/check.sh
	scripts/pytest-to-the-end.sh $(PYTEST_ARGS)
	if [ -z "$(PYTEST_ARGS)" ]; then ROCK_TEST_REMOTE=1 scripts/pytest-to-the-end.sh packages/rock-sdk; fi

## make rollout: rock's main job, 10 RL episodes in parallel on the local Docker engine
ROLLOUT_ARGS ?= --count 10 --parallelism 10
rollout: prepare
	.venv/bin/rock bench rollout $(ROLLOUT_ARGS) --output runs/rollout-$$(date +%Y%m%d-%H%M%S)

prepare:
	scripts/prepare.sh
