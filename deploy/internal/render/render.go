// Package render runs kustomize on a directory, as `kubectl kustomize`
// does, with kustomize's own library, for the deploy tests.
package render

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Docs renders dir and returns the YAML documents of the output. Loading is
// unrestricted, so an overlay may name a base outside its own directory.
func Docs(dir string) ([][]byte, error) {
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	return Split(out), nil
}

// Split cuts a multi-document YAML stream into its non-empty documents.
func Split(out []byte) [][]byte {
	var docs [][]byte
	for doc := range bytes.SplitSeq(out, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
	return docs
}

// Overlay renders base with components, as an overlay of a user's would
// that names only them, from a kustomization written in a temporary
// directory.
func Overlay(base string, components ...string) ([][]byte, error) {
	dir, err := os.MkdirTemp("", "sprout-overlay-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := WriteOverlay(dir, base, components...); err != nil {
		return nil, err
	}
	return Docs(dir)
}

// WriteOverlay writes dir/kustomization.yaml naming base as its resource
// and components, by paths relative to dir, as kustomize takes them.
func WriteOverlay(dir, base string, components ...string) error {
	rel := func(p string) (string, error) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		return filepath.Rel(dir, abs)
	}
	b, err := rel(base)
	if err != nil {
		return err
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n", b)
	if len(components) > 0 {
		kust += "components:\n"
	}
	for _, c := range components {
		r, err := rel(c)
		if err != nil {
			return err
		}
		kust += "  - " + r + "\n"
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644)
}

// StatefulSet renders dir and strictly decodes its one StatefulSet.
func StatefulSet(dir string) (*appsv1.StatefulSet, error) {
	docs, err := Docs(dir)
	if err != nil {
		return nil, err
	}
	return StatefulSetOf(docs)
}

// StatefulSetOf strictly decodes the one StatefulSet among rendered docs.
func StatefulSetOf(docs [][]byte) (*appsv1.StatefulSet, error) {
	for _, doc := range docs {
		if bytes.Contains(doc, []byte("\nkind: StatefulSet\n")) {
			sts := new(appsv1.StatefulSet)
			return sts, yaml.UnmarshalStrict(doc, sts)
		}
	}
	return nil, errNoStatefulSet
}

var errNoStatefulSet = errors.New("render: no StatefulSet rendered")
