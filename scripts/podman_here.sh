#!/usr/bin/env bash
# Runs a podman (or podman-compose) command as these machines need it: the runc runtime (crun cannot set the
# rlimits here), host networking, and rlimits no higher than this process's own (runc may only lower them).
# The settings go in a containers.conf of its own (CONTAINERS_CONF); nothing under /etc is changed.
#
#   scripts/podman_here.sh podman build ...      scripts/podman_here.sh podman-compose up -d
set -euo pipefail

conf=${TMPDIR:-/tmp}/s2s-containers.conf
nofile=$(ulimit -Hn)
nproc=$(( $(ulimit -Hu) / 2 ))
[ "$nproc" -gt 32768 ] && nproc=32768
cat > "$conf.$$" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
netns = "host"

[engine]
runtime = "runc"
CONF
mv "$conf.$$" "$conf"
export CONTAINERS_CONF=$conf
exec "$@"
