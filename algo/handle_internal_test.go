package algo

import (
	"reflect"
	"testing"
	"time"
)

// TestSameLimit checks that Limit.same compares every field of a Limit:
// a request whose limit differs from its handle's in any field must not
// be decided under the handle.
func TestSameLimit(t *testing.T) {
	if n := reflect.TypeFor[Limit]().NumField(); n != 7 {
		t.Fatalf("Limit has %d fields; same compares 7", n)
	}
	a := Limit{Algorithm: LeakyBucket, Rate: 1, Period: 2, Burst: 3, MaxDelay: 4, Calendar: 1, Zone: time.UTC}
	if !a.same(&a) {
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
		if a.same(&b) {
			t.Errorf("same ignores field %s", reflect.TypeFor[Limit]().Field(i).Name)
		}
	}
}
