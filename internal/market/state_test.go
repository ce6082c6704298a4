package market

import (
	"slices"
	"testing"
)

func TestRing(t *testing.T) {
	r := ring[float64]{Step: 10, Keep: 3, Caps: true}
	for i := range 10 {
		r.add(int64(100+10*i), float64(i), float64(-i))
	}
	if r.Start != 170 || !slices.Equal(r.Price, []float64{7, 8, 9}) || !slices.Equal(r.Cap, []float64{-7, -8, -9}) {
		t.Fatalf("after 10 adds: start %d, %v %v; want 170, [7 8 9] [-7 -8 -9]", r.Start, r.Price, r.Cap)
	}
	if cap(r.Price) > r.Keep || cap(r.Cap) > r.Keep {
		t.Errorf("capacity grew past Keep: %d, %d", cap(r.Price), cap(r.Cap))
	}
	r.add(180, 80, -80) // replaces a slot
	if p, m, ok := r.at(180); !ok || p != 80 || m != -80 {
		t.Errorf("at(180) = %v %v %v after a replacement", p, m, ok)
	}
	// Between two points: interpolated, 80 at 180 and 9 at 190.
	if p, m, ok := r.at(185); !ok || p != 44.5 || m != -44.5 {
		t.Errorf("at(185) = %v %v %v, want 44.5 -44.5 halfway between the points either side", p, m, ok)
	}
	if p, _, ok := r.at(199); !ok || p != 9 {
		t.Errorf("at(less than a step past the end) = %v %v, want the last point", p, ok)
	}
	if _, _, ok := r.at(200); ok {
		t.Error("at(a step past the end) found a point: the ring does not know that far")
	}
	if _, _, ok := r.at(169); ok {
		t.Error("at(before the start) found a point")
	}
	r.add(250, 1, 1) // a gap restarts the ring
	if r.Start != 250 || len(r.Price) != 1 {
		t.Errorf("after a gap: start %d, %v", r.Start, r.Price)
	}
	d := ring[float32]{Step: 10, Keep: 2}
	d.add(10, 1, 99)
	if p, m, ok := d.at(10); !ok || p != 1 || m != 0 || d.Cap != nil {
		t.Errorf("a ring without caps kept one: %v %v %v", p, m, d.Cap)
	}
}
