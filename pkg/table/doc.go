// Package table answers Table requests (Accept: application/json;as=Table;g=meta.k8s.io;v=v1),
// as kubectl makes them for `kubectl get`: a metav1.Table whose first column is CLUSTER, then
// the kind's own columns, with each row's object as PartialObjectMetadata so that kubectl can
// add NAMESPACE.
//
// A Convertor makes the columns and cells of one kind. Where they come from, in order:
//   - a Provider, for built-in kinds: the daemon plugs in Kubernetes' own printers, the ones
//     kube-apiserver uses, so that rows read as kubectl users know them;
//   - a custom resource's additionalPrinterColumns, through apiextensions-apiserver's own
//     convertor;
//   - otherwise NAME and AGE, as kube-apiserver gives a custom resource without columns.
//
// Nothing here modifies an object it is given: they are the cache's.
//
// Files: table.go (Set, Provider and the Table of an object).
package table
