// Package kubeprinters supplies the Table columns of built-in kinds from Kubernetes' own
// printers, the ones kube-apiserver answers `kubectl get` with, so that the daemon's rows read
// as kubectl users know them (the rows are checked against the API servers' own).
//
// It lives in the daemon's module, not the library's: the printers come with k8s.io/kubernetes,
// which a module can only require with a replace directive for each of its staging modules,
// and replace directives do not reach a library's users.
//
// Files: kubeprinters.go (New: a table.Provider of Kubernetes' printers).
package kubeprinters
