package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/multicache/multicache/pkg/api"
)

func TestPrintSummary(t *testing.T) {
	web, c1 := "web", "c1"
	s := &api.Summary{Kind: "Summary", By: []string{"cluster", "label:tier"}, Total: 5, Groups: []api.SummaryGroup{
		{Key: map[string]*string{"cluster": &c1, "label:tier": &web}, Count: 3},
		{Key: map[string]*string{"cluster": &c1, "label:tier": nil}, Count: 2},
	}}
	var out bytes.Buffer
	if err := printSummary(&out, s, "table"); err != nil {
		t.Fatal(err)
	}
	want := "CLUSTER   LABEL:TIER   COUNT\nc1        web          3\nc1        <none>       2\n5 objects in 2 groups\n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := printSummary(&out, s, "json"); err != nil {
		t.Fatal(err)
	}
	var back api.Summary
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Total != 5 || back.Groups[1].Key["label:tier"] != nil || !strings.Contains(out.String(), `"label:tier": null`) {
		t.Errorf("json: %v\n%s", err, out.String())
	}
}
