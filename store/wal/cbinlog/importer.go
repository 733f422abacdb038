package cbinlog

import "github.com/sproutmq/sprout/store/wal"

// Importer lets wal.Open take over a directory of beanstalkd binlog files.
type Importer struct{}

// Files implements wal.Importer.
func (Importer) Files(dir string) ([]string, error) { return Found(dir) }

// Read implements wal.Importer.
func (Importer) Read(dir string, maxJobSize int) ([]wal.Record, uint64, error) {
	return Read(dir, maxJobSize)
}
