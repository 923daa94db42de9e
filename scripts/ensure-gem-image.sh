#!/usr/bin/env bash
# Make rock-gem's env image: BASE (default python:3.11) with GEM's games in /opt/rock-gem/site,
# and GEM's runtime zip for Python 3.11 (uploaded into sandboxes of images without GEM).
# Idempotent; needs no registry of images, only the Python package index pip/uv already use.
#
#   scripts/ensure-gem-image.sh [BASE [TAG]]      TAG default: rock-gem/<BASE>
#
# The packages (packages/rock-gem/src/rock_gem/runtime-requirements.txt) are fetched by uv on
# the host as wheels for the base image's Python and CPU, unpacked into a folder, and copied into
# the image; the image sets ROCK_ENV_PYTHONPATH, which only the rocklet's env worker reads, so the
# sandbox's own commands see the base image's Python unchanged. The requirements' hash is a label
# of the image: changing them rebuilds it.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BASE="${1:-python:3.11}"
TAG="${2:-rock-gem/$BASE}"
REQS="$ROCK_REPO/packages/rock-gem/src/rock_gem/runtime-requirements.txt"
SITE="/opt/rock-gem/site"
LABEL="rock.gem.requirements"

# GEM's runtime as a zip, for sandboxes of images without GEM (rock_gem.runtime uploads it).
ROCK_UV="$("$ROCK_REPO/scripts/ensure-uv.sh")" "$ROCK_REPO/.venv/bin/python" -m rock_gem.runtime 3.11 >/dev/null \
    || die "could not prepare GEM's runtime zip (python -m rock_gem.runtime 3.11)"

hash="$(cat "$REQS" "$0" | sha256sum | cut -c1-16)"  # the packages and this recipe
docker image inspect "$BASE" >/dev/null 2>&1 || die "base image $BASE is missing (scripts/ensure-test-images.sh makes python:3.11)"
base_id="$(docker image inspect -f '{{.Id}}' "$BASE")"
if [ "$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}/{{index .Config.Labels \"rock.gem.base\"}}" "$TAG" 2>/dev/null || true)" = "$hash/$base_id" ]; then
    say "GEM image present: $TAG"; exit 0
fi

exec 8>"$ROCK_STATE_DIR/gem-image.lock"
flock 8
pyver="$(docker run --rm --entrypoint python3 "$BASE" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
    || die "$BASE has no python3: GEM needs Python 3.10 to 3.12 in the image"
case "$pyver" in 3.10|3.11|3.12) ;; *) die "$BASE has Python $pyver; gem-llm 0.1.0 needs Python 3.10 to 3.12" ;; esac
case "$(uname -m)" in x86_64) arch=x86_64 ;; aarch64|arm64) arch=aarch64 ;; *) die "unsupported CPU $(uname -m)" ;; esac

build="$ROCK_STATE_DIR/gem-image"
rm -rf "$build"; mkdir -p "$build"
uv="$("$ROCK_REPO/scripts/ensure-uv.sh")"
say "fetching GEM's runtime for Python $pyver ($arch) with uv"
"$uv" pip install --quiet --target "$build/site" --no-deps --only-binary :all: \
    --python-version "$pyver" --python-platform "$arch-manylinux_2_28" -r "$REQS" \
    || die "could not fetch the packages of $REQS"
rm -rf "$build/site/bin"
cat >"$build/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY site $SITE
# Bytecode in the image: every env sandbox would otherwise compile numpy and GEM at its first env.
RUN python3 -m compileall -q $SITE
ENV ROCK_ENV_PYTHONPATH=$SITE
# The rocklet starts GEM's worker as it starts (a warm pool's sandboxes have it ready).
ENV ROCK_ENV_PRESTART=1
LABEL $LABEL=$hash rock.gem.base=$base_id
DOCKERFILE
say "docker build -> $TAG"
DOCKER_BUILDKIT=0 docker build -q -t "$TAG" "$build" >/dev/null 2>"$build/build.log" \
    || docker build -q -t "$TAG" "$build" >/dev/null \
    || { cat "$build/build.log" >&2; die "docker build of $TAG failed"; }
docker run --rm -e PYTHONPATH="$SITE" --entrypoint python3 "$TAG" -c 'import importlib.util, numpy; assert importlib.util.find_spec("gem"); print("[rock] GEM image ok: numpy", numpy.__version__)' >&2 \
    || { docker rmi -f "$TAG" >/dev/null 2>&1; die "$TAG cannot import numpy and find gem"; }
rm -rf "$build"
say "GEM image ready: $TAG"
