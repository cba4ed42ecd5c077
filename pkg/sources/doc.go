// Package sources yields the clusters of a fleet to a clusterset.Registry, as
// clusterset.Sources:
//   - Kubeconfig: contexts of kubeconfig files, loaded as kubectl loads them (clientcmd), with
//     include and exclude globs and renames; the files are polled for change.
//   - Secrets: kubeconfig Secrets in a namespace of the management cluster, ours (labelled
//     ClusterLabel) and Cluster API's (CAPISecretType), read through an informer.
//   - ClusterProfiles: ClusterProfiles of the Cluster Inventory API, turned into client
//     configs through the consumer's access-provider file (an exec credential plugin per
//     provider); a profile whose control plane is not healthy is held back or reported.
//   - Multi: several sources in order of precedence, one name to one source.
//
// A bad entry (a context, a Secret, a profile) is named in the load's error or yielded with
// clusterset.ClusterConfig.Err; the other entries load as usual. A cluster's Fingerprint
// changes when its server or credentials change.
//
// Files: kubeconfig.go, secrets.go, profiles.go, profileaccess.go (a profile's access
// provider and the provider file, turned into a client config), multi.go.
package sources
