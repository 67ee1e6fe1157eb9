package memory

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/tollgate/tollgate/algo"
)

// TestLayout checks the sizes the lookup's memory traffic depends on.
func TestLayout(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 128 {
		t.Errorf("an entry is %d bytes, want 128", n)
	}
	if n := unsafe.Sizeof(shard{}); n != 128 {
		t.Errorf("a shard is %d bytes, want 128", n)
	}
}

// TestSameLimit checks that sameLimit compares every field of a Limit.
func TestSameLimit(t *testing.T) {
	if n := reflect.TypeFor[algo.Limit]().NumField(); n != 7 {
		t.Fatalf("algo.Limit has %d fields; sameLimit compares 7", n)
	}
	a := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 1, Period: 2, Burst: 3, MaxDelay: 4, Calendar: 1, Zone: time.UTC}
	if !sameLimit(&a, &a) {
		t.Fatal("a limit differs from itself")
	}
	for i := range 7 {
		b := a
		f := reflect.ValueOf(&b).Elem().Field(i)
		switch f.Kind() {
		case reflect.Pointer:
			f.SetZero()
		case reflect.Uint8:
			f.SetUint(f.Uint() + 1)
		default:
			f.SetInt(f.Int() + 1)
		}
		if sameLimit(&a, &b) {
			t.Errorf("sameLimit ignores field %s", reflect.TypeFor[algo.Limit]().Field(i).Name)
		}
	}
}
