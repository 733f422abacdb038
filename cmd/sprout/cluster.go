package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// exitRemoved is the exit status of a member removed from the cluster:
// it stops serving, and refuses to start again on its directory.
const exitRemoved = 12

// clusterFlags are the flags that mean nothing without --node.
var clusterFlags = []struct {
	name  string
	value func(o *options) string
}{
	{"--cluster-listen", func(o *options) string { return o.clusterListen }},
	{"--cluster-peers", func(o *options) string { return o.clusterPeers }},
	{"--cluster-join", func(o *options) string { return o.clusterJoin }},
	{"--cluster-tls-cert", func(o *options) string { return o.clusterTLSCert }},
	{"--cluster-tls-key", func(o *options) string { return o.clusterTLSKey }},
	{"--cluster-tls-ca", func(o *options) string { return o.clusterTLSCA }},
	{"--cluster-groups", func(o *options) string { return nonZero(o.clusterGroups) }},
	{"--cluster-replicas", func(o *options) string { return nonZero(o.clusterReplicas) }},
}

// nonZero is n as a flag's value, "" for 0 (not given).
func nonZero(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// checkCluster refuses a cluster configuration that cannot run, in one
// line naming the flag at fault (replication.NodeConfig.Validate's lines,
// and the ones only the command line knows): a cluster flag without
// --node, cluster mode without -b or on a unix socket.
func checkCluster(o options) error {
	if o.node == "" {
		for _, f := range clusterFlags {
			if f.value(&o) != "" {
				return fmt.Errorf("%s needs --node: it is for cluster mode", f.name)
			}
		}
		return nil
	}
	switch {
	case o.walDir == "":
		return errors.New("-b is required in cluster mode (--node): each member keeps its Raft log in its own directory")
	case strings.HasPrefix(o.host, "unix:"):
		return errors.New("-l unix:PATH is not supported in cluster mode: members proxy clients to the leader's TCP address")
	case o.clusterListen == "":
		return errors.New("--cluster-listen is required in cluster mode: HOST:PORT where the other members connect")
	case o.clusterPeers == "":
		return errors.New("--cluster-peers is required in cluster mode: NAME=HOST:PORT,... for every initial member, this one included (a joining member: those it reaches first)")
	}
	cfg, err := nodeConfig(o)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return errors.New(describe(err))
	}
	return nil
}

// clusterFlag is the flag that sets each of replication's settings.
var clusterFlag = map[replication.Setting]string{
	replication.SettingNode:    "--node",
	replication.SettingListen:  "--cluster-listen",
	replication.SettingPeers:   "--cluster-peers",
	replication.SettingJoin:    "--cluster-join",
	replication.SettingTLSCert: "--cluster-tls-cert",
	replication.SettingTLSKey:  "--cluster-tls-key",
	replication.SettingTLSCA:   "--cluster-tls-ca",
}

// describe is the line the operator reads for a lower layer's error, in
// words that say what to do, with the flags that do it: a
// replication.ConfigError names the flag that sets what it refuses; a log
// the member or the single node may not open says how to start on it.
func describe(err error) string {
	var ce *replication.ConfigError
	var fe *replication.ForeignLogError
	var de *segment.DamageError
	switch {
	case errors.As(err, &ce):
		if flag, ok := clusterFlag[ce.Setting]; ok {
			return flag + ": " + ce.Err.Error()
		}
		return ce.Err.Error()
	case errors.Is(err, wal.ErrClusterLog):
		return "the directory is a cluster member's log: start it as that member (--node), or on another directory"
	case errors.Is(err, replication.ErrSingleNodeLog):
		return "the directory holds a single node's jobs: a cluster takes them over only as its first member alone (--cluster-peers naming --node only)"
	case errors.As(err, &fe) && fe.SameName():
		return fmt.Sprintf("%s: start it with the --cluster-peers it first started with, or with --cluster-join %s:%s, or on another directory",
			trimPackage(fe.Error()), replication.FormatID(fe.Cluster), replication.FormatID(fe.ID))
	case errors.As(err, &fe):
		return trimPackage(fe.Error()) + ": start on another directory"
	case errors.As(err, &de):
		return trimPackage(de.Error()) + " (start with --skip-damaged to skip it)"
	}
	return trimPackage(err.Error())
}

// trimPackage drops the package name a lower layer's message begins with.
func trimPackage(msg string) string {
	for _, p := range []string{"replication: ", "segment: ", "wal: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// nodeConfig is what the options say of the member; run adds the wiring.
func nodeConfig(o options) (*replication.NodeConfig, error) {
	peers, err := replication.ParsePeers(o.clusterPeers)
	if err != nil {
		return nil, err
	}
	nc := &replication.NodeConfig{
		Node: o.node, Listen: o.clusterListen, Peers: peers,
		TLSCert: o.clusterTLSCert, TLSKey: o.clusterTLSKey, TLSCA: o.clusterTLSCA,
	}
	if o.clusterJoin != "" {
		// Without an entry for this member in a list, it is an initial one.
		if nc.ClusterID, nc.JoinID, _, err = replication.SelectJoin(o.clusterJoin, o.node); err != nil {
			return nil, err
		}
	}
	return nc, nil
}
