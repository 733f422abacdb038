package testproc

import (
	"bytes"
	"fmt"
)

// ParseYAML parses the YAML document of a stats or list reply body: "---",
// then either "key: value" lines (stats, stats-tube, stats-job) or "- item"
// lines (list-tubes, list-tubes-watched). beanstalkd 1.13 quotes tube names;
// the quotes are dropped from values and items. Anything else is an error:
// these documents are flat.
func ParseYAML(doc []byte) (fields map[string]string, items []string, err error) {
	rest, ok := bytes.CutPrefix(doc, []byte("---\n"))
	if !ok {
		return nil, nil, fmt.Errorf("testproc: a YAML document starts with \"---\\n\", not %.20q", doc)
	}
	fields = make(map[string]string)
	for line := range bytes.SplitSeq(rest, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		if item, ok := bytes.CutPrefix(line, []byte("- ")); ok {
			items = append(items, unquote(item))
			continue
		}
		key, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(key) == 0 {
			return nil, nil, fmt.Errorf("testproc: YAML line %q is neither \"key: value\" nor \"- item\"", line)
		}
		fields[string(key)] = unquote(value)
	}
	return fields, items, nil
}

// unquote trims the space around a value, and the quotes around a quoted one.
func unquote(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	return string(v)
}
