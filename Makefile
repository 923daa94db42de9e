# The two commands of README.md. Each prepares everything it needs (scripts/prepare.sh):
# uv, the workspace, a Docker engine and the offline test images.
SHELL := /bin/bash
PYTEST_ARGS ?=

.PHONY: test rollout prepare

## make test: run every test of every package and of tests/
test: prepare
	.venv/bin/python -m pytest $(PYTEST_ARGS)

## make rollout: rock's main job on the local Docker engine
rollout: prepare
	.venv/bin/rock plugins

prepare:
	scripts/prepare.sh
