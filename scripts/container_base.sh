#!/usr/bin/env bash
# A Debian bookworm base image with Python 3.11, built here from Debian's packages, for machines that cannot
# pull public images: the Dockerfile's BASE_IMAGE in place of python:3.11-slim-bookworm.
#
#   scripts/container_base.sh [TAG]        (default: localhost/s2s-base:bookworm; skipped if it exists)
#
# mmdebstrap makes the root file system (Debian's minbase, Python, venv, CA certificates), podman imports it.
# Both come from Debian (apt-get install mmdebstrap podman). Python is Debian's 3.11 at /usr/bin/python3;
# the official image has its own build at /usr/local/bin: the Dockerfile only asks for `python3`.
set -euo pipefail

tag=${1:-localhost/s2s-base:bookworm}
if podman image exists "$tag"; then
  echo "$tag exists"
  exit 0
fi
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rootfs=$(mktemp -d)/rootfs.tar
trap 'rm -rf "$(dirname "$rootfs")"' EXIT
nice -n 15 mmdebstrap --variant=minbase --components=main \
  --include=python3,python3-venv,ca-certificates,netbase,tzdata \
  --aptopt='APT::Install-Recommends "false"' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm "$rootfs" "$mirror" "${mirror%/debian}/debian-security bookworm-security main" \
  "$mirror bookworm-updates main"
podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$rootfs" "$tag" >/dev/null
echo "$tag: $(podman image inspect --format '{{.Size}}' "$tag") bytes"
