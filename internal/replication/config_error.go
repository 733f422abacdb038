package replication

import "fmt"

// Setting names a setting of NodeConfig in a ConfigError: the field, as
// this package knows it. The binary says which flag sets it.
type Setting string

const (
	SettingNode    Setting = "Node"
	SettingListen  Setting = "Listen"
	SettingPeers   Setting = "Peers"
	SettingJoin    Setting = "Join" // ClusterID and JoinID, as a join string gives them
	SettingTLSCert Setting = "TLSCert"
	SettingTLSKey  Setting = "TLSKey"
	SettingTLSCA   Setting = "TLSCA"
	SettingTiming  Setting = "Timing" // Tick, its counts and SendQueue
)

// ConfigError refuses a setting of a member's configuration: which one,
// and why, in words that name no flag.
type ConfigError struct {
	Setting Setting
	Err     error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("replication: %s: %v", e.Setting, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// configErrorf is a ConfigError of s, its reason formatted.
func configErrorf(s Setting, format string, args ...any) error {
	return &ConfigError{Setting: s, Err: fmt.Errorf(format, args...)}
}
