#!/usr/bin/env bash
# Removes what the container tests of ended runs left behind: the pods,
# containers, volumes, networks and images whose names hold
# sprout-test-<run>, as deploy/container names them. A run holds a lock on
# /tmp/sprout-testruns/<run> while it lives (deploy/container's TestMain),
# so a name whose run's lock nobody holds was left by a test process
# killed before it could clean up. Such leftovers are not harmless: a
# pod's published ports stay as DNAT rules on 127.0.0.1 that take the
# connections of whatever later listens on those ports. Run by
# .ci/test-setup and deploy/container's TestMain; a no-op without an
# engine.
set -uo pipefail
cd "$(dirname "$0")/.."

. deploy/engine.sh 2>/dev/null || exit 0

runs=/tmp/sprout-testruns
mkdir -p "$runs"

# gone reads names on stdin and prints those of runs that have ended.
gone() {
	local name run
	while read -r name; do
		run=$(sed -nE 's|.*sprout-test-([0-9a-f]{8}).*|\1|p' <<<"$name")
		[ -n "$run" ] || continue
		if flock -n "$runs/$run" true 2>/dev/null; then
			echo "$name"
		fi
	done
}

remove() {
	local what=$1
	shift
	local name
	while read -r name; do
		[ -n "$name" ] || continue
		if "$ENGINE" "$@" "$name" >/dev/null 2>&1; then
			echo "clean-test-leftovers: removed $what $name" >&2
		fi
	done
}

# No grace: the processes of these are long gone or orphaned.
now=()
if [ "$ENGINE" = podman ]; then
	now=(-t 0)
	remove pod pod rm -f "${now[@]}" < <("$ENGINE" pod ls --format '{{.Name}}' 2>/dev/null | gone)
fi
remove container rm -f "${now[@]}" < <("$ENGINE" ps -a --format '{{.Names}}' 2>/dev/null | gone)
remove volume volume rm -f < <("$ENGINE" volume ls --format '{{.Name}}' 2>/dev/null | gone)
remove network network rm -f < <("$ENGINE" network ls --format '{{.Name}}' 2>/dev/null | gone)
remove image rmi -f < <("$ENGINE" images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | gone)
# The lock files stay (empty, one a run): removing one could race with a
# run that has opened it and not yet locked it.
exit 0
