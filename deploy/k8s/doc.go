// Package k8s holds no code: its tests render the kustomize base beside
// them (and the optional components) with kustomize's own library, decode
// every object strictly into the Kubernetes API types, and check the
// manifests against the image and the real server.
//
// The base runs independent nodes (shards). components/cluster turns its
// StatefulSet into one Raft cluster of three members: a component and not
// an overlay because kustomize refuses an overlay inside its base's
// directory, and because a component composes with servicemonitor in the
// one overlay a user writes anyway (for the image). It sets the pod's name
// as the member's name (downward API), lists every member by the headless
// Service's per-pod DNS name (which the base publishes before the pods are
// ready, so members find each other to elect a leader), adds the cluster
// port to the container, the headless Service and the NetworkPolicy
// (member to member), and makes the disruption budget keep a majority.
// Probes stay the base's: /readyz is 200 on a member that knows a leader
// and has caught up with it once (applied what the leader had committed
// when it asked), /healthz is the process's start and liveness (a member
// catching up, or waiting for a majority, is not restarted for it). cluster_test.go checks that wiring with the
// server's own parser of --cluster-peers; deploy/container plays the three
// pods with podman and kills the leader's.
//
// components/cluster-tls adds mutual TLS between members: the Secret
// sprout-cluster-tls mounted read-only and SPROUT_CLUSTER_TLS_CERT, _KEY
// and _CA naming its keys (as cert-manager writes them). A member checks a
// peer's certificate against the host in --cluster-peers, so one
// certificate for *.sprout-headless (server and client authentication)
// serves every member.
package k8s
