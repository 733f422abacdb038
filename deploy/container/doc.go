// Package container holds no code: its tests build the image with
// `make image` and run it with the machine's container engine (Docker where
// `docker info` answers, else Podman, with deploy/containers.conf when runc
// is installed: the choice deploy/engine.sh makes for the Makefile). They
// skip, saying why, where no engine works.
//
// Everything they create (image, containers, pods, volumes, networks) is
// named sprout-test-<random> and removed when they end, failed or not;
// ports are published on 127.0.0.1 only.
package container
