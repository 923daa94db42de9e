#!/usr/bin/env bash
# Make the images rock's tests and the rollout benchmark use. Idempotent.
#
#   python:3.11            ROCK's default sandbox image name
#   rock-test/python:3.11  the same image under rock's own name
#   rock-gem/python:3.11   python:3.11 with GEM's games (scripts/ensure-gem-image.sh)
#
# If both exist, nothing is done. Else `docker pull python:3.11` is tried; when no registry can
# be reached (the usual case on these machines) the image is built offline: debootstrap a minimal
# Debian (the host's release) with python3, python3-venv, python3-pip, ca-certificates and procps
# from the mirror in the machine's own apt sources, then `docker import`.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

TEST_IMAGE="rock-test/python:3.11"
DEFAULT_IMAGE="python:3.11"

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

if has_image "$TEST_IMAGE" && has_image "$DEFAULT_IMAGE"; then
    say "test images present: $DEFAULT_IMAGE, $TEST_IMAGE"
    exec "$(dirname "$0")/ensure-gem-image.sh" "$DEFAULT_IMAGE"
fi

exec 9>"$ROCK_STATE_DIR/images.lock"
flock 9  # two concurrent runs build once
if has_image "$TEST_IMAGE" && has_image "$DEFAULT_IMAGE"; then exit 0; fi

if ! has_image "$DEFAULT_IMAGE" && ! has_image "$TEST_IMAGE"; then
    say "trying 'docker pull $DEFAULT_IMAGE'"
    if timeout 60 docker pull -q "$DEFAULT_IMAGE" >/dev/null 2>&1; then
        docker tag "$DEFAULT_IMAGE" "$TEST_IMAGE"
        say "pulled $DEFAULT_IMAGE"; exit 0
    fi
    say "$DEFAULT_IMAGE cannot be pulled: building it offline with debootstrap"
fi

if ! has_image "$TEST_IMAGE"; then
    is_root || die "building the test image needs root (debootstrap); run as root or provide $DEFAULT_IMAGE"
    if ! command -v debootstrap >/dev/null 2>&1; then
        is_debian || die "debootstrap is missing and this is not Debian; install debootstrap and retry"
        say "installing debootstrap (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2 \
            || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2; } \
            || die "could not install debootstrap"
    fi
    release="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
    mirror="$(python3 "$(dirname "$0")/apt_mirror.py" "$release")"
    rootfs="$ROCK_STATE_DIR/images/python-3.11-rootfs"
    rm -rf "$rootfs"; mkdir -p "$rootfs"
    say "debootstrap $release (minbase) from the machine's apt mirror into $rootfs; takes a few minutes"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates,procps \
        "$release" "$rootfs" "$mirror" >"$ROCK_STATE_DIR/images/debootstrap.log" 2>&1 \
        || { tail -n 30 "$ROCK_STATE_DIR/images/debootstrap.log" >&2; die "debootstrap failed; log: $ROCK_STATE_DIR/images/debootstrap.log"; }
    # Behave like the official python image: `python` exists and pip may install system-wide.
    ln -sf python3 "$rootfs/usr/bin/python"
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    # The image must not carry the build host's apt sources, caches or identity.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
    : >"$rootfs/etc/hostname"
    say "docker import -> $TEST_IMAGE"
    tar -C "$rootfs" --numeric-owner -c . | docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["python3"]' \
        - "$TEST_IMAGE" >/dev/null
    rm -rf "$rootfs"
fi
has_image "$DEFAULT_IMAGE" || docker tag "$TEST_IMAGE" "$DEFAULT_IMAGE"
docker run --rm "$TEST_IMAGE" python3 -c 'import sys; print("[rock] test image python", sys.version.split()[0])' >&2
say "test images ready: $DEFAULT_IMAGE, $TEST_IMAGE"
# rock-gem's env image (python:3.11 with GEM's games), the default image of rock.make
"$(dirname "$0")/ensure-gem-image.sh" "$DEFAULT_IMAGE"
