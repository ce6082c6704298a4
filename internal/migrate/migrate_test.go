package migrate

import (
	"testing"
	"testing/fstest"
)

func TestRead(t *testing.T) {
	ms, err := Read(fstest.MapFS{
		"m/0002_more.sql": {Data: []byte("B")},
		"m/0001_init.sql": {Data: []byte("A")},
		"m/README":        {Data: []byte("ignored")},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Version != 1 || ms[0].SQL != "A" || ms[1].Name != "0002_more.sql" {
		t.Errorf("Read = %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no version":   {"m/init.sql": {}},
		"zero":         {"m/0000_x.sql": {}},
		"not a number": {"m/x1_y.sql": {}},
		"duplicate":    {"m/0001_a.sql": {}, "m/1_b.sql": {}},
	} {
		if _, err := Read(fsys, "m"); err == nil {
			t.Errorf("%s: Read succeeded", name)
		}
	}
}
