// Package container holds no code: its tests build the image with
// `make image` and run it with the machine's container engine (Docker where
// `docker info` answers, else Podman, with deploy/containers.conf when runc
// is installed: the choice deploy/engine.sh makes for the Makefile). They
// skip, saying why, where no engine works.
//
// `podman kube play` cannot play a StatefulSet, so playStatefulSet makes
// its pods as the controller would, and gives each what Kubernetes would:
// its name through the downward API, its hostname, and every pod's
// headless Service name (hostAliases to static addresses, as podman's CNI
// networks have no DNS here). The shards' tests play deploy/k8s; the
// cluster's (cluster_test.go, tls_test.go) play it with
// components/cluster, kill the leader's pod, replace every member in turn,
// and run the members over mutual TLS.
//
// Everything they create (image, containers, pods, volumes, networks) is
// named sprout-test-<random> and removed when they end, failed or not;
// ports are published on 127.0.0.1 only. What a killed run could not
// remove, the next run does (deploy/clean-test-leftovers.sh, also run by
// .ci/test-setup): a run locks /tmp/sprout-testruns/<random> while it
// lives.
package container
