#!/usr/bin/env bash
# Builds the image with podman on a machine that cannot pull public images (make container, make test-container):
# the base image made here from Debian's packages (scripts/container_base.sh), this machine's CA bundle and pip
# configuration handed to pip as build secrets (never kept in a layer), the docker image format (podman drops
# HEALTHCHECK from OCI images), at low priority.
# With Docker and public images, `docker build .` is all it takes.
#
#   scripts/container_build.sh TAG [podman build arguments...]     e.g. --build-arg VARIANT=gpu
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${1:?usage: $0 TAG [build arguments]}
shift
base=${S2S_BASE_IMAGE:-localhost/s2s-base:bookworm}
case $base in
  localhost/*) scripts/container_base.sh "$base" ;;
esac
secrets=()
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -s "$ca" ] && secrets+=(--secret "id=pip_ca,src=$ca")
# pip's own configuration, when it names an index mirror or a proxy the build needs (PIP_CONFIG_FILE, else /etc/pip.conf)
conf=${PIP_CONFIG_FILE:-/etc/pip.conf}
if [ -s "$conf" ] && grep -q -E '^\s*(index-url|proxy)\s*=' "$conf"; then
  secrets+=(--secret "id=pip_conf,src=$conf")
fi
started=$(date +%s)
nice -n 15 scripts/podman_here.sh podman build --format docker --network host --layers \
  --build-arg "BASE_IMAGE=$base" "${secrets[@]}" -t "$tag" "$@" .
echo "built $tag in $(( $(date +%s) - started ))s: $(podman image inspect --format '{{.Size}}' "$tag") bytes"
