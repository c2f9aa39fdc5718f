#!/usr/bin/env bash
# run-suite.sh: what `make test` runs on its fresh control planes: the integration suite, then
# short fault-injection runs: on the Kubernetes hub (CHAOS_CI_SECONDS of faults, default 150),
# then behind MQTT and gRPC (CHAOS_CI_BROKER_SECONDS each, default 60). Both always run; the exit
# code is non-zero when either failed. The chaos runs go last: they restart the API servers.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[run-suite] %s\n' "$*" >&2; }
"$HERE/run-integration.sh" "$@"
integration=$?
CHAOS_BROKER_SECONDS=${CHAOS_CI_BROKER_SECONDS:-60} "$HERE/chaos.sh" --duration "${CHAOS_CI_SECONDS:-150}"
chaos=$?
log "integration suite exit $integration, chaos run exit $chaos"
[ "$integration" = 0 ] && [ "$chaos" = 0 ]
