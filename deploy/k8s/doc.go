// Package k8s holds no code: its tests render the kustomize base beside
// them (and the optional ServiceMonitor component) with kustomize's own
// library, decode every object strictly into the Kubernetes API types, and
// check the manifests against the image and the real server.
package k8s
