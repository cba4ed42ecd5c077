// An informer written with the official JavaScript client (@kubernetes/client-node), as its
// users write one, on ConfigMaps of a namespace: at SERVER (the fleet view, or one cluster's
// under /clusters/{name}), narrowed by an optional label selector. It prints one JSON line
// once it has listed, and one per add, update and delete, for the Go test that runs it.
//
// Usage: node informer.mjs SERVER NAMESPACE [LABEL_SELECTOR]
import * as k8s from '@kubernetes/client-node';

const [server, namespace, labelSelector] = process.argv.slice(2);
const kc = new k8s.KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: 'multicache', server, skipTLSVerify: true }],
  users: [{ name: 'user' }],
  contexts: [{ name: 'multicache', cluster: 'multicache', user: 'user' }],
  currentContext: 'multicache',
});
const api = kc.makeApiClient(k8s.CoreV1Api);
const list = () => api.listNamespacedConfigMap({ namespace, labelSelector });
const informer = k8s.makeInformer(kc, `/api/v1/namespaces/${namespace}/configmaps`, list, labelSelector);
const emit = (op, obj) => {
  const annotations = (obj && obj.metadata && obj.metadata.annotations) || {};
  console.log(JSON.stringify({ op, cluster: annotations['multicache.io/cluster'] || '', name: obj && obj.metadata && obj.metadata.name }));
};
informer.on('add', (obj) => emit('add', obj));
informer.on('update', (obj) => emit('update', obj));
informer.on('delete', (obj) => emit('delete', obj));
informer.on('error', (err) => {
  console.log(JSON.stringify({ op: 'error', why: String(err) }));
  setTimeout(() => informer.start(), 1000);
});
await informer.start();
console.log(JSON.stringify({ op: 'listed', items: informer.list(namespace).length }));
