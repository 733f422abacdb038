# Sourced by the Makefile's container targets: sets ENGINE to the command
# that runs containers here. Docker where `docker info` answers (a client
# without an engine does not count), else Podman; with Podman and runc,
# deploy/containers.conf is used unless CONTAINERS_CONF is already set
# (deploy/README.md says why). Fails with a message when neither works.
# deploy/container/engine.go makes the same choice for the tests.
if docker info >/dev/null 2>&1; then
	ENGINE=docker
elif command -v podman >/dev/null 2>&1; then
	ENGINE=podman
	if [ -z "${CONTAINERS_CONF:-}" ] && command -v runc >/dev/null 2>&1; then
		CONTAINERS_CONF=$(pwd)/deploy/containers.conf
		export CONTAINERS_CONF
	fi
else
	echo "no container engine: docker info fails and podman is not installed (on Debian: apt-get install podman runc)" >&2
	return 1 2>/dev/null || exit 1
fi
