package local

import "testing"

// TestSecretDataKey: of a Secret, only keys under metadata and type may be summarized unless
// its data is served: any other path, a wildcard or a recursive one may read the data.
func TestSecretDataKey(t *testing.T) {
	for key, refused := range map[string]bool{
		"cluster": false, "namespace": false, "label:app": false, "index:x": false,
		"field:metadata.annotations.owner": false, "field:type": false, "field:{.type}": false, "field:.metadata.name": false,
		"field:data.password": true, "field:stringData.x": true, "field:*": true, "field:metadata.*": true,
		"field:..password": true, "field:metadata..x": true, "field:$['data']": true, "field:{.data}": true, "field:typeX": true,
	} {
		if got := secretDataKey(key); got != refused {
			t.Errorf("%s: refused %v, want %v", key, got, refused)
		}
	}
}
