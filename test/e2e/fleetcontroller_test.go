package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/multicache/multicache/test/harness"
)

// TestFleetController runs examples/fleet-controller, a controller-runtime reconciler that
// reads every cluster through multicache (pkg/crcache) and labels every ConfigMap, against
// three clusters under churn: ConfigMaps are created, updated, deleted and stripped of the
// label throughout, and one cluster is removed from the kubeconfig and added again meanwhile.
// When the writes stop, every ConfigMap of every cluster, as its API server lists it, carries
// the label and the data the writer last gave it: the controller reached the desired state
// exactly, and changed nothing else.
func TestFleetController(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 8 * time.Minute})
	ctx, f := env.Ctx, env.Fleet
	names := f.Names()
	const ns, labelKey, labelValue = "fc", "multicache.io/seen", "yes"
	type written struct {
		mu   sync.Mutex
		data map[string]string // cluster/name → the data the writer last set; absent: deleted
	}
	w := &written{data: map[string]string{}}
	for _, name := range names {
		cs, _ := f.Clientset(name)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		for j := range 30 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j), Namespace: ns}, Data: map[string]string{"v": "0"}}
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			w.data[name+"/"+cm.Name] = "0"
		}
	}

	// The example, built from this tree.
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-controller")
	_, self, _, _ := runtime.Caller(0)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/fleet-controller")
	build.Dir = filepath.Join(filepath.Dir(self), "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeContexts := func(contexts []string) {
		full, err := clientcmd.LoadFromFile(f.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		out := clientcmdapi.NewConfig()
		for _, c := range contexts {
			out.Contexts[c], out.Clusters[c], out.AuthInfos[c] = full.Contexts[c], full.Clusters[c], full.AuthInfos[c]
		}
		if err := clientcmd.WriteToFile(*out, kubeconfig+".tmp"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(kubeconfig+".tmp", kubeconfig); err != nil {
			t.Fatal(err)
		}
	}
	writeContexts(names)
	var logs strings.Builder
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--label", labelKey+"="+labelValue, "--namespace", ns)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by its PID; a no-op once it has exited
		<-exited
		if t.Failed() {
			t.Logf("the controller's log:\n%s", logs.String())
		}
	})

	// Churn: create, update, delete, and strip the label, in every cluster, for 20 s.
	churnCtx, stopChurn := context.WithTimeout(ctx, 20*time.Second)
	defer stopChurn()
	var churn sync.WaitGroup
	var writes, errs int64
	var countMu sync.Mutex
	for i, name := range names {
		churn.Add(1)
		go func() {
			defer churn.Done()
			cs, _ := f.Clientset(name)
			cms := cs.CoreV1().ConfigMaps(ns)
			rnd := rand.New(rand.NewPCG(uint64(i), 7))
			// Each write under the test's context: one the churn's end interrupted could be
			// applied without the writer knowing it.
			for n := 0; churnCtx.Err() == nil; n++ {
				cmName := fmt.Sprintf("cm-%d", rnd.IntN(40))
				k := name + "/" + cmName
				v := fmt.Sprint(n + 1)
				var err error
				switch op := rnd.IntN(4); op {
				case 0: // create or update
					var cm *corev1.ConfigMap
					cm, err = cms.Get(ctx, cmName, metav1.GetOptions{})
					if apierrors.IsNotFound(err) {
						_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: ns}, Data: map[string]string{"v": v}}, metav1.CreateOptions{})
					} else if err == nil {
						cm.Data = map[string]string{"v": v}
						_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
					}
					if err == nil {
						w.mu.Lock()
						w.data[k] = v
						w.mu.Unlock()
					}
				case 1: // delete
					err = cms.Delete(ctx, cmName, metav1.DeleteOptions{})
					if err == nil || apierrors.IsNotFound(err) {
						err = nil
						w.mu.Lock()
						delete(w.data, k)
						w.mu.Unlock()
					}
				case 2: // strip the label: the controller must put it back
					patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, labelKey)
					_, err = cms.Patch(ctx, cmName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
					if apierrors.IsNotFound(err) {
						err = nil
					}
				default:
					time.Sleep(20 * time.Millisecond)
					continue
				}
				countMu.Lock()
				writes++
				if err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
					errs++
				}
				countMu.Unlock()
			}
		}()
	}
	// Meanwhile the last cluster leaves the controller's fleet, and comes back.
	time.Sleep(6 * time.Second)
	last := names[len(names)-1]
	writeContexts(names[:len(names)-1])
	time.Sleep(5 * time.Second)
	writeContexts(names)
	churn.Wait()
	t.Logf("churn: %d writes, %d failed; %s left and came back", writes, errs, last)

	// Every ConfigMap carries the label, with the data the writer last set, and nothing else
	// exists.
	var diff []string
	reconciled := func() bool {
		diff = nil
		seen := map[string]bool{}
		for _, name := range names {
			cs, _ := f.Clientset(name)
			l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				diff = append(diff, err.Error())
				continue
			}
			for _, cm := range l.Items {
				k := name + "/" + cm.Name
				seen[k] = true
				w.mu.Lock()
				v, ok := w.data[k]
				w.mu.Unlock()
				switch {
				case !ok:
					diff = append(diff, k+": exists, the writer deleted it")
				case cm.Data["v"] != v || len(cm.Data) != 1:
					diff = append(diff, fmt.Sprintf("%s: data %v, the writer set v=%s", k, cm.Data, v))
				case cm.Labels[labelKey] != labelValue:
					diff = append(diff, k+": not labelled")
				}
			}
		}
		w.mu.Lock()
		for k := range w.data {
			if !seen[k] {
				diff = append(diff, k+": missing")
			}
		}
		w.mu.Unlock()
		sort.Strings(diff)
		return len(diff) == 0
	}
	for deadline := time.Now().Add(90 * time.Second); !reconciled() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	if len(diff) > 0 {
		t.Fatalf("not reconciled 90 s after the writes stopped: %d ConfigMaps, e.g. %v", len(diff), diff[:min(10, len(diff))])
	}
	w.mu.Lock()
	t.Logf("%d ConfigMaps in %d clusters labelled, each with its writer's data", len(w.data), len(names))
	w.mu.Unlock()

	// SIGTERM: it stops cleanly.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("the controller's exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("the controller did not exit 15 s after SIGTERM")
	}
}
