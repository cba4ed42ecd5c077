package shard

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/multicache/multicache/pkg/clusterset"
)

func TestAdmit(t *testing.T) {
	cands := []string{"a", "b", "c", "d", "e"}
	// Without Local everything is admitted, and nothing counts as warming.
	if next, warming, queued := admit(cands, map[string]bool{}, nil, 1, nil, 0); !reflect.DeepEqual(next, cands) || warming != 0 || queued != 0 {
		t.Errorf("no local: %v, %d warming, %d queued", next, warming, queued)
	}
	state := map[string][2]bool{"b": {true, true}, "d": {true, false}}
	local := func(n string) (bool, bool) { s := state[n]; return s[0], s[1] }
	// b (synced) and d (warming) stay; one slot of two is free: a joins, c and e wait.
	next, warming, queued := admit(cands, map[string]bool{"b": true, "d": true}, local, 2, nil, 0)
	if want := []string{"a", "b", "d"}; !reflect.DeepEqual(next, want) || warming != 2 || queued != 2 {
		t.Errorf("admit = %v, %d warming, %d queued; want %v, 2 warming (a, d), 2 queued", next, warming, queued, want)
	}
	// A full set of warming clusters admits nothing, but keeps what is offered.
	next, warming, queued = admit(cands, map[string]bool{"d": true}, local, 1, nil, 0)
	if want := []string{"d"}; !reflect.DeepEqual(next, want) || warming != 1 || queued != 4 {
		t.Errorf("admit = %v, %d warming, %d queued; want %v, 1 warming, 4 queued", next, warming, queued, want)
	}
	// Handed-over clusters warm in a pool of their own: with a and c handed over, d warming
	// in the warm-up pool (1 slot) and a in the handover pool (2 slots), c joins; b and e,
	// not handed over, wait for the warm-up slot d holds.
	state = map[string][2]bool{"a": {true, false}, "d": {true, false}}
	handed := map[string]bool{"a": true, "c": true}
	next, warming, queued = admit(cands, map[string]bool{"a": true, "d": true}, local, 1, handed, 2)
	if want := []string{"a", "c", "d"}; !reflect.DeepEqual(next, want) || warming != 3 || queued != 2 {
		t.Errorf("two pools: %v, %d warming, %d queued; want %v, 3 warming (a, c, d), 2 queued", next, warming, queued, want)
	}
	// A full handover pool queues the next handed-over cluster even with warm-up slots free.
	next, warming, queued = admit(cands, map[string]bool{"a": true}, local, 3, handed, 1)
	if want := []string{"a", "b", "d", "e"}; !reflect.DeepEqual(next, want) || warming != 4 || queued != 1 {
		t.Errorf("full handover pool: %v, %d warming, %d queued; want %v, 4 warming, 1 queued (c)", next, warming, queued, want)
	}
	// maxHanded below 1: handed-over clusters take warm-up slots as any other.
	next, warming, queued = admit(cands, map[string]bool{"a": true, "d": true}, local, 2, handed, -1)
	if want := []string{"a", "d"}; !reflect.DeepEqual(next, want) || warming != 2 || queued != 3 {
		t.Errorf("one pool: %v, %d warming, %d queued; want %v, 2 warming, 3 queued", next, warming, queued, want)
	}
	// All synced: nothing warms, nothing waits.
	state = map[string][2]bool{"a": {true, true}, "b": {true, true}}
	if next, warming, queued := admit([]string{"a", "b"}, map[string]bool{"a": true, "b": true}, local, 1, nil, 0); len(next) != 2 || warming != 0 || queued != 0 {
		t.Errorf("all synced: %v, %d warming, %d queued; want none warming or queued", next, warming, queued)
	}
}

// partialSource returns its clusters and a plain (partial) error.
type partialSource struct {
	cfgs []clusterset.ClusterConfig
	err  error
}

func (p *partialSource) Load() ([]clusterset.ClusterConfig, error) { return p.cfgs, p.err }
func (p *partialSource) Changes(context.Context) <-chan struct{}   { return nil }

func TestLoadSourceCompletesPartialLoads(t *testing.T) {
	src := &partialSource{cfgs: []clusterset.ClusterConfig{{Name: "a"}, {Name: "b"}}}
	o := validOptions()
	o.Source = src
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	st := newLoopState(nil)
	c.loadSource(st)
	if !reflect.DeepEqual(st.names, []string{"a", "b"}) || st.srcErr != nil {
		t.Fatalf("clean load: %v %v", st.names, st.srcErr)
	}
	bad := errors.New(`context "b": broken`)
	src.cfgs, src.err = []clusterset.ClusterConfig{{Name: "a"}, {Name: "c"}}, bad
	c.loadSource(st)
	var complete *clusterset.CompleteError
	if !reflect.DeepEqual(st.names, []string{"a", "b", "c"}) || !errors.As(st.srcErr, &complete) || !errors.Is(st.srcErr, bad) {
		t.Fatalf("partial load: %v %v", st.names, st.srcErr)
	}
	src.cfgs, src.err = []clusterset.ClusterConfig{{Name: "c"}}, &clusterset.CompleteError{Err: bad}
	c.loadSource(st)
	if !reflect.DeepEqual(st.names, []string{"c"}) || st.srcErr != src.err {
		t.Fatalf("complete load with errors: %v %v", st.names, st.srcErr)
	}
}
