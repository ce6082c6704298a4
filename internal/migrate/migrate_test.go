package migrate

import (
	"context"
	"slices"
	"strings"
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

// A migration's "-- go: NAME" lines split it into parts, each the SQL
// before a step.
func TestParts(t *testing.T) {
	m := Migration{SQL: "ALTER TABLE a ADD b;\n-- go: fill\nCREATE INDEX c;\n-- go: check \nDROP d;\n"}
	want := []Part{{"ALTER TABLE a ADD b;\n", "fill"}, {"CREATE INDEX c;\n", "check"}, {"DROP d;\n", ""}}
	if got := m.Parts(); !slices.Equal(got, want) {
		t.Errorf("Parts() = %q, want %q", got, want)
	}
	if got := (Migration{SQL: "SELECT 1; -- go: not a step\n"}).Parts(); len(got) != 1 || got[0].Step != "" {
		t.Errorf("a marker inside a line: %q", got)
	}
}

// The first account keeps its address's key; later ones with the same
// key get "#ID KEY", which collides with nothing, even an address that
// looks like one.
func TestKeyEmails(t *testing.T) {
	ids := []int64{1, 2, 3, 5, 8}
	emails := []string{"\u212Aate@example.com", "Kate@Example.com", "#5 kate@example.com", "KATE@example.com", "bob@example.com"}
	want := []string{"kate@example.com", "#2 kate@example.com", "#5 kate@example.com", "#5 #5 kate@example.com", "bob@example.com"}
	if got := KeyEmails(ids, emails); !slices.Equal(got, want) {
		t.Errorf("KeyEmails = %q, want %q", got, want)
	}
}

// Apply runs the parts in order, each step after its SQL, and refuses a
// step it does not have rather than record the migration without it.
func TestApply(t *testing.T) {
	m := Migration{SQL: "A;\n-- go: fill\nB;\n"}
	var ran []string
	exec := func(_ context.Context, log *[]string, q string) error { *log = append(*log, "sql "+q); return nil }
	steps := map[string]func(context.Context, *[]string) error{
		"fill": func(_ context.Context, log *[]string) error { *log = append(*log, "step fill"); return nil },
	}
	if err := Apply(t.Context(), m, &ran, exec, steps); err != nil {
		t.Fatal(err)
	}
	if want := []string{"sql A;\n", "step fill", "sql B;\n"}; !slices.Equal(ran, want) {
		t.Errorf("ran %q, want %q", ran, want)
	}
	ran = nil
	err := Apply(t.Context(), Migration{SQL: "A;\n-- go: missing\nB;\n"}, &ran, exec, steps)
	if err == nil || !strings.Contains(err.Error(), `no Go step "missing"`) || len(ran) != 1 {
		t.Errorf("an unknown step: %v after %q", err, ran)
	}
}
